/**
 * The front door's TCP listener (SPEC §2). Without TLS one port serves HTTP/2 with prior
 * knowledge (h2c, as Pylons and gRPC clients send it) and HTTP/1.1: the first bytes of a
 * connection decide, and the socket goes to the matching (non-listening) server with those
 * bytes left in its buffer. HTTP/2 streams with a gRPC content type go to the gRPC handler
 * at the stream level (full duplex, trailers); every other request, HTTP/1.1 or h2, goes to
 * the HTTP handler as a Node request/response pair.
 */
import net, { type AddressInfo, type Socket } from 'node:net'
import http, { type IncomingMessage, type ServerResponse } from 'node:http'
import http2, {
  Http2ServerRequest, Http2ServerResponse,
  type IncomingHttpHeaders, type ServerHttp2Session, type ServerHttp2Stream,
} from 'node:http2'
import { isGrpcContentType } from '../control-plane/grpc.ts'
import type { Logger } from '../log.ts'

export type GrpcStreamHandler = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => void
export type HttpRequestHandler = (req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse) => void

export interface FrontDoorOptions {
  readonly host: string
  readonly port: number
  readonly onGrpcStream: GrpcStreamHandler
  readonly onHttpRequest: HttpRequestHandler
  readonly logger: Logger
  readonly http2Settings?: http2.Settings
}

const CLASSIFY_TIMEOUT_MS = 10_000
const H2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n')

function ignoreStreamError (): void {
  // Stream errors (client resets, broken sockets) are reported by the handlers that own the
  // stream; without a listener Node would turn them into uncaught exceptions.
}

export class FrontDoor {
  readonly #options: FrontDoorOptions
  readonly #outer: net.Server
  readonly #h2: http2.Http2Server
  readonly #h1: http.Server
  readonly #sessions = new Set<ServerHttp2Session>()
  #closing: Promise<void> | null = null

  constructor (options: FrontDoorOptions) {
    this.#options = options
    this.#h2 = http2.createServer({
      settings: { maxConcurrentStreams: 1000, maxHeaderListSize: 16 * 1024, ...options.http2Settings },
    })
    this.#h2.on('stream', (stream, headers, _flags, rawHeaders) => { this.#onStream(stream, headers, rawHeaders) })
    this.#h2.on('session', (session) => {
      this.#sessions.add(session)
      session.on('close', () => { this.#sessions.delete(session) })
      session.on('error', (err) => { options.logger.debug({ err: err.message }, 'front door http2 session error') })
    })
    this.#h1 = http.createServer({ requestTimeout: 300_000, headersTimeout: 30_000 }, (req, res) => { options.onHttpRequest(req, res) })
    this.#h1.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
      if (socket.writable && !socket.destroyed) socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n')
      else socket.destroy()
      options.logger.debug({ err: err.code ?? err.message }, 'front door http/1.1 client error')
    })
    this.#outer = net.createServer({ noDelay: true }, (socket) => { this.#classify(socket) })
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

  /**
   * Graceful close: stop accepting, send GOAWAY so clients open no new streams, let open
   * streams and requests finish until the deadline, then cut what is left. Idempotent.
   */
  close (deadlineMs: number): Promise<void> {
    this.#closing ??= this.#close(deadlineMs)
    return this.#closing
  }

  async #close (deadlineMs: number): Promise<void> {
    const closed = new Promise<void>((resolve) => { this.#outer.close(() => { resolve() }) })
    for (const session of this.#sessions) session.close()
    this.#h1.closeIdleConnections()
    const deadline = setTimeout(() => {
      for (const session of this.#sessions) session.destroy()
      this.#h1.closeAllConnections()
    }, deadlineMs)
    const h1Done = new Promise<void>((resolve) => { this.#h1.close(() => { resolve() }) })
    await Promise.all([closed, h1Done, this.#sessionsClosed()])
    clearTimeout(deadline)
  }

  async #sessionsClosed (): Promise<void> {
    while (this.#sessions.size > 0) {
      const [first] = this.#sessions
      if (first === undefined) break
      await new Promise<void>((resolve) => { first.once('close', () => { resolve() }) })
    }
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
        this.#h2.emit('connection', socket)
      } else {
        this.#h1.emit('connection', socket)
        socket.resume()
      }
    }
    socket.on('data', onData)
    socket.on('error', ignoreStreamError)
  }

  #onStream (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, rawHeaders: string[]): void {
    stream.on('error', ignoreStreamError)
    if (isGrpcContentType(headers['content-type'])) {
      this.#options.onGrpcStream(stream, headers)
      return
    }
    // What Node's compat layer does for the 'request' event, done here only for non-gRPC
    // streams so that gRPC streams never carry compat listeners (they would send trailers).
    const req = new Http2ServerRequest(stream, headers, {}, rawHeaders)
    const res = new Http2ServerResponse(stream)
    this.#options.onHttpRequest(req, res)
  }
}
