/**
 * The front door's TCP listener (SPEC §2, §12).
 *
 * Without TLS one port serves HTTP/2 with prior knowledge (h2c, as Pylons and gRPC clients
 * send it) and HTTP/1.1: the first bytes of a connection decide, and the socket goes to the
 * matching (non-listening) server with those bytes left in its buffer. With TLS, ALPN decides
 * (h2, else HTTP/1.1). The TLS SecureContext can be replaced at any time for new handshakes
 * (hot reload) without touching the listener or established connections.
 *
 * HTTP/2 streams with a gRPC content type go to the gRPC routes (front-door.ts) at the
 * stream level (full duplex, trailers); every other request, HTTP/1.1 or h2, goes to the HTTP
 * handler as a Node request/response pair: Fastify's, which front-door.ts gives the listener
 * through its serverFactory (Fastify never listens; this class accepts and closes every
 * connection). The HTTP/2 server and the per-stream checks (rapid reset, header list size)
 * are the router's one HTTP/2 admission (lib/http2-admission.ts).
 *
 * Limits (SPEC §12): a cap on open connections (closed at accept beyond it), a TLS
 * handshake timeout, and the header, keep-alive and HTTP/2 idle timeouts of
 * connection-deadlines.ts, which the inner servers cannot arm themselves. An accept error
 * (EMFILE) is logged and counted; the listener keeps serving. close() ends within its deadline
 * plus CUT_WAIT_MS whatever is open: it tracks every accepted socket itself, because the
 * inner servers' closeAllConnections() knows none of them (they never listened).
 *
 * HTTP/1.1 framing (RFC 9112): a request the client is told was refused never reaches a pod.
 * An HTTP/1.0 request with Transfer-Encoding is refused with 400 before it is routed (§6.1: its
 * framing is faulty), and whatever is pipelined behind it is dropped with the connection. When
 * Node's parser gives up on bytes while a request of the connection is in flight (h1ClientError),
 * that request's own answer, or a cut, is what the client gets, never a 400 for a request that
 * may already be upstream: bytes after a complete request are ignored and the connection closes
 * once its responses are out (§9.6); a body that breaks off mid-request cuts the connection,
 * which aborts the upstream request.
 */
import net, { type AddressInfo, type Socket } from 'node:net'
import tls, { type TLSSocket } from 'node:tls'
import http, { type IncomingMessage, type ServerResponse } from 'node:http'
import http2, {
  Http2ServerRequest, Http2ServerResponse,
  type IncomingHttpHeaders, type ServerHttp2Session, type ServerHttp2Stream,
} from 'node:http2'
import { REGISTER_INFERENCE_SERVER_PATH, isGrpcContentType, respondWithStatus } from '../control-plane/grpc.ts'
import { GRPC_ERRORS } from '../control-plane/errors.ts'
import type { ConnectionRegistry } from '../drain/connection-registry.ts'
import { DRAIN_REASONS } from '../drain/drain-reasons.ts'
import { FrontDoorConnection, type EndGrpcStream } from './connection-drain.ts'
import { HTTP_ERRORS } from '../http-forward/errors.ts'
import { CONNECT_REFUSAL, headersTooLargeAnswers, refuseConnectStream, refuseRequest, type HeadersTooLarge } from './http-errors.ts'
import { DEFAULT_HTTP2_LIMITS, Http2StreamGuard, hardenedHttp2Options, type Http2Limits, type RapidResetGuardOptions } from '../http2-admission.ts'
import { ConnectionDeadlines, type ConnectionTimeouts, type DeadlineReason, type TrackedConnection } from './connection-deadlines.ts'
import type { Logger } from '../log.ts'
import { destroyIfOpen } from '../safe-io.ts'

export type GrpcStreamHandler = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, rawHeaders: readonly string[]) => void
export type HttpRequestHandler = (req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse) => void

export interface FrontDoorTls {
  /** Secure context options of the first handshakes (cert, key, and ca when verifying clients). */
  readonly options: tls.SecureContextOptions
  /** Ask for and verify client certificates (mTLS for Pylons): rejected at the TLS layer. */
  readonly requireClientCert: boolean
}

export type { Http2Limits }

export interface ConnectionLimits extends ConnectionTimeouts {
  /** Open TCP connections beyond which new ones are closed at accept. */
  readonly maxConnections: number
  readonly tlsHandshakeTimeoutMs: number
}

const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = {
  maxConnections: 10_000,
  headersTimeoutMs: 30_000,
  keepAliveTimeoutMs: 75_000,
  http2IdleTimeoutMs: 300_000,
  tlsHandshakeTimeoutMs: 10_000,
}

export type TimeoutReason = DeadlineReason | 'tls_handshake_timeout'

export interface FrontDoorOptions {
  readonly host: string
  readonly port: number
  readonly onGrpcStream: GrpcStreamHandler
  readonly onHttpRequest: HttpRequestHandler
  readonly logger: Logger
  readonly tls: FrontDoorTls | null
  readonly limits?: Http2Limits
  readonly rapidReset?: RapidResetGuardOptions
  readonly onRapidReset?: () => void
  readonly onTlsError?: (err: Error) => void
  readonly connections?: ConnectionLimits
  /** A connection closed at accept: over the cap, or an accept error (with its code). */
  readonly onRefused?: (reason: 'max_connections' | 'accept_error', code: string | null) => void
  readonly onTimedOut?: (reason: TimeoutReason) => void
  /** Open TCP connections, after each change. */
  readonly onConnectionCount?: (count: number) => void
  /** Where connections are registered to be drained (shutdown, replica balancing); null: nowhere. */
  readonly registry?: ConnectionRegistry | null
  /** Ends an open WatchStargates or RegisterInferenceServer stream when its connection drains. */
  readonly endGrpcStream: EndGrpcStream
  /** A gRPC stream arrived on a draining connection and was refused. */
  readonly onDrainRefused?: () => void
  /** An HTTP/1.1 request parsed after an answer that closes its connection: not processed, never answered. */
  readonly onH1RequestDropped?: () => void
}

/** After the drain deadline, how long cut connections get to report their close. */
const CUT_WAIT_MS = 500
/** An HTTP/2 session told GOAWAY for idleness is cut after this if it does not close. */
const GOAWAY_GRACE_MS = 1000
const HEADERS_TIMEOUT_RESPONSE = 'HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n'
const H2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n')

function ignoreStreamError (): void {
  // Stream errors (client resets, broken sockets) are reported by the handlers that own the
  // stream; without a listener Node would turn them into uncaught exceptions.
}

const kTracked = Symbol('tracked')
type Tagged<T> = T & { [kTracked]?: { door: FrontDoorListener, connection: TrackedConnection } }

/** HTTP/1.1 response done (finished or aborted): the connection may go idle. */
function onH1ResponseClose (this: Tagged<ServerResponse>): void {
  const tag = this[kTracked]
  if (tag !== undefined) tag.door.h1RequestFinished(tag.connection, this)
}

function onH2StreamClose (this: Tagged<ServerHttp2Stream>): void {
  const tag = this[kTracked]
  if (tag !== undefined) tag.door.h2StreamClosed(tag.connection)
}

function onControlStreamClose (this: Tagged<ServerHttp2Stream>): void {
  this[kTracked]?.connection.controlStreams?.delete(this)
}

function onRegistrationStreamClose (this: Tagged<ServerHttp2Stream>): void {
  const connection = this[kTracked]?.connection
  if (connection !== undefined && connection.registrations > 0) connection.registrations--
}

export class FrontDoorListener {
  static readonly DEFAULT_LIMITS: Http2Limits = DEFAULT_HTTP2_LIMITS
  readonly #options: FrontDoorOptions
  readonly #outer: net.Server | tls.Server
  readonly #h2: http2.Http2Server
  readonly #h1: http.Server
  readonly #guard: Http2StreamGuard
  readonly #sessions = new Set<ServerHttp2Session>()
  readonly #tlsSockets = new Set<TLSSocket>()
  readonly #sessionBySocket = new WeakMap<Socket, ServerHttp2Session>()
  #attaching: Socket | null = null
  /** Answers to an oversized header list, built once per listener (the limit is fixed). */
  readonly #headersTooLarge: HeadersTooLarge
  #closing: Promise<void> | null = null
  /** Every accepted TCP socket (under TLS too), until it closes: what the cap counts. */
  readonly #raw = new Set<Socket>()
  readonly #deadlines: ConnectionDeadlines
  readonly #tracked = new WeakMap<Socket, TrackedConnection>()
  /** Every tracked connection's drain handle (registered or not). */
  readonly #handles = new Map<TrackedConnection, FrontDoorConnection>()
  readonly #tags = new WeakMap<TrackedConnection, { door: FrontDoorListener, connection: TrackedConnection }>()
  #draining = false
  /** HTTP/1.1 connections that take no further request: they close once their responses are out. */
  readonly #h1Closing = new WeakSet<Socket>()
  /** While closing: called as sockets close, to resolve once none is left. */
  #onRawClosed: (() => void) | null = null

  constructor (options: FrontDoorOptions) {
    this.#options = options
    const limits = options.limits ?? DEFAULT_HTTP2_LIMITS
    this.#headersTooLarge = headersTooLargeAnswers(limits.maxHeaderListSize)
    this.#guard = new Http2StreamGuard({
      maxHeaderListSize: limits.maxHeaderListSize,
      ...(options.rapidReset === undefined ? {} : { rapidReset: options.rapidReset }),
      onRapidReset: (session, resets, opened) => {
        options.onRapidReset?.()
        options.logger.warn({ resets, opened, remote: session.socket?.remoteAddress }, 'closing http2 connection: rapid stream resets (GOAWAY ENHANCE_YOUR_CALM)')
      },
    })
    this.#h2 = http2.createServer(hardenedHttp2Options(limits))
    const connections = options.connections ?? DEFAULT_CONNECTION_LIMITS
    this.#deadlines = new ConnectionDeadlines({ timeouts: connections, onExpired: (connection, reason) => { this.#onExpired(connection, reason) } })
    this.#h2.on('session', (session) => {
      this.#sessions.add(session)
      const attaching = this.#attaching
      const tracked = attaching === null ? undefined : this.#tracked.get(attaching)
      if (tracked !== undefined) {
        tracked.session = session
        ;(session as Tagged<ServerHttp2Session>)[kTracked] = this.#tagOf(tracked)
      }
      // The session's own 'stream' event, not the server's: it carries the session even for
      // streams that were reset before the handler ran (rapid-reset guard).
      session.on('stream', (stream, headers, _flags, rawHeaders) => { this.#onStream(session, stream, headers, rawHeaders) })
      if (this.#attaching !== null) this.#sessionBySocket.set(this.#attaching, session)
      session.on('close', () => { this.#sessions.delete(session) })
      session.on('error', (err) => { options.logger.debug({ err: err.message }, 'front door http2 session error') })
    })
    // Its header and request timeouts are never armed (see connection-deadlines.ts). Its
    // keep-alive timer is (per response, 5 s by default): off, so --http-keep-alive-timeout-ms rules.
    this.#h1 = http.createServer({ maxHeaderSize: limits.maxHeaderListSize, keepAliveTimeout: 0 }, (req, res) => { this.#onH1Request(req, res) })
    // Without this listener Node answers 100 Continue before the request is routed; the HTTP
    // handler sends it once the request may go ahead (refused ones never upload their body).
    this.#h1.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => { this.#onH1Request(req, res) })
    // CONNECT asks for a tunnel, which a reverse proxy does not open. Node hands such a request
    // over with its socket and no response; without a listener it closes the socket unanswered.
    // Pipelined behind a request in flight, it waits its turn as any refusal does (h1ClientError):
    // that request's answer goes out, saying close, and is not displaced by a 405.
    this.#h1.on('connect', (_req: IncomingMessage, socket: Socket) => {
      const inFlight = this.h1ClientError(socket)
      if (!inFlight) {
        if (socket.writable && !socket.destroyed) socket.end(CONNECT_REFUSAL)
        else socket.destroy()
      }
      options.logger.debug({ remote: socket.remoteAddress, inFlight }, 'front door refused an http/1.1 connect')
    })
    // Its 'clientError' (a head the parser gave up on) is answered by the owner of the HTTP
    // handling: Fastify's clientErrorHandler (front-door.ts, http-errors.ts).
    if (options.tls === null) {
      this.#outer = net.createServer({ noDelay: true }, (socket) => { this.#classify(socket) })
    } else {
      const server = tls.createServer({
        ...options.tls.options,
        ALPNProtocols: ['h2', 'http/1.1'],
        requestCert: options.tls.requireClientCert,
        rejectUnauthorized: options.tls.requireClientCert,
        noDelay: true,
        handshakeTimeout: connections.tlsHandshakeTimeoutMs,
      })
      server.on('secureConnection', (socket) => { this.#onSecureConnection(socket) })
      server.on('tlsClientError', (err: NodeJS.ErrnoException, socket: TLSSocket) => {
        // With a listener Node leaves the socket to it: a handshake timeout alone closes nothing.
        socket.destroy()
        if (err.code === 'ERR_TLS_HANDSHAKE_TIMEOUT') options.onTimedOut?.('tls_handshake_timeout')
        options.onTlsError?.(err)
        options.logger.debug({ err: err.message }, 'front door tls handshake failed')
      })
      this.#outer = server
    }
    // 'connection' is the raw TCP socket, before TLS: counted and kept for shutdown.
    this.#outer.prependListener('connection', (socket: Socket) => { this.#onRawConnection(socket) })
    this.#outer.maxConnections = connections.maxConnections
    this.#outer.on('drop', () => { options.onRefused?.('max_connections', null) })
  }

  listen (): Promise<AddressInfo> {
    return new Promise((resolve, reject) => {
      this.#outer.once('error', reject)
      this.#outer.listen(this.#options.port, this.#options.host, () => {
        this.#outer.off('error', reject)
        // From now on an 'error' is an accept failure (EMFILE, ENFILE, ENOMEM): without a
        // listener it would be an uncaught exception. The server keeps listening.
        this.#outer.on('error', (err: NodeJS.ErrnoException) => {
          this.#options.onRefused?.('accept_error', err.code ?? null)
          this.#options.logger.warn({ code: err.code ?? err.message }, 'front door accept error')
        })
        resolve(this.#outer.address() as AddressInfo)
      })
    })
  }

  /** The HTTP/1.1 server the listener feeds (Fastify's serverFactory returns it). */
  get http1Server (): http.Server {
    return this.#h1
  }

  address (): AddressInfo | null {
    return this.#outer.address() as AddressInfo | null
  }

  get sessionCount (): number {
    return this.#sessions.size
  }

  /** Open TCP connections (every protocol, handshaking ones too). */
  get connectionCount (): number {
    return this.#raw.size
  }

  /** @internal an HTTP/1.1 response of this connection is done. */
  h1RequestFinished (connection: TrackedConnection, res: ServerResponse): void {
    this.#deadlines.requestFinished(connection)
    const socket = connection.socket
    if (connection.response === res) connection.response = null
    // Draining, or no further request is taken: a connection goes once its last response is
    // out (end: the response flushes).
    if ((this.#draining || connection.drainReason !== null || this.#h1Closing.has(socket)) && connection.requests === 0 && !socket.destroyed) socket.end()
  }

  /**
   * Node's HTTP/1.1 parser gave up on this connection's bytes, or the socket failed (the
   * 'clientError' event). True when the listener owns the answer: a request of the connection
   * is in flight (it may be upstream already, so the client must not be told 400), or the
   * connection was already refused. False: nothing of this connection is in flight and the
   * caller answers the bytes with its 400 or 431. No further request is taken either way.
   */
  h1ClientError (socket: Socket): boolean {
    const refused = this.#h1Closing.has(socket)
    this.#h1Closing.add(socket)
    if (refused) return true
    const connection = this.#tracked.get(socket)
    if (connection === undefined || connection.requests === 0) return false
    // The bytes broke off inside the body of the request being forwarded: cut the connection,
    // which aborts the upstream request (the pod never gets a complete one). Otherwise they came
    // after complete requests: those are answered, then the connection closes (h1RequestFinished).
    const latest = connection.response
    if (latest === null) return true
    if (!latest.req.complete) {
      // Unless that request was already answered (refused with `connection: close`): let it out.
      if (latest.writableEnded) socket.destroySoon()
      else socket.destroy()
    } else if (!latest.headersSent) latest.shouldKeepAlive = false // its response says the connection closes
    return true
  }

  /** @internal an HTTP/2 stream of this connection closed. */
  h2StreamClosed (connection: TrackedConnection): void {
    this.#deadlines.streamClosed(connection)
  }

  /** New handshakes use these options; established connections are untouched. */
  setSecureContext (options: tls.SecureContextOptions): void {
    if (!(this.#outer instanceof tls.Server)) throw new Error('the front door was started without TLS')
    this.#outer.setSecureContext(options)
  }

  /** Rotates TLS session-ticket keys so that no session resumes across a material change. */
  rotateTicketKeys (keys: Buffer): void {
    if (this.#outer instanceof tls.Server) this.#outer.setTicketKeys(keys)
  }

  /** Established TLS connections (for closing those whose client certificate lost trust). */
  tlsConnections (): Iterable<TLSSocket> {
    return this.#tlsSockets
  }

  /** GOAWAY (HTTP/2) or close (HTTP/1.1) one connection now, and cut it after graceMs. */
  closeConnection (socket: Socket, graceMs: number): void {
    const session = this.#sessionBySocket.get(socket)
    if (session !== undefined && !session.destroyed) session.close()
    else socket.end()
    const timer = setTimeout(() => { socket.destroy() }, graceMs)
    timer.unref()
    socket.once('close', () => { clearTimeout(timer) })
  }

  /**
   * Graceful close: stop accepting, drain every connection (connection-drain.ts: Watch and
   * registration streams end with UNAVAILABLE, HTTP/2 gets GOAWAY, HTTP/1.1 connections with no
   * request in flight close, the others after their response), let open streams and requests
   * finish until the deadline, then cut what is left. Resolves once every connection is gone,
   * and in any case CUT_WAIT_MS after the deadline. Idempotent.
   */
  close (deadlineMs: number): Promise<void> {
    this.#closing ??= this.#close(deadlineMs)
    return this.#closing
  }

  async #close (deadlineMs: number): Promise<void> {
    this.#draining = true
    // The listening socket is gone at this callback, once its connections are too.
    const unlistened = new Promise<void>((resolve) => { this.#outer.close(() => { resolve() }) })
    for (const handle of [...this.#handles.values()]) void handle.drain('shutdown')
    // Accepted but not tracked yet (a TLS handshake in progress): nothing to finish.
    for (const socket of this.#raw) if (!this.#tracked.has(socket)) socket.destroy()
    let deadline: NodeJS.Timeout | null = null
    let giveUp: NodeJS.Timeout | null = null
    await new Promise<void>((resolve) => {
      const check = (): void => { if (this.#raw.size === 0) resolve() }
      this.#onRawClosed = check
      check()
      deadline = setTimeout(() => {
        for (const session of this.#sessions) session.destroy()
        for (const socket of this.#raw) socket.destroy()
        // 'close' events follow destroy() within a tick or two; never wait on them for long.
        giveUp = setTimeout(resolve, CUT_WAIT_MS)
      }, deadlineMs)
    })
    this.#onRawClosed = null
    for (const timer of [deadline, giveUp]) if (timer !== null) clearTimeout(timer)
    this.#deadlines.stop()
    // Not when we gave up on connections that never reported their close.
    if (this.#raw.size === 0) await unlistened
  }

  #onRawConnection (socket: Socket): void {
    this.#raw.add(socket)
    this.#options.onConnectionCount?.(this.#raw.size)
    socket.once('close', () => {
      this.#raw.delete(socket)
      this.#options.onConnectionCount?.(this.#raw.size)
      this.#onRawClosed?.()
    })
  }

  /**
   * Tracks the socket the HTTP servers read (the raw one, or the TLS one over it), and
   * registers it to be drained; a connection accepted while the listener drains is drained at once.
   */
  #track (socket: Socket): TrackedConnection {
    const connection = this.#deadlines.track(socket)
    this.#tracked.set(socket, connection)
    const registry = this.#options.registry ?? null
    const handle = new FrontDoorConnection(connection, registry?.now() ?? Date.now(), this.#options.endGrpcStream)
    this.#handles.set(connection, handle)
    const release = registry?.add(handle) ?? null
    socket.once('close', () => {
      this.#deadlines.untrack(connection)
      this.#handles.delete(connection)
      release?.()
      handle.closed()
    })
    if (this.#draining) void handle.drain('shutdown')
    return connection
  }

  /** One tag per connection, shared by its requests and streams (no allocation per request). */
  #tagOf (connection: TrackedConnection): { door: FrontDoorListener, connection: TrackedConnection } {
    let tag = this.#tags.get(connection)
    if (tag === undefined) {
      tag = { door: this, connection }
      this.#tags.set(connection, tag)
    }
    return tag
  }

  #onExpired (connection: TrackedConnection, reason: DeadlineReason): void {
    this.#options.onTimedOut?.(reason)
    const socket = connection.socket
    switch (reason) {
      case 'headers_timeout':
        // What Node's own headersTimeout answers, then the connection goes.
        if (connection.phase === 'h1_head' && socket.writable) socket.end(HEADERS_TIMEOUT_RESPONSE)
        socket.destroySoon()
        setTimeout(destroyIfOpen, GOAWAY_GRACE_MS, socket).unref()
        break
      case 'keep_alive_timeout':
        socket.destroy()
        break
      case 'http2_idle_timeout': {
        const session = connection.session
        if (session === null || session.destroyed) {
          socket.destroy()
          break
        }
        session.close() // GOAWAY; with no stream open it closes at once
        setTimeout(destroyIfOpen, GOAWAY_GRACE_MS, session).unref()
        break
      }
      default: {
        const never: never = reason
        throw new Error(`unknown timeout ${String(never)}`)
      }
    }
  }

  #onH1Request (req: IncomingMessage, res: ServerResponse): void {
    const socket = req.socket
    const connection = this.#tracked.get(socket)
    // Parsed after an answer that closes the connection (a refusal, a drain, an error of the
    // forwarder: its response says close), or after the connection was refused: RFC 9112 §9.6,
    // no further request of it is processed. Its client never gets an answer: counted as one
    // that left, as the forwarder counts a waiting request whose connection went.
    if (this.#h1Closing.has(socket) || connection?.response?.shouldKeepAlive === false || !socket.writable) {
      this.#options.onH1RequestDropped?.()
      return
    }
    if (connection !== undefined) {
      this.#deadlines.requestStarted(connection)
      ;(res as Tagged<ServerResponse>)[kTracked] = this.#tagOf(connection)
      res.once('close', onH1ResponseClose)
      connection.response = res
      if (connection.drainReason !== null) res.shouldKeepAlive = false
    }
    if (this.#draining) res.shouldKeepAlive = false
    // RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing (an HTTP/1.0
    // hop before us may have read its body differently: request smuggling). nginx refuses it
    // with 400 as well.
    if (req.httpVersionMinor === 0 && req.headers['transfer-encoding'] !== undefined) {
      this.#h1Closing.add(socket)
      refuseRequest(req, res, 'bad_request')
      this.#options.logger.debug({ remote: socket.remoteAddress }, 'front door refused an http/1.0 request with transfer-encoding')
      return
    }
    // Node's parser takes a request line without a version (HTTP/0.9: `GET /path`) and one
    // saying `HTTP/2.0`; neither is an HTTP/1.x request to forward (RFC 9112 §2.3). HTTP/2
    // starts with its preface (the listener sniffs it), never with a request line.
    if (req.httpVersionMajor !== 1) {
      this.#h1Closing.add(socket)
      refuseRequest(req, res, req.httpVersionMajor === 0 ? 'bad_request' : 'http_version_not_supported')
      this.#options.logger.debug({ remote: socket.remoteAddress, version: req.httpVersion }, 'front door refused a request line that is not http/1.x')
      return
    }
    this.#options.onHttpRequest(req, res)
  }

  #attach (server: http2.Http2Server | http.Server, socket: Socket): void {
    this.#attaching = socket
    try {
      server.emit('connection', socket)
    } finally {
      this.#attaching = null
    }
  }

  #onSecureConnection (socket: TLSSocket): void {
    this.#tlsSockets.add(socket)
    socket.on('close', () => { this.#tlsSockets.delete(socket) })
    socket.on('error', ignoreStreamError)
    if (this.#draining) {
      socket.destroy()
      return
    }
    const h2 = socket.alpnProtocol === 'h2'
    this.#deadlines.classified(this.#track(socket), h2 ? 'h2' : 'h1')
    this.#attach(h2 ? this.#h2 : this.#h1, socket)
  }

  #classify (socket: Socket): void {
    let seen: Buffer = Buffer.alloc(0)
    // A connection that never says which protocol it speaks is not kept: the headers timeout
    // runs from accept (phase 'classify').
    const connection = this.#track(socket)
    const onData = (chunk: Buffer): void => {
      seen = seen.length === 0 ? chunk : Buffer.concat([seen, chunk])
      const n = Math.min(seen.length, H2_PREFACE.length)
      const h2 = seen.subarray(0, n).equals(H2_PREFACE.subarray(0, n))
      if (h2 && seen.length < H2_PREFACE.length) return // could still be either; wait for more
      socket.off('data', onData)
      socket.pause()
      socket.unshift(seen)
      if (this.#draining) {
        socket.destroy()
        return
      }
      this.#deadlines.classified(connection, h2 ? 'h2' : 'h1')
      if (h2) {
        // Left paused: the HTTP/2 session reads the buffered bytes itself on the next tick.
        this.#attach(this.#h2, socket)
      } else {
        this.#attach(this.#h1, socket)
        socket.resume()
      }
    }
    socket.on('data', onData)
    socket.on('error', ignoreStreamError)
  }

  #onStream (session: ServerHttp2Session, stream: ServerHttp2Stream, headers: IncomingHttpHeaders, rawHeaders: string[]): void {
    stream.on('error', ignoreStreamError)
    const admission = this.#guard.admit(session, stream, rawHeaders)
    if (admission === 'reset') return // reset by the client before we saw it
    const tag = (session as Tagged<ServerHttp2Session>)[kTracked]
    if (tag !== undefined) {
      this.#deadlines.streamOpened(tag.connection)
      ;(stream as Tagged<ServerHttp2Stream>)[kTracked] = tag
      stream.once('close', onH2StreamClose)
    }
    const grpc = isGrpcContentType(headers['content-type'])
    // Node resets lists over the advertised size (twice the limit) itself; between the limit
    // and that, this answer (http2-admission.ts, advertisedHeaderListSize).
    if (admission === 'headers_too_large') {
      const answer = this.#headersTooLarge
      if (grpc) respondWithStatus(stream, answer.grpc.status, answer.grpc.message)
      else {
        stream.respond({ ':status': HTTP_ERRORS.headers_too_large.status, 'content-type': 'application/json', 'content-length': answer.body.length, 'x-stargate-error-code': 'headers_too_large' })
        stream.end(answer.body)
      }
      return
    }
    if (grpc) {
      const connection = tag?.connection
      if (connection !== undefined) {
        if (connection.drainReason !== null) {
          // Sent before the client read the GOAWAY: refused as its connection's streams were ended.
          this.#options.onDrainRefused?.()
          const error = GRPC_ERRORS[DRAIN_REASONS[connection.drainReason].grpc]
          respondWithStatus(stream, error.status, error.message)
          return
        }
        ;(connection.controlStreams ??= new Set()).add(stream)
        stream.once('close', onControlStreamClose)
        if (headers[':path'] === REGISTER_INFERENCE_SERVER_PATH) {
          connection.registrations++
          stream.once('close', onRegistrationStreamClose)
        }
      }
      this.#options.onGrpcStream(stream, headers, rawHeaders)
      return
    }
    // What Node's compat layer does for the 'request' event, done here only for non-gRPC
    // streams so that gRPC streams never carry compat listeners (they would send trailers).
    const req = new Http2ServerRequest(stream, headers, {}, rawHeaders)
    const res = new Http2ServerResponse(stream)
    // A tunnel is no request to forward (Node's compat layer would answer a bare 405 itself).
    if (headers[':method'] === 'CONNECT') { refuseConnectStream(req, res); return }
    this.#options.onHttpRequest(req, res)
  }
}
