/**
 * The QUIC engine, TypeScript side: one per process (the addon runs on Node's own event loop),
 * the place where the addon's event records become calls on endpoints, connections and streams.
 *
 *   addon turn ──(count, objects)──▶ dispatch(): for each record [type, conn, stream, a, b, obj]
 *        PROPOSED ─▶ endpoint.onProposal(proposal)     (accept / reject, now or later)
 *        ESTABLISHED, CLOSED, STREAM_OPENED, DATAGRAM, STREAMS_AVAILABLE, DRAINED ─▶ the connection
 *        STREAM_READABLE / WRITABLE / RESET / STOP / CLOSED, SPLICE_DONE ─▶ the stream's handler
 *
 * Every handler call is guarded: an exception from one is reported through onHandlerError and
 * the connection it concerned is closed with an internal error, so a bug in one tunnel's
 * handling cannot end the process or stop the other connections' events.
 */
import type { ClientCredentials } from './credentials.ts'
import { encodeAlpn } from './alpn.ts'
import { QuicConnection } from './connection.ts'
import { QuicEndpoint, type QuicListenOptions } from './endpoint.ts'
import { EV, EVENT_STRIDE, loadNative, type NativeCloseInfo, type NativeCounters, type NativeProposal, type NativeQuic, type NativeTransport } from './native.ts'

export type TransportOptions = NativeTransport

export interface QuicConnectOptions {
  /** IP address to dial (never a name: the router dials only snapshot addresses). */
  readonly address: string
  readonly port: number
  /** SNI sent, and the name the certificate is verified against; null sends none. */
  readonly serverName: string | null
  /** Protocols offered; empty offers no ALPN extension at all. */
  readonly alpn: readonly string[]
  readonly credentials: ClientCredentials
  readonly transport?: TransportOptions
  /** The dial's own UDP socket buffer sizes (default 256 KiB each). */
  readonly recvBuffer?: number
  readonly sendBuffer?: number
}

export interface QuicEngineOptions {
  /** An event handler threw; the connection it concerned has been closed (default: process warning). */
  readonly onHandlerError?: (err: unknown) => void
}

/** Transport error INTERNAL_ERROR (RFC 9000 §20.1). */
const INTERNAL_ERROR = 0x1

export class QuicEngine {
  readonly native: NativeQuic
  readonly #events: Float64Array
  readonly #endpoints = new Map<number, QuicEndpoint>()
  readonly #connections = new Map<number, QuicConnection>()
  #onHandlerError: (err: unknown) => void
  readonly #forget = (conn: QuicConnection): void => { this.#connections.delete(conn.id) }

  private constructor (native: NativeQuic, options: QuicEngineOptions) {
    this.native = native
    this.#onHandlerError = options.onHandlerError ?? defaultHandlerError
    this.#events = native.init((count, objects) => { this.#dispatch(count, objects) })
  }

  static #shared: QuicEngine | null = null

  /** The process's engine (created, and the addon loaded, on first use). */
  static shared (options: QuicEngineOptions = {}): QuicEngine {
    QuicEngine.#shared ??= new QuicEngine(loadNative(), options)
    if (options.onHandlerError !== undefined) QuicEngine.#shared.#onHandlerError = options.onHandlerError
    return QuicEngine.#shared
  }

  /** Connections the engine routes events to (handshaking or open). */
  get connectionCount (): number {
    return this.#connections.size
  }

  counters (): NativeCounters {
    return this.native.counters()
  }

  /** A listening endpoint; throws (with the errno code) when the address cannot be bound. */
  listen (options: QuicListenOptions): QuicEndpoint {
    const endpoint = new QuicEndpoint(this, options)
    this.#endpoints.set(endpoint.id, endpoint)
    return endpoint
  }

  /** Dials a server on a UDP socket of the connection's own; listen for 'established' / 'close'. */
  connect (options: QuicConnectOptions): QuicConnection {
    const id = this.native.connect(options.address, options.port, options.credentials.id, options.serverName, encodeAlpn(options.alpn),
      options.transport ?? {}, { recvBuffer: options.recvBuffer, sendBuffer: options.sendBuffer })
    const conn = new QuicConnection(this.native, id, 'client', options.address, options.port, options.serverName, this.#forget)
    this.#connections.set(id, conn)
    return conn
  }

  /** @internal A server connection made by QuicProposal.accept(). */
  adopt (conn: QuicConnection): void {
    this.#connections.set(conn.id, conn)
  }

  /** @internal */
  forgetEndpoint (endpoint: QuicEndpoint): void {
    this.#endpoints.delete(endpoint.id)
  }

  /** @internal */
  newConnection (id: number, remoteAddress: string, remotePort: number, serverName: string | null): QuicConnection {
    return new QuicConnection(this.native, id, 'server', remoteAddress, remotePort, serverName, this.#forget)
  }

  #dispatch (count: number, objects: unknown[] | undefined): void {
    const ev = this.#events
    for (let i = 0; i < count; i++) {
      const at = i * EVENT_STRIDE
      const type = ev[at] as number
      const id = ev[at + 1] as number
      const streamId = ev[at + 2] as number
      const a = ev[at + 3] as number
      const b = ev[at + 4] as number
      const index = ev[at + 5] as number
      const object = index >= 0 && objects !== undefined ? objects[index] : undefined
      try {
        this.#deliver(type, id, streamId, a, b, object)
      } catch (err) {
        this.#failed(type === EV.PROPOSED || type === EV.ENDPOINT_ERROR || type === EV.PENDING_EXPIRED ? null : id, err)
      }
    }
  }

  #deliver (type: number, id: number, streamId: number, a: number, b: number, object: unknown): void {
    switch (type) {
      case EV.PROPOSED:
        this.#endpoints.get(a)?.handleProposal(id, object as NativeProposal)
        return
      case EV.PENDING_EXPIRED:
        this.#endpoints.get(a)?.handleExpired(id)
        return
      case EV.ENDPOINT_ERROR:
        return
      default:
        break
    }
    const conn = this.#connections.get(id)
    if (conn === undefined) return
    switch (type) {
      case EV.ESTABLISHED:
        conn.handleEstablished(a === 1)
        return
      case EV.CLOSED:
        conn.handleClosed(a, b, object as NativeCloseInfo | undefined)
        return
      case EV.STREAM_OPENED:
        conn.handleStreamOpened(streamId)
        return
      case EV.DATAGRAM:
        conn.emit('datagram', object as Buffer)
        return
      case EV.STREAMS_AVAILABLE:
        conn.emit('streamsAvailable', a, b)
        return
      case EV.STREAM_CLOSED:
        conn.handleStreamGone(streamId)
        return
      case EV.SPLICE_DONE:
        conn.handleSpliceDone(streamId, a)
        return
      case EV.DRAINED:
        conn.handleDrained()
        return
      default:
        break
    }
    const stream = conn.stream(streamId)
    if (stream === undefined || stream.closed) return
    const handler = stream.handler
    switch (type) {
      case EV.STREAM_READABLE:
        handler?.onReadable?.(stream)
        return
      case EV.STREAM_WRITABLE:
        handler?.onWritable?.(stream)
        return
      case EV.STREAM_RESET:
        stream.resetCode = a
        handler?.onReset?.(stream, a)
        return
      case EV.STREAM_STOP:
        stream.stopCode = a
        stream.writeEnded = true
        handler?.onStopSending?.(stream, a)
        return
      default:
        return
    }
  }

  #failed (connId: number | null, err: unknown): void {
    if (connId !== null) {
      const conn = this.#connections.get(connId)
      try {
        conn?.close(INTERNAL_ERROR, '', false)
      } catch {
        // Closing is best effort here.
      }
    }
    try {
      this.#onHandlerError(err)
    } catch {
      // A failing error reporter must not stop the dispatch either.
    }
  }
}

function defaultHandlerError (err: unknown): void {
  process.emitWarning(`quic event handler failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}`, { code: 'STARGATE_QUIC_HANDLER' })
}
