/**
 * LLM client HTTP forwarding (SPEC §6): every non-gRPC request of the front door, HTTP/1.1 or
 * h2, goes to a ready pod's http port with undici. The pod is the one the Host names through
 * the hostname template, else the less loaded of two random ready pods. Bodies stream both
 * ways without buffering (SSE tokens are written as they arrive) with backpressure in both
 * directions; a client that goes away aborts the upstream request at once.
 *
 * A failure before any byte of the request was written to the pod (connect refused or timed
 * out, unreachable: undici had not called onConnect yet) is retried once on another pod;
 * nothing that may have reached a pod is retried, so a DELETE never runs twice (issue 14).
 * Errors are JSON with x-stargate-error-code.
 *
 * Limits (issue 14): at most --http-upstream-max-connections connections per pod, and at most
 * --http-upstream-max-queue requests waiting for one; beyond that 503 upstream_busy. A pod's
 * response the router cannot re-encode (e.g. two content-type fields for an HTTP/2 client) is a
 * 502 upstream_invalid_response for that request, never an exception. `Expect: 100-continue`
 * is answered by the router once the request is routed. An error answered while the client may
 * still be sending a body closes the connection instead of reading the rest. A request body
 * that goes silent for --http-idle-timeout-ms (undici times only the response) is a 408
 * request_timeout, checked on one coarse tick for all requests.
 *
 * Each request is one Exchange object, which is also the undici dispatch handler (undici's
 * native callback interface: no wrapper objects, no header parsing into objects).
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { constants as h2constants, type Http2ServerRequest, type Http2ServerResponse } from 'node:http2'
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

type Req = IncomingMessage | Http2ServerRequest
type Res = ServerResponse | Http2ServerResponse

export type HttpOutcome = 'forwarded' | 'client_aborted' | HttpErrorCode

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
  return err.name === 'HTTPParserError' || code.startsWith('HPE_') || code === 'UND_ERR_HEADERS_OVERFLOW' || code === 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH' || code === 'UND_ERR_RES_EXCEEDED_MAX_SIZE'
}
const BODYLESS = new Set(['GET', 'HEAD', 'DELETE', 'OPTIONS', 'TRACE'])

function statusClass (status: number): string {
  return status < 200 ? '1xx' : status < 300 ? '2xx' : status < 400 ? '3xx' : status < 500 ? '4xx' : '5xx'
}

class Exchange implements Dispatcher.DispatchHandler {
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
  pod: HttpPod | null
  readonly path: string
  attempt = 1
  /** undici called onConnect in this attempt: request bytes may have reached the pod. */
  sent = false
  /** When the last request body chunk arrived (performance.now), while the body is read. */
  lastBodyAt = 0
  bodyBytes = 0
  bodyStarted = false
  counting = false
  abort: ((err?: Error) => void) | null = null
  resume: (() => void) | null = null
  responded = false
  done = false
  status = 0
  firstByteAt = 0
  timer: NodeJS.Timeout | null = null
  /** HTTP/1.1 responses: the head can wait for the body in a corked socket (see onHeaders). */
  readonly corkable: boolean
  wroteBody = false

  constructor (forwarder: HttpForwarder, req: Req, res: Res, pod: HttpPod, path: string, hostTargeted: boolean, requestId: string, log: RequestLog, headers: string[], hasBody: boolean) {
    this.forwarder = forwarder
    this.log = log
    this.req = req
    this.res = res
    this.pod = pod
    this.path = path
    this.hostTargeted = hostTargeted
    this.requestId = requestId
    this.headers = headers
    this.hasBody = hasBody
    this.startedAt = performance.now()
    this.corkable = req.httpVersionMajor === 1
  }

  // --- undici dispatch handler (native callback interface) ---

  onConnect (abort: (err?: Error) => void): void {
    if (this.done) {
      abort()
      return
    }
    this.abort = abort
    this.sent = true
    // Counted from here, not earlier: a 'data' listener starts the flow, and undici attaches
    // its own reader in this same tick, so no chunk is missed by either.
    if (this.hasBody && !this.counting) {
      this.counting = true
      this.req.on('data', onReqData)
      if (!this.req.complete) {
        this.req.once('end', onReqEnd)
        this.forwarder.startReceiving(this)
      }
    }
  }

  onHeaders (statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true // 1xx: wait for the final response
    if (this.done) return false
    this.resume = resume
    this.responded = true
    this.status = statusCode
    this.firstByteAt = performance.now()
    const res = this.res as ServerResponse
    try {
      res.writeHead(statusCode, downstreamResponseHeaders(rawHeaders, this.requestId))
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
    return (this.res as ServerResponse).write(chunk)
  }

  onComplete (): void {
    if (this.done) return
    ;(this.res as ServerResponse).end()
    this.forwarder.finish(this, 'forwarded')
  }

  onError (err: Error & { code?: string }): void {
    if (this.done) return
    this.forwarder.onUpstreamError(this, err)
  }
}

/** The client may still be sending a body we will not read: close rather than drain it. */
function bodyPending (req: Req): boolean {
  if (req.complete) return false
  // The 'request' event runs before the parser marks even a bodyless request complete.
  if (req.httpVersionMajor === 2) return !(req as Http2ServerRequest).stream.endAfterHeaders
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
  this[kExchange]?.resume?.()
}

function onResClose (this: Res & { [kExchange]?: Exchange }): void {
  const exchange = this[kExchange]
  if (exchange === undefined || exchange.done) return
  // The client went away before the response completed: abort upstream at once. Finish
  // first: undici reports the abort synchronously through onError, which must see `done`.
  exchange.forwarder.finish(exchange, 'client_aborted')
  exchange.abort?.(new Error('client closed the connection'))
}

function onReqData (this: Req & { [kExchange]?: Exchange }, chunk: Buffer): void {
  const exchange = this[kExchange]
  if (exchange === undefined) return
  exchange.bodyStarted = true
  exchange.lastBodyAt = performance.now()
  exchange.bodyBytes += chunk.length
  if (exchange.bodyBytes > exchange.forwarder.options.maxBodyBytes && !exchange.done) {
    exchange.forwarder.fail(exchange, 'payload_too_large', true)
    exchange.abort?.(new Error('request body too large'))
  }
}

function onReqEnd (this: Req & { [kExchange]?: Exchange }): void {
  const exchange = this[kExchange]
  if (exchange !== undefined) exchange.forwarder.stopReceiving(exchange)
}

function checkBodies (forwarder: HttpForwarder): void {
  forwarder.checkReceiving()
}

function onTimeout (exchange: Exchange): void {
  exchange.timer = null
  if (exchange.done) return
  exchange.forwarder.fail(exchange, 'upstream_timeout')
  exchange.abort?.(new Error('request timeout'))
}

const kExchange = Symbol('exchange')

export class HttpForwarder {
  readonly options: HttpForwarderOptions
  /** Requests whose body is being read, for the body idle timeout. */
  readonly #receiving = new Set<Exchange>()
  #bodyTick: NodeJS.Timeout | null = null

  constructor (options: HttpForwarderOptions) {
    this.options = options
  }

  startReceiving (exchange: Exchange): void {
    exchange.lastBodyAt = performance.now()
    this.#receiving.add(exchange)
    if (this.#bodyTick === null) {
      this.#bodyTick = setInterval(checkBodies, Math.max(25, Math.min(1000, Math.floor(this.options.idleTimeoutMs / 4))), this)
      this.#bodyTick.unref()
    }
  }

  stopReceiving (exchange: Exchange): void {
    this.#receiving.delete(exchange)
    if (this.#receiving.size === 0 && this.#bodyTick !== null) {
      clearInterval(this.#bodyTick)
      this.#bodyTick = null
    }
  }

  /** Fails requests whose client stopped sending its body (not those paused by the pod). */
  checkReceiving (): void {
    const now = performance.now()
    for (const exchange of this.#receiving) {
      if (exchange.req.isPaused()) {
        // Backpressure from the pod: waiting on it is not the client's silence.
        exchange.lastBodyAt = now
      } else if (now - exchange.lastBodyAt >= this.options.idleTimeoutMs) {
        this.fail(exchange, 'request_timeout', true)
        exchange.abort?.(new Error('request body timeout'))
      }
    }
  }

  /**
   * Forwards one request. The front door gives it the request id (the client's valid
   * x-request-id, else a new one: requestIdOf in headers.ts) and its logger.
   */
  handle (req: Req, res: Res, requestId: string, log: RequestLog): void {
    const { options } = this
    const h2 = req.httpVersionMajor === 2
    const target = resolveRequestTarget(h2, req.url ?? '/', req.headers.host, h2 ? (req as Http2ServerRequest).authority : undefined)
    if (!target.ok) { this.#reject(req, res, 'host_mismatch', requestId); return }
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
    if (pod.inflight >= options.maxPendingPerPod) { this.#reject(req, res, 'upstream_busy', requestId); return }

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
    const socket = req.socket
    const headers = upstreamRequestHeaders(req.rawHeaders, {
      clientAddress: socket?.remoteAddress ?? '',
      proto: (socket as TLSSocket | undefined)?.encrypted === true ? 'https' : 'http',
      host: host ?? '',
      requestId,
      trusted: options.trustedProxies.trusts(socket?.remoteAddress),
    })
    const exchange = new Exchange(this, req, res, pod, target.path, hostTargeted, requestId, log, headers, hasBody)
    const tagged = res as Res & { [kExchange]?: Exchange }
    tagged[kExchange] = exchange
    ;(req as Req & { [kExchange]?: Exchange })[kExchange] = exchange
    res.on('drain', onResDrain)
    res.on('close', onResClose)
    if (options.requestTimeoutMs > 0) exchange.timer = setTimeout(onTimeout, options.requestTimeoutMs, exchange)
    options.metrics.httpRequestsInFlight.inc()
    this.#dispatch(exchange)
  }

  #dispatch (exchange: Exchange): void {
    const pod = exchange.pod as HttpPod
    pod.inflight++
    const req = exchange.req
    exchange.sent = false
    pod.pool.dispatch({
      path: exchange.path,
      method: req.method ?? 'GET',
      headers: exchange.headers,
      body: exchange.hasBody ? req : null,
      headersTimeout: this.options.headersTimeoutMs,
      bodyTimeout: this.options.idleTimeoutMs,
    }, exchange)
  }

  onUpstreamError (exchange: Exchange, err: Error & { code?: string }): void {
    const pod = exchange.pod
    if (pod !== null) pod.inflight--
    exchange.pod = null
    const code = err.code ?? ''
    if (!exchange.responded && !exchange.sent && !NOT_RETRIED.has(code) && exchange.attempt === 1 && !exchange.hostTargeted) {
      const next = this.options.pods.pick(pod)
      if (next !== null && next.inflight < this.options.maxPendingPerPod) {
        exchange.attempt = 2
        exchange.pod = next
        exchange.log.debug({ err: code, from: pod?.target.identity, to: next.target.identity }, 'retrying request on another pod after a connect failure')
        this.#dispatch(exchange)
        return
      }
    }
    if (exchange.responded) {
      // The response had started: the only honest signal left is to cut the connection.
      exchange.log.warn({ err: code || err.message, pod: pod?.target.identity }, 'upstream failed mid-response')
      ;(exchange.res as ServerResponse).destroy()
      this.finish(exchange, 'upstream_error')
      return
    }
    const timeout = code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT'
    exchange.log.warn({ err: code || err.message, pod: pod?.target.identity, attempt: exchange.attempt }, 'upstream request failed')
    this.fail(exchange, timeout ? 'upstream_timeout' : isInvalidResponse(err, code) ? 'upstream_invalid_response' : code === 'UND_ERR_INVALID_ARG' ? 'bad_request' : 'upstream_error')
  }

  /** The pod's response head could not be written to the client: 502 and abort upstream. */
  invalidResponse (exchange: Exchange, err: Error & { code?: string }): void {
    exchange.log.warn({ err: err.code ?? err.message, pod: exchange.pod?.target.identity }, 'stargate target sent an invalid response')
    const res = exchange.res as ServerResponse
    // writeHead may have stored some of the pod's fields before it threw.
    if (!res.headersSent) for (const name of res.getHeaderNames()) res.removeHeader(name)
    this.fail(exchange, 'upstream_invalid_response')
    exchange.abort?.(err)
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
    this.stopReceiving(exchange)
    if (exchange.pod !== null) exchange.pod.inflight--
    exchange.pod = null
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
  if (close && !h2) fields.push('connection', 'close')
  ;(res as ServerResponse).writeHead(HTTP_ERRORS[code].status, fields)
  if (close && h2) res.once('finish', closeStreamNoError)
  res.end(body)
}

function closeStreamNoError (this: Http2ServerResponse): void {
  const stream = this.stream
  if (!stream.closed && !stream.destroyed) stream.close(h2constants.NGHTTP2_NO_ERROR)
}
