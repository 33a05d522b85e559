/**
 * LLM client HTTP forwarding (SPEC §6): every non-gRPC request of the front door, HTTP/1.1 or
 * h2, goes to a ready pod's http port with undici. The pod is the one the Host names through
 * the hostname template, else the less loaded of two random ready pods. Responses stream
 * without buffering (SSE tokens are written as they arrive) with backpressure in both
 * directions; a client that goes away aborts the upstream request at once.
 *
 * A slow client costs a pod nothing it cannot afford (SPEC §12):
 *
 *   head ──▶ route, early refusals ──▶ read the body into memory, up to --http-body-buffer-bytes
 *                                          │ whole body in        │ more than the buffer holds
 *                                          ▼                      ▼
 *                                     sent as one buffer     the buffered bytes are put back
 *                                                            in front of the stream, which
 *                                                            then flows to the pod
 *                                          └──────────┬───────────┘
 *                                                     ▼
 *                  admission: pod busy? client over its share? ──▶ a pod connection (pod-connections.ts)
 *
 * so a request holds a pod connection only once its body is in, or the buffer is full. While
 * a body is read (before and after admission) it must keep a minimum rate and meet a deadline
 * (body-pace.ts), checked on one coarse tick for all requests. One client address
 * (client-address.ts) may hold at most --http-upstream-max-client-share-percent of a pod's
 * connections, counting the requests holding or waiting for one.
 *
 * A slow reader costs a pod nothing it cannot afford either: while the client does not take
 * the response (its socket or stream is full, and the pod is held back in turn), a stall timer
 * runs; after --http-response-stall-timeout-ms without the client taking a byte, the client's
 * connection is closed and the pod's connection destroyed (a request undici has not finished
 * is never handed back idle). Checked on one coarse tick for all stalled responses.
 *
 * A failure before any byte of the request was written to the pod (connect refused or timed
 * out, unreachable: undici had not called onConnect yet) is retried once on another pod;
 * nothing that may have reached a pod is retried, so a DELETE never runs twice.
 * Errors are JSON with x-stargate-error-code.
 *
 * Limits: at most --http-upstream-max-connections connections per pod, and at most
 * --http-upstream-max-queue requests waiting for one; beyond that 503 upstream_busy. A pod's
 * response the router cannot re-encode (e.g. two content-type fields for an HTTP/2 client) is a
 * 502 upstream_invalid_response for that request, never an exception. `Expect: 100-continue`
 * is answered by the router once the request is routed. An error answered while the client may
 * still be sending a body closes the connection instead of reading the rest.
 *
 * HTTP/1.1 requests of one connection are forwarded one at a time (lib/serial-requests.ts):
 * their answers leave in order anyway, so a pipelining client holds at most one pod connection
 * per TCP connection, and one with more than MAX_PIPELINED requests waiting is closed.
 *
 * Each request is one Exchange object, which is also the undici dispatch handler (undici's
 * native callback interface: no wrapper objects, no header parsing into objects).
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { constants as h2constants, type Http2ServerRequest, type Http2ServerResponse, type ServerHttp2Stream } from 'node:http2'
import type { TLSSocket } from 'node:tls'
import type { Dispatcher } from 'undici'
import type { HostnameTemplate } from '../routing/hostname-template.ts'
import type { SnapshotReader } from '../discovery/types.ts'
import type { RouterMetrics } from '../metrics/metrics.ts'
import type { RequestLog } from '../log.ts'
import { ERROR_BODIES, HTTP_ERRORS, type HttpErrorCode, type StaticHttpErrorCode } from './errors.ts'
import { downstreamResponseHeaders, upstreamRequestHeaders } from './headers.ts'
import { resolveRequestTarget } from './request-target.ts'
import { resolveAuthority } from '../routing/resolve.ts'
import type { TrustedProxies } from './trusted-proxies.ts'
import { refusalFor, type HttpPod, type HttpPods } from './pods.ts'
import { lateConnect, UpstreamAbortError, type PodRequest, type PodSlot } from './pod-connections.ts'
import { BodyPace, type BodyLimits, type BodyVerdict } from './body-pace.ts'
import { clientKeyOf } from './client-address.ts'
import { BodyBuffer } from './body-buffer.ts'
import { SerialRequests } from '../serial-requests.ts'
import type { Socket } from 'node:net'

type Req = IncomingMessage | Http2ServerRequest
type Res = ServerResponse | Http2ServerResponse

/** client_stalled: the client took no response bytes for the stall timeout (connection closed). */
export type HttpOutcome = 'forwarded' | 'client_aborted' | 'client_stalled' | HttpErrorCode

export interface HttpForwarderOptions {
  readonly snapshot: SnapshotReader
  readonly template: HostnameTemplate
  readonly pods: HttpPods
  readonly maxBodyBytes: number
  readonly headersTimeoutMs: number
  readonly idleTimeoutMs: number
  readonly requestTimeoutMs: number
  /** Requests per pod beyond which new ones get 503 upstream_busy (its connections + queue). */
  readonly maxPendingPerPod: number
  /** Bytes of a body read before a pod connection is taken; 0 takes one at the head. */
  readonly bodyBufferBytes: number
  /** 0: no minimum body rate. */
  readonly bodyMinBytesPerSecond: number
  readonly bodyRateWindowMs: number
  /** 0: no body deadline. */
  readonly bodyDeadlineMs: number
  /** Longest the router waits on a client to take response bytes; 0: no limit. */
  readonly responseStallTimeoutMs: number
  /** Requests one client may hold or queue for one pod (clientShareLimit); 0: no limit. */
  readonly maxPerClientPerPod: number
  readonly trustedProxies: TrustedProxies
  readonly metrics: RouterMetrics
}

/** Errors that are the request's own fault, not the pod's: never retried. */
const NOT_RETRIED = new Set(['UND_ERR_INVALID_ARG', 'UND_ERR_NOT_SUPPORTED', 'UND_ERR_ABORTED'])
/**
 * undici's response parser refused what the pod sent: an HTTPParserError (llhttp, code HPE_*
 * when undici sets one) or one of its own response checks.
 */
function isInvalidResponse (err: Error, code: string): boolean {
  return err.name === 'HTTPParserError' || code.startsWith('HPE_') || code === 'UND_ERR_HEADERS_OVERFLOW' || code === 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH' || code === 'UND_ERR_RES_EXCEEDED_MAX_SIZE' ||
    // A 101 the router never asked for: undici ends the socket with this one error.
    (code === 'UND_ERR_SOCKET' && err.message === 'bad upgrade')
}
const BODYLESS = new Set(['GET', 'HEAD', 'DELETE', 'OPTIONS', 'TRACE'])

function statusClass (status: number): string {
  return status < 200 ? '1xx' : status < 300 ? '2xx' : status < 400 ? '3xx' : status < 500 ? '4xx' : '5xx'
}

/** What a routed request brings to its exchange. */
type ExchangeStart = Pick<Exchange, 'forwarder' | 'req' | 'res' | 'pod' | 'path' | 'hostTargeted' | 'requestId' | 'log' | 'headers' | 'hasBody' | 'client'>

class Exchange implements PodRequest {
  readonly forwarder: HttpForwarder
  readonly req: Req
  readonly res: Res
  readonly requestId: string
  /** The request's logger (the front door's request logger, which carries the request id). */
  readonly log: RequestLog
  readonly startedAt: number
  readonly hostTargeted: boolean
  readonly headers: string[]
  readonly hasBody: boolean
  /** The client the per-client share counts it against ('' when that limit is off). */
  readonly client: string
  /** The pod chosen at the head, and the one dispatched to after (a retry may change it). */
  pod: HttpPod
  /** Counted in pod.inflight and pod.clients: holding or waiting for a pod connection. */
  admitted = false
  readonly path: string
  attempt = 1
  // PodRequest: owned by PodConnections.
  slot: PodSlot | null = null
  waiting = false
  /** undici called onConnect in this attempt: request bytes may have reached the pod. */
  sent = false
  /** undici reported this attempt's end (onComplete or onError). */
  settled = false
  /** The body read so far while it arrives; null once it is in or when there is none. */
  pace: BodyPace | null = null
  /** The body read before admission, while it is read; null otherwise. */
  bodyBuffer: BodyBuffer | null = null
  /** The whole body, when it was buffered; null: the request stream itself (or no body). */
  body: Buffer | null = null
  /** Bytes of the buffered prefix the stream replays after admission, not counted again. */
  replay = 0
  counting = false
  resume: (() => void) | null = null
  responded = false
  done = false
  status = 0
  firstByteAt = 0
  timer: NodeJS.Timeout | null = null
  /** Interim (1xx) responses the pod sent in this attempt, and the deadline for its final head. */
  interim = 0
  headTimer: NodeJS.Timeout | null = null
  /** HTTP/1.1 responses: the head can wait for the body in a corked socket (see onHeaders). */
  readonly corkable: boolean
  wroteBody = false
  /** HTTP/1.1: the connection whose line this request holds (SerialRequests); null for HTTP/2. */
  line: Socket | null = null
  /** When the client last stopped taking response bytes (res.write returned false); 0: it takes them. */
  stalledAt = 0

  constructor (start: ExchangeStart) {
    this.forwarder = start.forwarder
    this.log = start.log
    this.req = start.req
    this.res = start.res
    this.pod = start.pod
    this.path = start.path
    this.hostTargeted = start.hostTargeted
    this.requestId = start.requestId
    this.headers = start.headers
    this.hasBody = start.hasBody
    this.client = start.client
    this.startedAt = performance.now()
    this.corkable = !isHttp2(start.req)
  }

  dispatchOptions (): Dispatcher.DispatchOptions {
    const { options } = this.forwarder
    return {
      path: this.path,
      method: this.req.method ?? 'GET',
      headers: this.headers,
      body: this.body ?? (this.hasBody ? this.req : null),
      headersTimeout: options.headersTimeoutMs,
      bodyTimeout: options.idleTimeoutMs,
    }
  }

  // --- undici dispatch handler (native callback interface) ---

  onConnect (): void {
    if (this.done) {
      // Its client left while the connection was being opened: undici drops a request whose
      // onConnect throws and keeps the socket (pod-connections.ts).
      lateConnect(this)
      throw new UpstreamAbortError()
    }
    this.sent = true
    // A streamed body is counted from here, not earlier: a 'data' listener starts the flow, and
    // undici attaches its own reader in this same tick, so no chunk is missed by either.
    if (this.body === null && this.hasBody && !this.counting) {
      this.counting = true
      this.req.on('data', onReqData)
      if (this.req.readableEnded) this.forwarder.stopReceiving(this)
      else this.req.once('end', onReqEnd)
    }
  }

  onHeaders (statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (statusCode < 100) {
      // llhttp parses any three digits; undici then asserts on them after this returns.
      if (!this.done) this.forwarder.invalidResponse(this, Object.assign(new Error(`response status ${statusCode}`), { code: 'invalid_status' }))
      return false
    }
    if (statusCode < 200) return this.#interim()
    if (this.done) return false
    if (this.headTimer !== null) { clearTimeout(this.headTimer); this.headTimer = null }
    this.resume = resume
    this.responded = true
    this.status = statusCode
    this.firstByteAt = performance.now()
    const res = this.res as ServerResponse
    try {
      res.writeHead(statusCode, downstreamResponseHeaders(rawHeaders, this.requestId, statusCode))
    } catch (err) {
      // Bytes from a pod must not end the process: e.g. Node refuses two content-type fields
      // on an HTTP/2 response (ERR_HTTP2_HEADER_SINGLE_VALUE) or a value with control bytes.
      this.responded = false
      this.forwarder.invalidResponse(this, err as Error)
      return false
    }
    // The head leaves at the end of this tick at the latest (a streaming response may take a
    // while to produce its first chunk), but not on its own when the body came in the same
    // read, as a small response does: corked until then, head, body and end go out in one
    // write instead of two (strace: 5 → 4 syscalls per request; docs/benchmarks.md,
    // http-forward/proxy).
    if (this.corkable) {
      res.cork()
      process.nextTick(flushHead, this)
    } else {
      res.flushHeaders()
    }
    this.forwarder.options.metrics.httpTimeToFirstByte.observe((this.firstByteAt - this.startedAt) / 1000)
    return true
  }

  onData (chunk: Buffer): boolean {
    if (this.done) return false
    this.wroteBody = true
    if ((this.res as ServerResponse).write(chunk)) return true
    // undici stops reading the pod until 'drain': the client holds the pod from here on.
    if (this.stalledAt === 0) this.forwarder.stalled(this)
    return false
  }

  onComplete (): void {
    this.settled = true
    if (this.done) return
    ;(this.res as ServerResponse).end()
    this.forwarder.finish(this, 'forwarded')
  }

  /**
   * A 1xx before the final response. undici restarts its headers timer on each, so a pod
   * trickling them could hold the request and its connection for as long as it liked: the final head
   * is due --http-headers-timeout-ms after the first, and more than MAX_INTERIM_RESPONSES is not
   * a response (a real server sends one or two: 100 Continue, 103 Early Hints).
   */
  #interim (): boolean {
    if (this.done) return false
    this.interim++
    if (this.interim > MAX_INTERIM_RESPONSES) {
      this.log.warn({ pod: this.pod.target.identity, interim: this.interim }, 'stargate target sent an invalid response')
      this.forwarder.fail(this, 'upstream_invalid_response')
      return false
    }
    const timeoutMs = this.forwarder.options.headersTimeoutMs
    if (this.interim === 1 && timeoutMs > 0) this.headTimer = setTimeout(onHeadTimeout, timeoutMs, this)
    return true
  }

  onError (err: Error & { code?: string }): void {
    this.settled = true
    if (this.done) return
    this.forwarder.onUpstreamError(this, err)
  }
}

/**
 * An HTTP/2 request (the compat request of a stream). Not httpVersionMajor: an HTTP/1.1
 * connection may carry a request line saying `HTTP/2.0`, which the listener refuses (505).
 */
function isHttp2 (req: Req): req is Http2ServerRequest {
  return (req as Http2ServerRequest).stream !== undefined
}

/** The client may still be sending a body we will not read: close rather than drain it. */
function bodyPending (req: Req): boolean {
  if (req.complete) return false
  // The 'request' event runs before the parser marks even a bodyless request complete.
  if (isHttp2(req)) return !req.stream.endAfterHeaders
  const length = req.headers['content-length']
  return (length !== undefined && length !== '0') || req.headers['transfer-encoding'] !== undefined
}

/** End of the tick in which the response head was written: send it if no body went with it. */
function flushHead (exchange: Exchange): void {
  const res = exchange.res as ServerResponse
  if (!exchange.wroteBody && !exchange.done && !res.destroyed) res.flushHeaders()
  // A no-op when end() already flushed everything (it uncorks fully).
  res.uncork()
}

function onResDrain (this: Res & { [kExchange]?: Exchange }): void {
  const exchange = this[kExchange]
  if (exchange === undefined) return
  exchange.stalledAt = 0
  exchange.resume?.()
}

function checkStalls (forwarder: HttpForwarder): void {
  forwarder.checkStalls()
}

function onResClose (this: Res & { [kExchange]?: Exchange }): void {
  const exchange = this[kExchange]
  if (exchange === undefined || exchange.done) return
  // The client went away before the response completed: finishing gives back the pod
  // connection, which aborts the upstream request at once (pod-connections.ts).
  exchange.forwarder.finish(exchange, 'client_aborted')
}

/** A body chunk before admission: buffered, until the body ends or the buffer is full. */
function onBufferData (this: Req & { [kExchange]?: Exchange }, chunk: Buffer): void {
  const exchange = this[kExchange]
  if (exchange === undefined || exchange.done || exchange.bodyBuffer === null) return
  exchange.forwarder.buffer(exchange, chunk)
}

function onBufferEnd (this: Req & { [kExchange]?: Exchange }): void {
  const exchange = this[kExchange]
  if (exchange === undefined || exchange.done || exchange.bodyBuffer === null) return
  exchange.forwarder.bodyComplete(exchange)
}

/** A body chunk streamed to the pod after admission. */
function onReqData (this: Req & { [kExchange]?: Exchange }, chunk: Buffer): void {
  const exchange = this[kExchange]
  if (exchange === undefined || exchange.done) return
  let fresh = chunk.length
  if (exchange.replay > 0) {
    // The buffered prefix, put back in front of the stream: already counted.
    const replayed = Math.min(exchange.replay, fresh)
    exchange.replay -= replayed
    fresh -= replayed
    if (fresh === 0) return
  }
  exchange.forwarder.received(exchange, fresh)
}

function onReqEnd (this: Req & { [kExchange]?: Exchange }): void {
  const exchange = this[kExchange]
  if (exchange !== undefined) exchange.forwarder.stopReceiving(exchange)
}

function checkBodies (forwarder: HttpForwarder): void {
  forwarder.checkReceiving()
}

/** Slow bodies refused per event-loop turn: about 5 ms of work at a time (module note at refuseSlowBodies). */
const REFUSALS_PER_TURN = 64

function refuseSlowBodies (forwarder: HttpForwarder): void {
  forwarder.refuseSlowBodies()
}

/** Interim responses allowed before the final one (Exchange.#interim). */
export const MAX_INTERIM_RESPONSES = 16

function onHeadTimeout (exchange: Exchange): void {
  exchange.headTimer = null
  if (exchange.done || exchange.responded) return
  exchange.log.warn({ pod: exchange.pod.target.identity, interim: exchange.interim }, 'upstream request failed')
  exchange.forwarder.fail(exchange, 'upstream_timeout')
}

function onTimeout (exchange: Exchange): void {
  exchange.timer = null
  if (exchange.done) return
  exchange.forwarder.fail(exchange, 'upstream_timeout')
}

const kExchange = Symbol('exchange')

/** HTTP/1.1 requests that may wait behind the one being forwarded on their connection. */
export const MAX_PIPELINED = 16

/** A pipelined HTTP/1.1 request waiting for its turn on its connection. */
type Waiting = readonly [IncomingMessage, ServerResponse, string, RequestLog]

/** An Exchange was made for this response: the request is being forwarded (or was). */
function forwarding (res: Res): boolean {
  return (res as Res & { [kExchange]?: Exchange })[kExchange] !== undefined
}

function nextOnLine (forwarder: HttpForwarder, socket: Socket, previous: ServerResponse): void {
  forwarder.nextOnLine(socket, previous)
}

export class HttpForwarder {
  readonly options: HttpForwarderOptions
  readonly #limits: BodyLimits
  readonly #tickMs: number
  /** Requests whose body is being read, for the body pace checks. */
  readonly #receiving = new Set<Exchange>()
  #bodyTick: NodeJS.Timeout | null = null
  /** Bodies being read before admission, and their bytes (read at scrape time: bufferedBodies). */
  #buffering = 0
  #bufferedBytes = 0
  /** Slow bodies judged on the last tick, refused a batch per event-loop turn (refuseSlowBodies). */
  #refusals: Array<readonly [Exchange, BodyVerdict]> = []
  #refusing = false
  /** Responses the client stopped taking (stalledAt set), for the stall timeout. */
  readonly #stalled = new Set<Exchange>()
  #stallTick: NodeJS.Timeout | null = null
  readonly #stallTickMs: number
  readonly #lines = new SerialRequests<Socket, Waiting>(MAX_PIPELINED)

  constructor (options: HttpForwarderOptions) {
    this.options = options
    this.#limits = {
      idleTimeoutMs: options.idleTimeoutMs,
      minBytesPerSecond: options.bodyMinBytesPerSecond,
      rateWindowMs: options.bodyRateWindowMs,
      deadlineMs: options.bodyDeadlineMs,
    }
    // A quarter of the shortest limit, between 25 ms and 1 s: a verdict comes at most that late.
    const shortest = Math.min(options.idleTimeoutMs, options.bodyMinBytesPerSecond > 0 ? options.bodyRateWindowMs : Infinity, options.bodyDeadlineMs > 0 ? options.bodyDeadlineMs : Infinity)
    this.#tickMs = Math.max(25, Math.min(1000, Math.floor(shortest / 4)))
    this.#stallTickMs = Math.max(25, Math.min(1000, Math.floor(options.responseStallTimeoutMs / 4)))
  }

  /** The client stopped taking this response: its stall timer starts. */
  stalled (exchange: Exchange): void {
    if (this.options.responseStallTimeoutMs === 0) return
    exchange.stalledAt = performance.now()
    this.#stalled.add(exchange)
    if (this.#stallTick === null) {
      this.#stallTick = setInterval(checkStalls, this.#stallTickMs, this)
      this.#stallTick.unref()
    }
  }

  /** Closes the responses whose client took nothing for the stall timeout. */
  checkStalls (): void {
    const now = performance.now()
    const timeout = this.options.responseStallTimeoutMs
    for (const exchange of this.#stalled) {
      if (exchange.done) { this.#stalled.delete(exchange); continue }
      // Drained since: the client took bytes; it is tracked again at its next stall.
      if (exchange.stalledAt === 0) { this.#stalled.delete(exchange); continue }
      if (now - exchange.stalledAt < timeout) continue
      this.options.metrics.httpClientLimitRefusals.labels('response_stalled').inc()
      exchange.log.debug({ pod: exchange.pod.target.identity, stalledMs: Math.round(now - exchange.stalledAt) }, 'closing a client that stopped reading its response')
      ;(exchange.res as ServerResponse).destroy()
      // Gives the pod connection back destroyed: undici has not finished the response.
      this.finish(exchange, 'client_stalled')
    }
    if (this.#stalled.size === 0 && this.#stallTick !== null) {
      clearInterval(this.#stallTick)
      this.#stallTick = null
    }
  }

  #startReceiving (exchange: Exchange): void {
    exchange.pace = new BodyPace(performance.now(), this.#limits)
    this.#receiving.add(exchange)
    if (this.#bodyTick === null) {
      this.#bodyTick = setInterval(checkBodies, this.#tickMs, this)
      this.#bodyTick.unref()
    }
  }

  stopReceiving (exchange: Exchange): void {
    if (!this.#receiving.delete(exchange)) return
    exchange.pace = null
    if (this.#receiving.size === 0 && this.#bodyTick !== null) {
      clearInterval(this.#bodyTick)
      this.#bodyTick = null
    }
  }

  /** Bodies being read before admission, and the bytes held for them (for the gauges). */
  get bufferedBodies (): { readonly requests: number, readonly bytes: number } {
    return { requests: this.#buffering, bytes: this.#bufferedBytes }
  }

  /** Finds requests whose body stopped arriving, arrives too slowly, or took too long (body-pace.ts). */
  checkReceiving (): void {
    const now = performance.now()
    for (const exchange of this.#receiving) {
      // The router holds the body back while it waits for a pod connection, and the pod when it
      // reads slowly (undici pauses the stream): neither is the client's doing.
      const held = exchange.bodyBuffer === null && (!exchange.sent || exchange.req.isPaused())
      const verdict = (exchange.pace as BodyPace).check(now, held, this.#limits)
      if (verdict !== null) this.#refusals.push([exchange, verdict])
    }
    if (this.#refusals.length > 0 && !this.#refusing) {
      this.#refusing = true
      setImmediate(refuseSlowBodies, this)
    }
  }

  /**
   * Refuses up to REFUSALS_PER_TURN of the judged bodies, then yields to I/O. Clients that
   * started together are judged together (2,000 in one tick in bench http-forward/slow-bodies),
   * and answering them all in one go held the event loop for everyone else.
   */
  refuseSlowBodies (): void {
    const batch = this.#refusals.splice(0, REFUSALS_PER_TURN)
    for (const [exchange, verdict] of batch) {
      // Still being read: not finished, nor complete, since it was judged.
      if (exchange.done || exchange.pace === null) continue
      this.options.metrics.httpClientLimitRefusals.labels(verdict).inc()
      this.fail(exchange, verdict, true)
    }
    if (this.#refusals.length > 0) setImmediate(refuseSlowBodies, this)
    else this.#refusing = false
  }

  /** Body bytes that arrived; over --http-max-body-bytes the request is refused. */
  received (exchange: Exchange, bytes: number): void {
    const pace = exchange.pace
    if (pace === null) return
    pace.received(bytes, performance.now())
    if (pace.bytes > this.options.maxBodyBytes) this.fail(exchange, 'payload_too_large', true)
  }

  /** A chunk read before admission. */
  buffer (exchange: Exchange, chunk: Buffer): void {
    this.received(exchange, chunk.length)
    if (exchange.done) return
    const body = exchange.bodyBuffer as BodyBuffer
    body.append(chunk, this.options.bodyBufferBytes)
    this.#bufferedBytes += chunk.length
    if (body.length <= this.options.bodyBufferBytes) return
    // More than the buffer holds: the bytes read go back in front of the stream, which waits
    // (paused) for the pod connection and then flows to the pod.
    const req = exchange.req
    req.pause()
    const prefix = this.#endBuffering(exchange)
    exchange.replay = prefix.length
    req.unshift(prefix)
    this.#admit(exchange)
  }

  /** The whole body is in memory: it goes to the pod as one buffer. */
  bodyComplete (exchange: Exchange): void {
    exchange.body = this.#endBuffering(exchange)
    this.stopReceiving(exchange)
    this.#admit(exchange)
  }

  /** Stops reading into the buffer; returns what was read. */
  #endBuffering (exchange: Exchange): Buffer {
    const body = exchange.bodyBuffer as BodyBuffer
    exchange.bodyBuffer = null
    exchange.req.off('data', onBufferData)
    exchange.req.off('end', onBufferEnd)
    this.#buffering--
    this.#bufferedBytes -= body.length
    return body.bytes()
  }

  /**
   * Forwards one request. The front door gives it the request id (the client's valid
   * x-request-id, else a new one: requestIdOf in headers.ts) and its logger.
   */
  handle (req: Req, res: Res, requestId: string, log: RequestLog): void {
    if (isHttp2(req)) { this.#handle(req, res, requestId, log); return }
    const socket = req.socket
    // Parsed from the same read as a request that got its connection closed.
    if (socket.destroyed) return
    switch (this.#lines.arrive(socket, [req, res as ServerResponse, requestId, log])) {
      case 'run':
        try {
          this.#handle(req, res, requestId, log)
        } finally {
          // Refused at once (or failed): it holds no line.
          if (!forwarding(res)) this.nextOnLine(socket, res as ServerResponse)
        }
        break
      case 'close':
        this.options.metrics.httpClientLimitRefusals.labels('pipelined_requests').inc()
        socket.destroy()
        break
      case 'wait':
        break
    }
  }

  /**
   * The line of an HTTP/1.1 connection is free: the next waiting request runs (a tick later, out
   * of undici's callbacks). After an answer that closes the connection (previous, or one given on
   * the way) nothing more of that connection is processed (RFC 9112 §9.6): the requests still
   * waiting are counted as a client that left, and their responses say close as well, for the
   * front door's check of what arrives after them (listener.ts).
   */
  nextOnLine (socket: Socket, previous: ServerResponse): void {
    let closing = !previous.shouldKeepAlive
    let next = this.#lines.done(socket)
    while (next !== null) {
      const [req, res, requestId, log] = next
      if (!closing && !socket.destroyed && !res.destroyed) {
        try {
          this.#handle(req, res, requestId, log)
        } catch (err) {
          // What the front door's error handler does for a request it runs itself.
          log.error({ err: (err as Error).message }, 'front door request failed')
          writeErrorResponse(req, res, 'internal_error', requestId)
        }
        // Forwarded: it holds the line until it finishes; refused at once: the next one runs.
        if (forwarding(res)) return
        closing = !res.shouldKeepAlive
      } else {
        res.shouldKeepAlive = false
        this.options.metrics.httpRequests.labels('client_aborted', '4xx').inc()
      }
      next = this.#lines.done(socket)
    }
  }

  #handle (req: Req, res: Res, requestId: string, log: RequestLog): void {
    const { options } = this
    const h2 = isHttp2(req)
    const target = resolveRequestTarget(h2, req.url ?? '/', req.headers.host, h2 ? req.authority : undefined)
    if (!target.ok) { this.#reject(req, res, target.code, requestId); return }
    const host = target.host

    // The same resolution as registration and tunnels (SPEC §4); a Host the template does not
    // match (or none) is balanced over the ready pods instead (SPEC §6).
    let pod: HttpPod | null
    const route = resolveAuthority(host, options.snapshot.current(), options.template)
    const hostTargeted = route.ok
    if (route.ok) {
      pod = options.pods.get(route.target.identity) ?? null
      if (pod === null) { this.#reject(req, res, refusalFor(route.target), requestId); return }
    } else if (route.reason === 'target_unavailable') {
      this.#reject(req, res, 'unknown_target', requestId)
      return
    } else {
      pod = options.pods.pick(null)
      if (pod === null) { this.#reject(req, res, 'no_ready_targets', requestId); return }
    }
    const socket = req.socket
    const peer = socket?.remoteAddress
    const client = options.maxPerClientPerPod > 0 ? clientKeyOf(peer, req.headers['x-forwarded-for'], options.trustedProxies) : ''
    // Refused before the body is read when the pod is already full; checked again at admission.
    const refusal = this.#admission(pod, client)
    if (refusal !== null) { this.#reject(req, res, refusal, requestId); return }

    const length = req.headers['content-length']
    if (length !== undefined && Number(length) > options.maxBodyBytes) {
      this.#reject(req, res, 'payload_too_large', requestId)
      return
    }
    // Routed and within limits: now the client may send its body (RFC 9110 §10.1.1). The front
    // door leaves 100 Continue to this point ('checkContinue'), so a refused request never
    // receives a 100 and never uploads a body for nothing.
    const expect = req.headers.expect
    if (typeof expect === 'string' && expect.toLowerCase() === '100-continue') res.writeContinue()
    const hasBody = !BODYLESS.has(req.method ?? 'GET') || (length !== undefined && length !== '0') || req.headers['transfer-encoding'] !== undefined
    const headers = upstreamRequestHeaders(req.rawHeaders, {
      clientAddress: peer ?? '',
      proto: (socket as TLSSocket | undefined)?.encrypted === true ? 'https' : 'http',
      host: host ?? '',
      requestId,
      trusted: options.trustedProxies.trusts(peer),
    })
    const exchange = new Exchange({ forwarder: this, req, res, pod, path: target.path, hostTargeted, requestId, log, headers, hasBody, client })
    if (!h2) exchange.line = req.socket
    const tagged = res as Res & { [kExchange]?: Exchange }
    tagged[kExchange] = exchange
    ;(req as Req & { [kExchange]?: Exchange })[kExchange] = exchange
    res.on('drain', onResDrain)
    res.on('close', onResClose)
    if (options.requestTimeoutMs > 0) exchange.timer = setTimeout(onTimeout, options.requestTimeoutMs, exchange)
    options.metrics.httpRequestsInFlight.inc()
    if (!hasBody) {
      this.#admit(exchange)
      return
    }
    this.#startReceiving(exchange)
    if (options.bodyBufferBytes === 0) {
      this.#admit(exchange)
      return
    }
    exchange.bodyBuffer = new BodyBuffer()
    this.#buffering++
    req.on('data', onBufferData)
    req.on('end', onBufferEnd)
  }

  /** Why the pod cannot take one more request from this client now, or null. */
  #admission (pod: HttpPod, client: string): 'upstream_busy' | 'client_over_share' | null {
    if (pod.inflight >= this.options.maxPendingPerPod) return 'upstream_busy'
    const max = this.options.maxPerClientPerPod
    if (max > 0 && (pod.clients.get(client) ?? 0) >= max) return 'client_over_share'
    return null
  }

  /** The body is in (or the buffer full, or there is none): the request takes or awaits a pod connection. */
  #admit (exchange: Exchange): void {
    if (exchange.done) return
    let pod: HttpPod | null = exchange.pod
    if (pod.retired) {
      // The pod left (or was replaced) while the body was read.
      pod = exchange.hostTargeted ? this.options.pods.get(pod.target.identity) ?? null : this.options.pods.pick(null)
      if (pod === null) { this.fail(exchange, exchange.hostTargeted ? 'target_unavailable' : 'no_ready_targets'); return }
      exchange.pod = pod
    }
    const refusal = this.#admission(pod, exchange.client)
    if (refusal !== null) {
      if (refusal === 'client_over_share') this.options.metrics.httpClientLimitRefusals.labels(refusal).inc()
      this.fail(exchange, refusal)
      return
    }
    this.#dispatch(exchange, pod)
  }

  #dispatch (exchange: Exchange, pod: HttpPod): void {
    exchange.pod = pod
    exchange.admitted = true
    pod.inflight++
    const client = exchange.client
    if (this.options.maxPerClientPerPod > 0) pod.clients.set(client, (pod.clients.get(client) ?? 0) + 1)
    exchange.sent = false
    exchange.interim = 0
    exchange.settled = false
    pod.connections.submit(exchange)
  }

  /**
   * The request no longer needs its pod: counts come off, and its connection (or queue place)
   * is given back; a request undici has not finished is aborted (pod-connections.ts).
   */
  #release (exchange: Exchange): void {
    if (!exchange.admitted) return
    exchange.admitted = false
    const pod = exchange.pod
    pod.inflight--
    if (this.options.maxPerClientPerPod > 0) {
      const held = (pod.clients.get(exchange.client) ?? 1) - 1
      if (held > 0) pod.clients.set(exchange.client, held)
      else pod.clients.delete(exchange.client)
    }
    pod.connections.release(exchange, exchange.settled)
  }

  onUpstreamError (exchange: Exchange, err: Error & { code?: string }): void {
    const pod = exchange.pod
    this.#release(exchange)
    const code = err.code ?? ''
    if (!exchange.responded && !exchange.sent && !NOT_RETRIED.has(code) && exchange.attempt === 1 && !exchange.hostTargeted) {
      const next = this.options.pods.pick(pod)
      if (next !== null && this.#admission(next, exchange.client) === null) {
        exchange.attempt = 2
        exchange.log.debug({ err: code, from: pod.target.identity, to: next.target.identity }, 'retrying request on another pod after a connect failure')
        this.#dispatch(exchange, next)
        return
      }
    }
    if (exchange.responded) {
      // The response had started: the only honest signal left is to cut the connection.
      exchange.log.warn({ err: code || err.message, pod: pod.target.identity }, 'upstream failed mid-response')
      ;(exchange.res as ServerResponse).destroy()
      this.finish(exchange, 'upstream_error')
      return
    }
    const timeout = code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT'
    exchange.log.warn({ err: code || err.message, pod: pod.target.identity, attempt: exchange.attempt }, 'upstream request failed')
    this.fail(exchange, timeout ? 'upstream_timeout' : isInvalidResponse(err, code) ? 'upstream_invalid_response' : code === 'UND_ERR_INVALID_ARG' ? 'bad_request' : 'upstream_error')
  }

  /** The pod's response head could not be written to the client: 502 and abort upstream. */
  invalidResponse (exchange: Exchange, err: Error & { code?: string }): void {
    exchange.log.warn({ err: err.code ?? err.message, pod: exchange.pod.target.identity }, 'stargate target sent an invalid response')
    const res = exchange.res as ServerResponse
    // writeHead may have stored some of the pod's fields before it threw.
    if (!res.headersSent) for (const name of res.getHeaderNames()) res.removeHeader(name)
    this.fail(exchange, 'upstream_invalid_response')
  }

  /** Answers with an error (or cuts the connection when the response had started). */
  fail (exchange: Exchange, code: StaticHttpErrorCode, close = false): void {
    if (exchange.done) return
    if (exchange.responded) {
      (exchange.res as ServerResponse).destroy()
    } else {
      writeError(exchange.res, code, exchange.requestId, close || bodyPending(exchange.req))
      exchange.status = HTTP_ERRORS[code].status
    }
    this.finish(exchange, code)
  }

  finish (exchange: Exchange, outcome: HttpOutcome): void {
    if (exchange.done) return
    exchange.done = true
    if (exchange.timer !== null) clearTimeout(exchange.timer)
    if (exchange.headTimer !== null) clearTimeout(exchange.headTimer)
    if (exchange.stalledAt !== 0) this.#stalled.delete(exchange)
    if (exchange.line !== null) process.nextTick(nextOnLine, this, exchange.line, exchange.res as ServerResponse)
    this.stopReceiving(exchange)
    if (exchange.bodyBuffer !== null) this.#endBuffering(exchange)
    this.#release(exchange)
    const { metrics } = this.options
    metrics.httpRequestsInFlight.dec()
    metrics.httpRequests.labels(outcome, statusClass(exchange.status === 0 ? 499 : exchange.status)).inc()
    metrics.httpRequestDuration.observe((performance.now() - exchange.startedAt) / 1000)
    if (outcome !== 'forwarded' && exchange.log.isLevelEnabled('debug')) {
      exchange.log.debug({ outcome, status: exchange.status }, 'http request finished')
    }
  }

  #reject (req: Req, res: Res, code: StaticHttpErrorCode, requestId: string): void {
    writeErrorResponse(req, res, code, requestId)
    if (code === 'client_over_share') this.options.metrics.httpClientLimitRefusals.labels(code).inc()
    this.options.metrics.httpRequests.labels(code, statusClass(HTTP_ERRORS[code].status)).inc()
  }
}

/** An error response to a request that was not forwarded (the forwarder's and the front door's). */
export function writeErrorResponse (req: Req, res: Res, code: StaticHttpErrorCode, requestId: string): void {
  writeError(res, code, requestId, bodyPending(req))
}

/**
 * Writes an error response. With close, the connection (HTTP/1.1) or stream (HTTP/2:
 * RST_STREAM NO_ERROR after the response, RFC 9113 §8.1) ends with it, so a body the router
 * refused is not read to its end.
 */
function writeError (res: Res, code: StaticHttpErrorCode, requestId: string, close: boolean): void {
  if (res.headersSent || res.destroyed) return
  const body = ERROR_BODIES[code]
  const h2 = (res as Http2ServerResponse).stream !== undefined
  const fields = [
    'content-type', 'application/json',
    'content-length', String(body.length),
    'x-stargate-error-code', code,
    'x-request-id', requestId,
  ]
  if (close && !h2) {
    fields.push('connection', 'close')
    // The connection's last answer: what was pipelined behind it is not processed (nextOnLine, listener.ts).
    ;(res as ServerResponse).shouldKeepAlive = false
  }
  if (code === 'method_not_allowed') fields.push('allow', ALLOWED_METHODS)
  ;(res as ServerResponse).writeHead(HTTP_ERRORS[code].status, fields)
  // The stream's own 'finish' (its response is sent): the compat response emits 'finish' only
  // once the stream has closed, which a client still sending never lets happen.
  if (close && h2) (res as Http2ServerResponse).stream.once('finish', closeStreamNoError)
  res.end(body)
}

/** RFC 9110 §15.5.6: a 405 lists what the target takes; the router forwards every method but CONNECT. */
export const ALLOWED_METHODS = 'GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS'

function closeStreamNoError (this: ServerHttp2Stream): void {
  if (!this.closed && !this.destroyed) this.close(h2constants.NGHTTP2_NO_ERROR)
}
