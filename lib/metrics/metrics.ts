/**
 * Every router metric, created on a registry passed in (tests use their own). Names keep
 * the Rust router's prefix; label sets are bounded (no identities or addresses).
 * docs/metrics.md lists each one; test/unit/metrics-docs.test.ts keeps the two in step.
 */
import { type Counter, type Gauge, type Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import { defineMetrics } from './define.ts'
import { SKIP_REASONS } from '../discovery/endpoint-slice.ts'
import { REGISTRATION_OUTCOMES } from '../control-plane/registration-outcomes.ts'
import { createTlsMetrics, type TlsMetrics } from '../tls/metrics.ts'
import { createPeerMetrics, type PeerMetrics } from '../discovery/peer-metrics.ts'
import { createRebalanceMetrics, type RebalanceMetrics } from '../rebalance/rebalance-metrics.ts'
import { createWebTransportMetrics, type WebTransportMetrics } from '../tunnel/webtransport-metrics.ts'
import { createRawQuicMetrics, type RawQuicMetrics } from '../tunnel/raw-quic/metrics.ts'
import { createLimitMetrics, type LimitMetrics } from './limits-metrics.ts'
import { createDrainMetrics, type DrainMetrics } from '../drain/drain-metrics.ts'
import { CONTAINED_CODES } from '../uncaught-errors.ts'
import { createNativeHeapMetrics, type NativeHeapMetrics } from './native-heap-metrics.ts'

/** Refusals of one client's request by a per-client limit (the error codes sent). */
const CLIENT_LIMIT_REASONS = ['request_timeout', 'body_rate_too_low', 'body_deadline_exceeded', 'client_over_share', 'response_stalled', 'pipelined_requests'] as const

/** LLM request bodies being read before their pod connection, and their bytes. */
export interface BufferedBodies {
  readonly requests: number
  readonly bytes: number
}

export interface RouterMetrics extends TlsMetrics, PeerMetrics, RebalanceMetrics {
  readonly registry: Registry
  readonly webtransport: WebTransportMetrics
  readonly quic: RawQuicMetrics
  /** Listener caps and timeouts. */
  readonly limits: LimitMetrics
  /** Connections drained, streams refused while draining, connections open by kind (SPEC §11). */
  readonly drain: DrainMetrics
  readonly discoveryWatchRestarts: Counter
  readonly discoverySnapshotAge: Gauge
  readonly discoveryTargets: Gauge
  readonly discoveryTargetsNotServing: Gauge
  readonly discoveryUnreadyPods: Gauge
  readonly discoverySnapshotGeneration: Gauge
  readonly discoverySnapshotPublishes: Counter
  readonly endpointSliceSkipped: Counter<'reason'>
  readonly targetsFileReloads: Counter<'result'>
  readonly watchStreamsActive: Gauge
  readonly watchMessagesSent: Counter<'reason'>
  readonly watchEncodeDuration: Histogram
  readonly registrationStreamsOpened: Counter
  readonly registrationStreamsActive: Gauge
  readonly registrationStreamsClosed: Counter<'outcome'>
  readonly registrationStreamDuration: Histogram
  readonly upstreamSessions: Gauge
  readonly httpRequests: Counter<'outcome' | 'status_class'>
  readonly httpRequestsInFlight: Gauge
  readonly httpRequestDuration: Histogram
  readonly httpTimeToFirstByte: Histogram
  readonly http2RapidResetCloses: Counter
  readonly httpClientLimitRefusals: Counter<'reason'>
  readonly httpBodiesBuffering: Gauge
  readonly httpBodyBufferedBytes: Gauge
  readonly tlsHandshakeFailures: Counter<'listener'>
  /** Uncaught errors the process survived (lib/uncaught-errors.ts), by code. */
  readonly uncaughtErrors: Counter<'kind'>
  /** malloc's heap and the trims (lib/native-heap-trim.ts). */
  readonly nativeHeap: NativeHeapMetrics
  /** Where discovery_snapshot_age_seconds reads its value at scrape time. */
  setSnapshotAgeSource (source: () => number): void
  /** Where the buffered request body gauges read their values at scrape time (the HTTP forwarder). */
  setBufferedBodiesSource (source: () => BufferedBodies): void
}

export function createMetrics (registry: Registry = new Registry(), options: { defaultMetrics?: boolean } = {}): RouterMetrics {
  if (options.defaultMetrics !== false) collectDefaultMetrics({ register: registry })
  const define = defineMetrics(registry)
  let ageSource: (() => number) | null = null
  let bodySource: (() => BufferedBodies) | null = null
  return {
    registry,
    ...createTlsMetrics(registry),
    ...createPeerMetrics(registry),
    ...createRebalanceMetrics(registry),
    webtransport: createWebTransportMetrics(registry),
    quic: createRawQuicMetrics(registry),
    limits: createLimitMetrics(registry),
    drain: createDrainMetrics(registry),
    nativeHeap: createNativeHeapMetrics(registry),
    discoveryWatchRestarts: define.counter('discovery_watch_restarts_total', 'EndpointSlice list/watch restarts after an error (the informer stops on any non-410 error)'),
    discoverySnapshotAge: define.gauge(
      'discovery_snapshot_age_seconds',
      'Seconds since the target snapshot was last known to be current; 0 while the watch is connected',
      {}, function () { if (ageSource !== null) this.set(ageSource()) }),
    discoveryTargets: define.gauge('discovery_targets', 'Ready Stargate targets in the current snapshot'),
    discoveryTargetsNotServing: define.gauge('discovery_targets_not_serving', 'Targets whose endpoint is not serving (warming behind a publishNotReadyAddresses Service): advertised and routed for registrations and tunnels, never sent LLM client HTTP'),
    discoveryUnreadyPods: define.gauge('discovery_unready_pods', 'Pods listed neither ready nor terminating: not targets, but the registrations and tunnels already relayed to them are kept'),
    discoverySnapshotGeneration: define.gauge('discovery_snapshot_generation', 'Generation of the current target snapshot (0 while uninitialized)'),
    discoverySnapshotPublishes: define.counter('discovery_snapshot_publishes_total', 'Target snapshots published (each one changed the targets or the unready pods)'),
    endpointSliceSkipped: define.counter('endpointslice_skipped_total', 'EndpointSlices or endpoints that contributed no target, by reason', { reason: SKIP_REASONS }),
    targetsFileReloads: define.counter('targets_file_reloads_total', 'Reads of the --targets-file, by result (a rejected file keeps the last good snapshot)', { result: ['success', 'rejected'] }),
    watchStreamsActive: define.gauge('watch_streams_active', 'Open WatchStargates streams'),
    watchMessagesSent: define.counter('watch_messages_sent_total', 'WatchStargates messages written to streams, by reason (initial, change, heartbeat)', { reason: ['initial', 'change', 'heartbeat'] }),
    watchEncodeDuration: define.histogram('watch_encode_duration_seconds', 'Time to encode the WatchStargates message of one snapshot generation (shared by all watchers)', [0.00001, 0.0001, 0.001, 0.01, 0.1]),
    registrationStreamsOpened: define.counter('registration_streams_opened_total', 'RegisterInferenceServer streams received from Pylons'),
    registrationStreamsActive: define.gauge('registration_streams_active', 'RegisterInferenceServer streams currently forwarded to a Stargate pod'),
    registrationStreamsClosed: define.counter('registration_streams_closed_total', 'RegisterInferenceServer streams ended, by outcome (forwarded, invalid_argument, target_unavailable, connect_error, upstream_reset, drained, invalid_response: the pod sent headers or trailers that cannot be forwarded)', { outcome: REGISTRATION_OUTCOMES }),
    registrationStreamDuration: define.histogram('registration_stream_duration_seconds', 'Lifetime of forwarded RegisterInferenceServer streams', [0.01, 0.1, 1, 10, 60, 300, 900, 3600, 14400]),
    upstreamSessions: define.gauge('upstream_sessions', 'HTTP/2 client sessions to Stargate pods (connecting or connected), over all pods'),
    // Outcomes are error codes and status classes follow them: only the usual pair starts at 0.
    httpRequests: define.counter('http_requests_total', 'LLM client HTTP requests by outcome (forwarded, client_aborted, client_stalled (closed by the response stall timeout), or the error code sent) and response status class', { outcome: ['forwarded'], status_class: ['2xx'] }),
    httpRequestsInFlight: define.gauge('http_requests_in_flight', 'LLM client HTTP requests being forwarded right now'),
    httpRequestDuration: define.histogram('http_request_duration_seconds', 'Time from receiving an LLM client request to the end of its response (SSE streams included)', [0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 60, 180, 600]),
    httpTimeToFirstByte: define.histogram('http_time_to_first_byte_seconds', 'Time from receiving an LLM client request to the pod\'s response headers', [0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]),
    httpClientLimitRefusals: define.counter('http_client_limit_refusals_total', 'LLM client requests refused by a per-client limit, by reason: request_timeout (the body went silent), body_rate_too_low, body_deadline_exceeded, client_over_share (the client holds its share of the pod\'s connections), response_stalled (the client took no response bytes for --http-response-stall-timeout-ms: its connection closed, the pod\'s released), pipelined_requests (an HTTP/1.1 connection with more than 16 requests waiting behind the one forwarded: closed)', { reason: CLIENT_LIMIT_REASONS }),
    httpBodiesBuffering: define.gauge('http_request_bodies_buffering', 'LLM client requests whose body is being read before a pod connection is taken (--http-body-buffer-bytes)', {}, function () { if (bodySource !== null) this.set(bodySource().requests) }),
    httpBodyBufferedBytes: define.gauge('http_request_body_buffered_bytes', 'Bytes of LLM client request bodies held in memory while they are read before a pod connection is taken', {}, function () { if (bodySource !== null) this.set(bodySource().bytes) }),
    http2RapidResetCloses: define.counter('http2_rapid_reset_closes_total', 'HTTP/2 connections closed with GOAWAY ENHANCE_YOUR_CALM because most of their streams were reset right after opening'),
    tlsHandshakeFailures: define.counter('tls_handshake_failures_total', 'Failed inbound TLS handshakes (bad or missing client certificate, protocol errors), by listener', { listener: ['front_door', 'webtransport'] }),
    uncaughtErrors: define.counter('uncaught_errors_total', 'Exceptions and promise rejections nobody caught that concerned one connection already closed or ended by its peer, by error code; the process kept serving (any other uncaught error ends it with exit 1)', { kind: CONTAINED_CODES }),
    setSnapshotAgeSource (source) { ageSource = source },
    setBufferedBodiesSource (source) { bodySource = source },
  }
}
