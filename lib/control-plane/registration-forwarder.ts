/**
 * RegisterInferenceServer, forwarded transparently (SPEC §5): each Pylon stream is spliced
 * to a stream on a pooled HTTP/2 session to the pod its :authority names. Messages pass as
 * opaque DATA chunks in both directions, full duplex; headers, metadata and trailers are
 * copied unchanged. A congested side pauses the other (Node stream backpressure plus HTTP/2
 * flow control), so nothing buffers without bound.
 *
 *   Pylon ──down (ServerHttp2Stream)──▶ router ──up (ClientHttp2Stream)──▶ Stargate pod
 *
 * Handlers are module-level functions that find their splice through a symbol on the stream,
 * so a stream costs no closures. Errors reach the Pylon as gRPC statuses; a lost upstream is
 * UNAVAILABLE (never INTERNAL) so that the Pylon re-registers.
 *
 * Every write of the pod's headers and trailers to the Pylon is guarded: Node
 * validates them again when they are re-sent (e.g. ERR_HTTP2_HEADER_SINGLE_VALUE for two
 * content-type fields, which nghttp2 lets through), and a throw inside these event handlers
 * would end the process and every Pylon's stream with it. Such a response ends that one stream
 * with UNAVAILABLE `stargate target sent an invalid response`, counted as invalid_response.
 * Every status and message the Pylon can get from here is a code of GRPC_ERRORS (errors.ts).
 */
import http2, { type ClientHttp2Stream, type IncomingHttpHeaders, type ServerHttp2Stream } from 'node:http2'
import { resolveAuthority } from '../routing/resolve.ts'
import type { HostnameTemplate } from '../routing/hostname-template.ts'
import type { PodTarget, SnapshotReader } from '../discovery/types.ts'
import { PodDrain } from '../drain/pod-drain.ts'
import type { RouterMetrics } from '../metrics/metrics.ts'
import type { Logger } from '../log.ts'
import { respondWithStatus } from './grpc.ts'
import { GRPC_ERRORS, grpcError, type GrpcError, type GrpcErrorCode } from './errors.ts'
import { GrpcFrameGuard } from './grpc-frame-guard.ts'
import { respondIfOpen } from '../safe-io.ts'
import type { UpstreamConnectError, UpstreamPool } from './upstream-pool.ts'

import type { RegistrationOutcome } from './registration-outcomes.ts'
import { splitHostPort } from '../host-port.ts'

export interface RegistrationForwarderOptions {
  readonly snapshot: SnapshotReader
  readonly template: HostnameTemplate
  readonly pool: UpstreamPool
  /** 'http' for h2c upstreams, 'https' with --upstream-tls. */
  readonly upstreamScheme: 'http' | 'https'
  readonly drainGraceMs: number
  readonly maxMessageBytes: number
  readonly metrics: RouterMetrics
  readonly logger: Logger
}

const { NGHTTP2_CANCEL, HTTP2_FLAG_END_STREAM } = { NGHTTP2_CANCEL: http2.constants.NGHTTP2_CANCEL, HTTP2_FLAG_END_STREAM: 0x1 }

const kSplice = Symbol('splice')
type Down = ServerHttp2Stream & { [kSplice]?: Splice }
type Up = ClientHttp2Stream & { [kSplice]?: Splice }

class Splice {
  readonly forwarder: RegistrationForwarder
  readonly down: Down
  readonly target: PodTarget
  readonly guard: GrpcFrameGuard
  readonly startedAt: number
  up: Up | null = null
  trailers: IncomingHttpHeaders | null = null
  outcome: RegistrationOutcome | null = null
  finished = false

  constructor (forwarder: RegistrationForwarder, down: Down, target: PodTarget, guard: GrpcFrameGuard) {
    this.forwarder = forwarder
    this.down = down
    this.target = target
    this.guard = guard
    this.startedAt = performance.now()
  }
}

// --- downstream (Pylon) events -------------------------------------------------------------

/** openStream's callback: one module-level function, the splice as its context. */
function onUpstreamOpen (splice: Splice, err: UpstreamConnectError | null, up: Up | null): void {
  splice.forwarder.upstreamOpened(splice, err, up)
}

function onDownData (this: Down, chunk: Buffer): void {
  const splice = this[kSplice]
  if (splice === undefined || splice.up === null) return
  const violation = splice.guard.check(chunk)
  if (violation !== null) {
    const error = violation.kind === 'too_large'
      ? grpcError('message_too_large', { size: violation.size, max: splice.forwarder.maxMessageBytes })
      : grpcError('compressed_without_encoding')
    splice.forwarder.fail(splice, error, GRPC_ERRORS[violation.kind === 'too_large' ? 'message_too_large' : 'compressed_without_encoding'].outcome)
    return
  }
  if (!splice.up.write(chunk)) this.pause()
}

function onDownEnd (this: Down): void {
  const splice = this[kSplice]
  if (splice === undefined || splice.up === null) return
  if (!splice.guard.atBoundary) {
    // A length prefix promised more bytes than the Pylon sent before ending the stream.
    splice.forwarder.fail(splice, grpcError('truncated_message'), GRPC_ERRORS.truncated_message.outcome)
    return
  }
  if (!splice.up.destroyed) splice.up.end()
}

function onDownDrain (this: Down): void {
  this[kSplice]?.up?.resume()
}

function onDownClose (this: Down): void {
  const splice = this[kSplice]
  if (splice === undefined) return
  const up = splice.up
  // A cancelled or vanished Pylon cancels the upstream stream at once.
  if (up !== null && !up.closed) up.close(NGHTTP2_CANCEL)
  splice.forwarder.finish(splice, splice.outcome ?? 'forwarded')
}

function onDownWantTrailers (this: Down): void {
  const splice = this[kSplice]
  if (splice === undefined) return
  const trailers = splice.trailers
  if (trailers === null) {
    this.sendTrailers(trailersOf(grpcError('upstream_no_status')))
    return
  }
  try {
    this.sendTrailers(copyTrailers(trailers))
  } catch (err) {
    splice.forwarder.noteInvalidResponse(splice, err as Error)
    this.sendTrailers(trailersOf(grpcError('upstream_invalid_response')))
  }
}

// --- upstream (Stargate) events ------------------------------------------------------------

function onUpResponse (this: Up, _headers: IncomingHttpHeaders, flags: number, rawHeaders: string[]): void {
  const splice = this[kSplice]
  if (splice === undefined) return
  const trailersOnly = (flags & HTTP2_FLAG_END_STREAM) !== 0
  // Trailers-only response (a status without messages): pass it on as one HEADERS frame.
  const sent = respondIfOpen(splice.down, withoutConnectionHeaders(rawHeaders), trailersOnly ? { endStream: true } : { waitForTrailers: true })
  if (!sent.ok) {
    if (sent.reason === 'stream_gone') return
    splice.forwarder.noteInvalidResponse(splice, sent.err)
    splice.forwarder.fail(splice, grpcError('upstream_invalid_response'), GRPC_ERRORS.upstream_invalid_response.outcome)
    return
  }
  if (trailersOnly) splice.outcome ??= 'forwarded'
}

function onUpData (this: Up, chunk: Buffer): void {
  const splice = this[kSplice]
  if (splice === undefined) return
  const down = splice.down
  if (down.closed || down.destroyed) return
  if (!down.write(chunk)) this.pause()
}

function onUpTrailers (this: Up, trailers: IncomingHttpHeaders): void {
  const splice = this[kSplice]
  if (splice !== undefined) splice.trailers = trailers
}

function onUpEnd (this: Up): void {
  const splice = this[kSplice]
  if (splice === undefined) return
  splice.outcome ??= 'forwarded'
  const down = splice.down
  if (!down.closed && !down.destroyed && down.headersSent && !down.writableEnded) down.end()
}

function onUpClose (this: Up): void {
  const splice = this[kSplice]
  if (splice === undefined) return
  const down = splice.down
  if (down.closed || down.destroyed) return
  if (splice.outcome !== null && (down.writableEnded || this.rstCode === http2.constants.NGHTTP2_NO_ERROR)) return
  // Reset by the pod, or its session died: UNAVAILABLE so that the Pylon registers again.
  splice.forwarder.fail(splice, grpcError('upstream_reset', { target: splice.target.identity }), GRPC_ERRORS.upstream_reset.outcome)
}

function onUpError (this: Up): void {
  // Reported through 'close' (rstCode); without a listener the error would be thrown.
}

function trailersOf (error: GrpcError): Record<string, string> {
  return { 'grpc-status': String(error.status), 'grpc-message': error.message }
}

function withoutConnectionHeaders (raw: readonly string[]): string[] {
  // Connection-specific fields are forbidden in HTTP/2 (RFC 9113 §8.2.2); Node never
  // delivers them, so the raw list is passed through as received.
  return raw as string[]
}

function copyTrailers (trailers: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {}
  for (const key in trailers) {
    const value = trailers[key]
    if (value !== undefined && key.charCodeAt(0) !== 58 /* : */) out[key] = value
  }
  return out
}

/** The upstream request's header list: the Pylon's own, with :scheme of the upstream leg. */
function upstreamHeaders (rawHeaders: readonly string[], scheme: string): string[] {
  const out: string[] = []
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string
    out.push(name, name === ':scheme' ? scheme : rawHeaders[i + 1] as string)
  }
  return out
}

export class RegistrationForwarder {
  readonly #options: RegistrationForwarderOptions
  /**
   * Open splices follow their pod: ended with UNAVAILABLE when it terminates or leaves the
   * Service (the pool's session re-dials a pod that only moved, so the identity is what counts).
   */
  readonly #drain: PodDrain<Splice>
  readonly maxMessageBytes: number

  constructor (options: RegistrationForwarderOptions) {
    this.#options = options
    this.maxMessageBytes = options.maxMessageBytes
    this.#drain = new PodDrain({ snapshot: options.snapshot, graceMs: options.drainGraceMs, bound: 'identity', onDrained: onTargetLeft })
  }

  /** Open registration streams (downstream side). */
  get active (): number {
    return this.#drain.size
  }

  handle (down: Down, headers: IncomingHttpHeaders, rawHeaders: readonly string[]): void {
    const { metrics } = this.#options
    metrics.registrationStreamsOpened.inc()
    const authority = headers[':authority']
    const route = resolveAuthority(authority, this.#options.snapshot.current(), this.#options.template)
    if (!route.ok) {
      switch (route.reason) {
        case 'missing_authority':
          this.#reject(down, 'missing_authority', grpcError('missing_authority'))
          return
        case 'unknown_authority':
          this.#reject(down, 'unknown_authority', grpcError('unknown_authority', { host: splitHostPort(authority ?? '').host }))
          return
        case 'target_unavailable':
          this.#reject(down, 'target_unavailable', grpcError('target_unavailable', { target: route.identity }))
          return
        default: {
          const never: never = route
          throw new Error(`unhandled route failure ${String(never)}`)
        }
      }
    }
    const encoding = headers['grpc-encoding']
    const guard = new GrpcFrameGuard(this.maxMessageBytes, encoding !== undefined && encoding !== 'identity')
    const splice = new Splice(this, down, route.target, guard)
    down[kSplice] = splice
    metrics.registrationStreamsActive.inc()
    this.#drain.follow(splice, route.target)
    // Nothing flows until the upstream stream exists; HTTP/2 flow control holds the Pylon.
    down.pause()
    down.on('close', onDownClose)
    this.#options.pool.openStream(route.target, upstreamHeaders(rawHeaders, this.#options.upstreamScheme), splice, onUpstreamOpen)
  }

  /** The pool's answer to openStream (through onUpstreamOpen). */
  upstreamOpened (splice: Splice, err: UpstreamConnectError | null, up: Up | null): void {
    const down = splice.down
    if (err !== null) {
      // The pool's error carries the message of its code (GRPC_ERRORS, filled where it failed).
      this.fail(splice, { status: GRPC_ERRORS[err.code].status, message: err.message }, GRPC_ERRORS[err.code].outcome)
      return
    }
    if (up === null) {
      this.fail(splice, grpcError('connect_failed', { cause: 'no stream' }), GRPC_ERRORS.connect_failed.outcome)
      return
    }
    if (down.closed || down.destroyed || splice.finished) {
      up.close(NGHTTP2_CANCEL)
      return
    }
    splice.up = up
    up[kSplice] = splice
    up.on('response', onUpResponse)
    up.on('data', onUpData)
    up.on('trailers', onUpTrailers)
    up.on('end', onUpEnd)
    up.on('close', onUpClose)
    up.on('error', onUpError)
    down.on('data', onDownData)
    down.on('end', onDownEnd)
    down.on('drain', onDownDrain)
    down.on('wantTrailers', onDownWantTrailers)
    up.on('drain', onUpDrain)
    down.resume()
  }

  /** Ends the Pylon's stream with a status and cancels the upstream one. */
  fail (splice: Splice, error: GrpcError, outcome: RegistrationOutcome): void {
    if (splice.outcome === null || outcome !== 'forwarded') splice.outcome = outcome
    const up = splice.up
    if (up !== null && !up.closed) up.close(NGHTTP2_CANCEL)
    const down = splice.down
    if (down.headersSent) {
      // Trailers may already be queued by the normal path; only end it if it is still open.
      if (!down.writableEnded) {
        splice.trailers = trailersOf(error)
        down.end()
      }
    } else {
      respondWithStatus(down, error.status, error.message)
    }
    if (outcome !== 'forwarded') this.#options.logger.debug({ target: splice.target.identity, outcome, message: error.message }, 'registration stream ended by the router')
  }

  /** A pod's headers or trailers could not be re-sent to the Pylon: logged and counted. */
  noteInvalidResponse (splice: Splice, err: Error & { code?: string }): void {
    splice.outcome = 'invalid_response'
    this.#options.logger.warn({ target: splice.target.identity, err: err.code ?? err.message }, GRPC_ERRORS.upstream_invalid_response.message)
  }

  /** Called once per splice when the Pylon's stream closes. */
  finish (splice: Splice, outcome: RegistrationOutcome): void {
    if (splice.finished) return
    splice.finished = true
    this.#drain.forget(splice)
    const { metrics } = this.#options
    metrics.registrationStreamsActive.dec()
    metrics.registrationStreamsClosed.labels(outcome).inc()
    metrics.registrationStreamDuration.observe((performance.now() - splice.startedAt) / 1000)
  }

  /**
   * Ends one open registration stream with the status of code (its connection drains) and
   * cancels the upstream one; false when the stream is no registration being forwarded.
   */
  end (down: ServerHttp2Stream, code: GrpcErrorCode): boolean {
    const splice = (down as Down)[kSplice]
    if (splice === undefined || splice.finished) return false
    const error = GRPC_ERRORS[code]
    this.fail(splice, error, error.outcome ?? 'drained')
    return true
  }

  /** Stops following the pods; open streams are left to the front door's shutdown. Idempotent. */
  close (): void {
    this.#drain.dispose()
  }

  #reject (down: ServerHttp2Stream, code: 'missing_authority' | 'unknown_authority' | 'target_unavailable', error: GrpcError): void {
    respondWithStatus(down, error.status, error.message)
    this.#options.metrics.registrationStreamsClosed.labels(GRPC_ERRORS[code].outcome).inc()
  }
}

function onUpDrain (this: Up): void {
  this[kSplice]?.down.resume()
}

/** The splice's pod terminated or left the Service and did not come back within the grace. */
function onTargetLeft (splice: Splice): void {
  if (splice.finished) return
  splice.forwarder.fail(splice, grpcError('target_left', { target: splice.target.identity }), GRPC_ERRORS.target_left.outcome)
}

