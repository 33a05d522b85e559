/**
 * The front door's TCP listener (SPEC §2, §12).
 *
 * Without TLS one port serves HTTP/2 with prior knowledge (h2c, as Pylons and gRPC clients
 * send it) and HTTP/1.1: the first bytes of a connection decide, and the socket goes to the
 * matching (non-listening) server with those bytes left in its buffer. With TLS, ALPN decides
 * (h2, else HTTP/1.1). The TLS SecureContext can be replaced at any time for new handshakes
 * (hot reload) without touching the listener or established connections.
 *
 * HTTP/2 streams with a gRPC content type go to the gRPC handler at the stream level (full
 * duplex, trailers); every other request, HTTP/1.1 or h2, goes to the HTTP handler as a Node
 * request/response pair. HTTP/2 limits and a rapid-reset guard apply to every session.
 */
import net, { type AddressInfo, type Socket } from 'node:net'
import tls, { type TLSSocket } from 'node:tls'
import http, { type IncomingMessage, type ServerResponse } from 'node:http'
import http2, {
  Http2ServerRequest, Http2ServerResponse,
  type IncomingHttpHeaders, type ServerHttp2Session, type ServerHttp2Stream,
} from 'node:http2'
import { GrpcStatus, isGrpcContentType, respondWithStatus } from '../control-plane/grpc.ts'
import { DEFAULT_RAPID_RESET, RapidResetGuard, type RapidResetGuardOptions } from './http2-guard.ts'
import type { Logger } from '../log.ts'

export type GrpcStreamHandler = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, rawHeaders: readonly string[]) => void
export type HttpRequestHandler = (req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse) => void

export interface FrontDoorTls {
  /** Secure context options of the first handshakes (cert, key, and ca when verifying clients). */
  readonly options: tls.SecureContextOptions
  /** Ask for and verify client certificates (mTLS for Pylons): rejected at the TLS layer. */
  readonly requireClientCert: boolean
}

export interface Http2Limits {
  readonly maxConcurrentStreams: number
  readonly maxHeaderListSize: number
}

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
}

const CLASSIFY_TIMEOUT_MS = 10_000
/** Between ending streams with a status at the drain deadline and cutting connections. */
const STATUS_FLUSH_MS = 200
const H2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n')
export const DEFAULT_LIMITS: Http2Limits = { maxConcurrentStreams: 1000, maxHeaderListSize: 16 * 1024 }

function headerListSize (raw: readonly string[]): number {
  let size = 0
  for (let i = 0; i < raw.length; i++) size += (raw[i] as string).length
  return size + 16 * raw.length // 32 bytes of overhead per field, two entries per field
}

function ignoreStreamError (): void {
  // Stream errors (client resets, broken sockets) are reported by the handlers that own the
  // stream; without a listener Node would turn them into uncaught exceptions.
}

export class FrontDoor {
  readonly #options: FrontDoorOptions
  readonly #outer: net.Server | tls.Server
  readonly #h2: http2.Http2Server
  readonly #h1: http.Server
  readonly #guard: RapidResetGuard
  readonly #sessions = new Set<ServerHttp2Session>()
  readonly #tlsSockets = new Set<TLSSocket>()
  readonly #sessionBySocket = new WeakMap<Socket, ServerHttp2Session>()
  #attaching: Socket | null = null
  readonly #maxHeaderListSize: number
  #closing: Promise<void> | null = null

  constructor (options: FrontDoorOptions) {
    this.#options = options
    const limits = options.limits ?? DEFAULT_LIMITS
    this.#maxHeaderListSize = limits.maxHeaderListSize
    this.#guard = new RapidResetGuard({
      ...(options.rapidReset ?? DEFAULT_RAPID_RESET),
      onTrip: (session, resets, opened) => {
        options.onRapidReset?.()
        options.logger.warn({ resets, opened, remote: session.socket?.remoteAddress }, 'closing http2 connection: rapid stream resets (GOAWAY ENHANCE_YOUR_CALM)')
      },
    })
    this.#h2 = http2.createServer({
      settings: { maxConcurrentStreams: limits.maxConcurrentStreams, maxHeaderListSize: limits.maxHeaderListSize, enablePush: false },
      maxHeaderListPairs: 256,
      maxSessionInvalidFrames: 100,
      maxSessionRejectedStreams: 100,
      maxSettings: 32,
      maxOutstandingPings: 10,
      // Registration streams are long-lived and many per session; Node's 10 MB default
      // session memory would refuse streams under load.
      maxSessionMemory: 64,
    })
    this.#h2.on('session', (session) => {
      this.#sessions.add(session)
      // The session's own 'stream' event, not the server's: it carries the session even for
      // streams that were reset before the handler ran (rapid-reset guard).
      session.on('stream', (stream, headers, _flags, rawHeaders) => { this.#onStream(session, stream, headers, rawHeaders) })
      if (this.#attaching !== null) this.#sessionBySocket.set(this.#attaching, session)
      session.on('close', () => { this.#sessions.delete(session) })
      session.on('error', (err) => { options.logger.debug({ err: err.message }, 'front door http2 session error') })
    })
    this.#h1 = http.createServer({ requestTimeout: 300_000, headersTimeout: 30_000, maxHeaderSize: limits.maxHeaderListSize }, (req, res) => { options.onHttpRequest(req, res) })
    // Without this listener Node answers 100 Continue before the request is routed; the HTTP
    // handler sends it once the request may go ahead (refused ones never upload their body).
    this.#h1.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => { options.onHttpRequest(req, res) })
    this.#h1.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
      if (socket.writable && !socket.destroyed) {
        const status = err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : '400 Bad Request'
        socket.end(`HTTP/1.1 ${status}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`)
      } else {
        socket.destroy()
      }
      options.logger.debug({ err: err.code ?? err.message }, 'front door http/1.1 client error')
    })
    if (options.tls === null) {
      this.#outer = net.createServer({ noDelay: true }, (socket) => { this.#classify(socket) })
    } else {
      const server = tls.createServer({
        ...options.tls.options,
        ALPNProtocols: ['h2', 'http/1.1'],
        requestCert: options.tls.requireClientCert,
        rejectUnauthorized: options.tls.requireClientCert,
        noDelay: true,
      })
      server.on('secureConnection', (socket) => { this.#onSecureConnection(socket) })
      server.on('tlsClientError', (err) => {
        options.onTlsError?.(err)
        options.logger.debug({ err: err.message }, 'front door tls handshake failed')
      })
      this.#outer = server
    }
  }

  listen (): Promise<AddressInfo> {
    return new Promise((resolve, reject) => {
      this.#outer.once('error', reject)
      this.#outer.listen(this.#options.port, this.#options.host, () => {
        this.#outer.off('error', reject)
        resolve(this.#outer.address() as AddressInfo)
      })
    })
  }

  address (): AddressInfo | null {
    return this.#outer.address() as AddressInfo | null
  }

  get sessionCount (): number {
    return this.#sessions.size
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
   * Graceful close: stop accepting, send GOAWAY so clients open no new streams, let open
   * streams and requests finish until the deadline, then cut what is left. Idempotent.
   */
  close (deadlineMs: number, onDeadline?: () => void): Promise<void> {
    this.#closing ??= this.#close(deadlineMs, onDeadline)
    return this.#closing
  }

  async #close (deadlineMs: number, onDeadline?: () => void): Promise<void> {
    const closed = new Promise<void>((resolve) => { this.#outer.close(() => { resolve() }) })
    for (const session of this.#sessions) session.close()
    this.#h1.closeIdleConnections()
    let cut: NodeJS.Timeout | null = null
    const deadline = setTimeout(() => {
      // Let owners end their streams with a proper status first, then cut what is left.
      onDeadline?.()
      cut = setTimeout(() => {
        for (const session of this.#sessions) session.destroy()
        this.#h1.closeAllConnections()
        for (const socket of this.#tlsSockets) socket.destroy()
      }, STATUS_FLUSH_MS)
    }, deadlineMs)
    const h1Done = new Promise<void>((resolve) => { this.#h1.close(() => { resolve() }) })
    await Promise.all([closed, h1Done, this.#sessionsClosed()])
    clearTimeout(deadline)
    if (cut !== null) clearTimeout(cut)
  }

  async #sessionsClosed (): Promise<void> {
    while (this.#sessions.size > 0) {
      const [first] = this.#sessions
      if (first === undefined) break
      await new Promise<void>((resolve) => { first.once('close', () => { resolve() }) })
    }
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
    if (socket.alpnProtocol === 'h2') this.#attach(this.#h2, socket)
    else this.#attach(this.#h1, socket)
  }

  #classify (socket: Socket): void {
    let seen: Buffer = Buffer.alloc(0)
    // A connection that never says which protocol it speaks is not kept.
    socket.setTimeout(CLASSIFY_TIMEOUT_MS, () => { socket.destroy() })
    const onData = (chunk: Buffer): void => {
      seen = seen.length === 0 ? chunk : Buffer.concat([seen, chunk])
      const n = Math.min(seen.length, H2_PREFACE.length)
      const h2 = seen.subarray(0, n).equals(H2_PREFACE.subarray(0, n))
      if (h2 && seen.length < H2_PREFACE.length) return // could still be either; wait for more
      socket.off('data', onData)
      socket.setTimeout(0)
      socket.pause()
      socket.unshift(seen)
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
    this.#guard.onStream(session, stream)
    if (stream.destroyed) return // reset by the client before we saw it
    const grpc = isGrpcContentType(headers['content-type'])
    // Node advertises SETTINGS_MAX_HEADER_LIST_SIZE but does not enforce it; RFC 7541 §4.1 size.
    if (headerListSize(rawHeaders) > this.#maxHeaderListSize) {
      if (grpc) respondWithStatus(stream, GrpcStatus.RESOURCE_EXHAUSTED, `request headers exceed ${this.#maxHeaderListSize} bytes`)
      else {
        stream.respond({ ':status': 431, 'content-type': 'application/json' })
        stream.end(JSON.stringify({ error: { code: 'headers_too_large', message: `request headers exceed ${this.#maxHeaderListSize} bytes` } }))
      }
      return
    }
    if (grpc) {
      this.#options.onGrpcStream(stream, headers, rawHeaders)
      return
    }
    // What Node's compat layer does for the 'request' event, done here only for non-gRPC
    // streams so that gRPC streams never carry compat listeners (they would send trailers).
    const req = new Http2ServerRequest(stream, headers, {}, rawHeaders)
    const res = new Http2ServerResponse(stream)
    this.#options.onHttpRequest(req, res)
  }
}
