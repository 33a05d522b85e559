/**
 * The gRPC statuses the control plane sends (SPEC §5): registration (RegisterInferenceServer),
 * WatchStargates, the method routing and the front door's header limit on gRPC streams. One
 * table, code → status, message and the registration outcome it is counted as, so the status a
 * Pylon sees, the metric and the docs (docs/errors.md, via lib/errors.ts) cannot drift apart.
 *
 * A lost or unready upstream is UNAVAILABLE, never INTERNAL, so that the Pylon registers again;
 * the wording of the messages follows the Rust stargate-k8s-router's (tests hold them).
 */
import { catalogueArea, fillMessage, type ErrorDoc, type IsStatic, type Placeholders } from '../error-catalogue.ts'
import { GrpcStatus, type GrpcStatusCode } from './grpc.ts'
import type { RegistrationOutcome } from './registration-outcomes.ts'

interface GrpcErrorSpec extends ErrorDoc {
  readonly status: GrpcStatusCode
  readonly message: string
  /** The registration_streams_closed outcome it counts as; null where no registration is open. */
  readonly outcome: RegistrationOutcome | null
}

export const GRPC_ERRORS = {
  // Registration: routing the stream by :authority (before any upstream work)
  missing_authority: {
    status: GrpcStatus.INVALID_ARGUMENT,
    outcome: 'invalid_argument',
    message: 'registration requires a target stargate authority',
    meaning: 'the registration stream carries no :authority, so it names no stargate',
    action: 'configure the Pylon with the advertised stargate address it got from WatchStargates',
  },
  unknown_authority: {
    status: GrpcStatus.INVALID_ARGUMENT,
    outcome: 'invalid_argument',
    message: 'registration authority {host} does not match advertised stargate hostname template',
    meaning: 'the :authority does not render from --advertised-hostname-template, so the router cannot tell which pod it names',
    action: 'make the Pylon dial the advertise_addr of WatchStargates; check that every replica has the same --advertised-hostname-template',
  },
  target_unavailable: {
    status: GrpcStatus.UNAVAILABLE,
    outcome: 'target_unavailable',
    message: 'target stargate {target} is not ready',
    meaning: 'the :authority names a pod that is not a target: its endpoint is not ready (starting or failing readiness behind a readiness-respecting Service), it is terminating, or it is gone',
    action: 'none: the Pylon retries; if it persists, check the pod\'s readiness and its EndpointSlice',
  },
  // Registration: the Pylon's messages (checked as they pass, never decoded)
  message_too_large: {
    status: GrpcStatus.RESOURCE_EXHAUSTED,
    outcome: 'invalid_argument',
    message: 'received message larger than max ({size} vs. {max})',
    meaning: 'a message on the registration stream is larger than --grpc-max-message-bytes',
    action: 'raise --grpc-max-message-bytes if the Pylon\'s messages are that large by design',
  },
  compressed_without_encoding: {
    status: GrpcStatus.INTERNAL,
    outcome: 'invalid_argument',
    message: 'received compressed message but grpc-encoding was not declared',
    meaning: 'a message has the compressed flag but the stream declared no grpc-encoding (a gRPC server rejects it too)',
    action: 'fix the client: declare grpc-encoding or send uncompressed messages',
  },
  truncated_message: {
    status: GrpcStatus.INTERNAL,
    outcome: 'invalid_argument',
    message: 'stream ended in the middle of a message',
    meaning: 'the Pylon ended its stream before the bytes a message\'s length prefix promised',
    action: 'fix the client; a proxy in between may have cut the stream',
  },
  // Registration: the upstream leg to the pod
  invalid_request: {
    status: GrpcStatus.INVALID_ARGUMENT,
    outcome: 'invalid_argument',
    message: 'registration request headers cannot be forwarded ({code})',
    meaning: 'Node refused to send the Pylon\'s header list upstream (e.g. two content-type fields); the code names the check',
    action: 'fix the client\'s metadata',
  },
  connect_failed: {
    status: GrpcStatus.UNAVAILABLE,
    outcome: 'connect_error',
    message: 'failed to connect to stargate target: {cause}',
    meaning: 'the router could not open an HTTP/2 session (or a stream on it) to the pod\'s gRPC port; the cause `the pod allows no streams (SETTINGS_MAX_CONCURRENT_STREAMS 0)` is the pod refusing every stream, `every stream the pod allows on 32 sessions is in use` the router\'s cap of 32 sessions per pod',
    action: 'none: the Pylon retries; if it persists, check the pod, its gRPC port and --upstream-tls',
  },
  connect_timeout: {
    status: GrpcStatus.UNAVAILABLE,
    outcome: 'connect_error',
    message: 'timed out connecting to stargate target',
    meaning: 'the pod did not complete the connection within --connect-timeout-ms',
    action: 'check the pod\'s load and network; raise --connect-timeout-ms on slow networks',
  },
  upstream_reset: {
    status: GrpcStatus.UNAVAILABLE,
    outcome: 'upstream_reset',
    message: 'stargate target {target} reset the stream',
    meaning: 'the pod reset the registration stream, or its session died, before the stream ended',
    action: 'none: the Pylon registers again; check the pod\'s logs if it repeats',
  },
  upstream_no_status: {
    status: GrpcStatus.UNAVAILABLE,
    outcome: null,
    message: 'stargate target ended the stream without a status',
    meaning: 'the pod ended its response without grpc-status trailers',
    action: 'check the stargate; the Pylon registers again',
  },
  upstream_invalid_response: {
    status: GrpcStatus.UNAVAILABLE,
    outcome: 'invalid_response',
    message: 'stargate target sent an invalid response',
    meaning: 'the pod\'s headers or trailers cannot be re-sent to the Pylon (Node\'s checks; the warn log names the error)',
    action: 'fix the stargate; the Pylon registers again',
  },
  target_left: {
    status: GrpcStatus.UNAVAILABLE,
    outcome: 'drained',
    message: 'target stargate {target} left the ready set',
    meaning: 'the pod started terminating or left the Service and did not come back within --drain-grace-ms (a pod that only turns unready keeps its streams)',
    action: 'none: the Pylon registers with another stargate',
  },
  // WatchStargates
  starting: {
    status: GrpcStatus.UNAVAILABLE,
    outcome: null,
    message: 'router is starting',
    meaning: 'the watch arrived while the router was still opening its listeners: it advertises no Stargate before their tunnels can be opened through it',
    action: 'none: the Pylon watches again',
  },
  // Both RPCs
  shutting_down: {
    status: GrpcStatus.UNAVAILABLE,
    outcome: 'drained',
    message: 'router is shutting down',
    meaning: 'the router is draining (SIGTERM): Watch and registration streams end at once (and a stream opened on a draining connection is refused), then the connection gets GOAWAY',
    action: 'none: the Pylon watches and registers again through another replica while this one drains',
  },
  rebalancing: {
    status: GrpcStatus.UNAVAILABLE,
    outcome: 'drained',
    message: 'router is moving this connection to another replica',
    meaning: 'replica balancing (--rebalance) moves this Pylon connection off a replica above the mean: its Watch and registration streams end at once (a stream still opened on it is refused), then the connection gets GOAWAY',
    action: 'none: the Pylon re-dials, and the load balancer places the new connection afresh',
  },
  headers_too_large: {
    status: GrpcStatus.RESOURCE_EXHAUSTED,
    outcome: null,
    message: 'request headers exceed {max_bytes} bytes',
    meaning: 'the gRPC request\'s header list is larger than --http2-max-header-list-bytes (RFC 7541 §4.1 size)',
    action: 'send less metadata, or raise --http2-max-header-list-bytes',
  },
  // Method routing (the front door's gRPC routes, lib/front-door/front-door.ts)
  method_not_post: {
    status: GrpcStatus.UNIMPLEMENTED,
    outcome: null,
    message: 'gRPC requires POST, got {method}',
    meaning: 'a gRPC content-type on a request that is not a POST',
    action: 'fix the client',
  },
  unknown_method: {
    status: GrpcStatus.UNIMPLEMENTED,
    outcome: null,
    message: 'unknown method {path}',
    meaning: 'the router serves WatchStargates and RegisterInferenceServer of stargate.StargateControlPlane only',
    action: 'check the client\'s service and method names',
  },
} as const satisfies Record<string, GrpcErrorSpec>

export type GrpcErrorCode = keyof typeof GRPC_ERRORS

/** A status and message to end a stream with. */
export interface GrpcError {
  readonly status: GrpcStatusCode
  readonly message: string
}

type FieldsOf<K extends GrpcErrorCode> = IsStatic<typeof GRPC_ERRORS[K]['message']> extends true
  ? []
  : [fields: Readonly<Record<Placeholders<typeof GRPC_ERRORS[K]['message']>, string | number>>]

/** The status and message of a code, its placeholders filled (error paths only). */
export function grpcError<K extends GrpcErrorCode> (code: K, ...fields: FieldsOf<K>): GrpcError {
  const spec: GrpcErrorSpec = GRPC_ERRORS[code]
  return { status: spec.status, message: fields.length === 0 ? spec.message : fillMessage(spec.message, fields[0] as Record<string, string | number>) }
}

const STATUS_NAMES: ReadonlyMap<number, string> = new Map(Object.entries(GrpcStatus).map(([name, code]) => [code, name]))

export const GRPC_ERROR_AREA = catalogueArea(GRPC_ERRORS, 'GRPC_ERRORS', 'lib/control-plane/errors.ts', (e) => `${STATUS_NAMES.get(e.status) ?? e.status} \`${e.message}\``, {
  title: 'Control plane (gRPC on the front door)',
  where: 'gRPC statuses ending WatchStargates and RegisterInferenceServer streams: `grpc-status` and `grpc-message` (trailers, or a trailers-only response).',
})
