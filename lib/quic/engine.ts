/**
 * The QUIC engine, TypeScript side (the addon runs on Node's own event loop): the place where
 * the addon's event records become calls on endpoints, connections and streams. The router
 * makes one engine in its composition root and passes it to the tunnels; a test makes its own.
 *
 *   addon turn ──(count, objects)──▶ dispatch(): for each record [type, conn, stream, a, b, obj]
 *        PROPOSED ─▶ endpoint.onProposal(proposal)     (accept / reject, now or later)
 *        ESTABLISHED, CLOSED, STREAM_OPENED, DATAGRAM, STREAMS_AVAILABLE, DRAINED ─▶ the connection
 *        STREAM_READABLE / WRITABLE / RESET / STOP / CLOSED, SPLICE_DONE ─▶ the stream's handler
 *
 * Every handler call is guarded: an exception from one is reported through the onHandlerError
 * of the engine that owns the connection, and the connection is closed with an internal error,
 * so a bug in one tunnel's handling cannot end the process or stop the other connections' events.
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
  /** An event handler of this engine's connections threw; the connection has been closed (default: process warning). */
  readonly onHandlerError?: (err: unknown) => void
}

/** Transport error INTERNAL_ERROR (RFC 9000 §20.1). */
const INTERNAL_ERROR = 0x1

/**
 * The addon's event channel. Node loads an addon once per process and the addon reports every
 * connection's events through one callback, so the routing of events to connections (by the
 * addon's ids, unique in the process) is shared by every engine; what is an engine's own (its
 * endpoints, its connections, who hears about a failing handler) stays in the engine.
 */
class NativeEvents {
  readonly native: NativeQuic
  readonly #events: Float64Array
  readonly #endpoints = new Map<number, QuicEndpoint>()
  readonly #connections = new Map<number, QuicConnection>()
  readonly #engines = new Set<QuicEngine>()

  constructor (native: NativeQuic) {
    this.native = native
    this.#events = native.init((count, objects) => { this.#dispatch(count, objects) })
  }

  attach (engine: QuicEngine): void {
    this.#engines.add(engine)
  }

  detach (engine: QuicEngine): void {
    this.#engines.delete(engine)
  }

  addEndpoint (endpoint: QuicEndpoint): void {
    this.#endpoints.set(endpoint.id, endpoint)
  }

  deleteEndpoint (endpoint: QuicEndpoint): void {
    this.#endpoints.delete(endpoint.id)
  }

  addConnection (conn: QuicConnection): void {
    this.#connections.set(conn.id, conn)
  }

  deleteConnection (conn: QuicConnection): void {
    this.#connections.delete(conn.id)
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
        if (type === EV.PROPOSED || type === EV.PENDING_EXPIRED || type === EV.ENDPOINT_ERROR) this.#failed(null, this.#endpoints.get(a) ?? null, err)
        else this.#failed(this.#connections.get(id) ?? null, null, err)
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

  /** The connection is closed with an internal error; the engine that owns it (or the endpoint) hears of the error. */
  #failed (conn: QuicConnection | null, endpoint: QuicEndpoint | null, err: unknown): void {
    try {
      conn?.close(INTERNAL_ERROR, '', false)
    } catch {
      // Closing is best effort here.
    }
    let owner: QuicEngine | null = null
    for (const engine of this.#engines) {
      if ((conn !== null && engine.owns(conn)) || (endpoint !== null && engine.ownsEndpoint(endpoint))) owner = engine
    }
    try {
      (owner?.onHandlerError ?? defaultHandlerError)(err)
    } catch {
      // A failing error reporter must not stop the dispatch either.
    }
  }
}

let events: NativeEvents | null = null

/**
 * A QUIC engine: the endpoints it listens on and the connections it dials or accepts, with the
 * handler of their failures. The composition root makes one and passes it to what needs it;
 * tests make their own. Several engines in one process share the addon (NativeEvents).
 */
export class QuicEngine {
  readonly native: NativeQuic
  readonly onHandlerError: (err: unknown) => void
  readonly #events: NativeEvents
  readonly #endpoints = new Set<QuicEndpoint>()
  readonly #connections = new Set<QuicConnection>()
  readonly #forget = (conn: QuicConnection): void => {
    this.#connections.delete(conn)
    this.#events.deleteConnection(conn)
  }

  #closed = false

  /** Loads the addon on first use; throws when it is not built. */
  constructor (options: QuicEngineOptions = {}) {
    events ??= new NativeEvents(loadNative())
    this.#events = events
    this.native = events.native
    this.onHandlerError = options.onHandlerError ?? defaultHandlerError
    events.attach(this)
  }

  /** Connections of this engine the addon routes events to (handshaking or open). */
  get connectionCount (): number {
    return this.#connections.size
  }

  /** Endpoints of this engine still listening. */
  get endpointCount (): number {
    return this.#endpoints.size
  }

  get closed (): boolean {
    return this.#closed
  }

  /** The addon's counters (process-wide: every engine's connections, endpoints and credentials). */
  counters (): NativeCounters {
    return this.native.counters()
  }

  /** A listening endpoint; throws (with the errno code) when the address cannot be bound. */
  listen (options: QuicListenOptions): QuicEndpoint {
    this.#open()
    const endpoint = new QuicEndpoint(this, options)
    this.#endpoints.add(endpoint)
    this.#events.addEndpoint(endpoint)
    return endpoint
  }

  /** Dials a server on a UDP socket of the connection's own; listen for 'established' / 'close'. */
  connect (options: QuicConnectOptions): QuicConnection {
    this.#open()
    const id = this.native.connect(options.address, options.port, options.credentials.id, options.serverName, encodeAlpn(options.alpn),
      options.transport ?? {}, { recvBuffer: options.recvBuffer, sendBuffer: options.sendBuffer })
    const conn = new QuicConnection(this.native, id, 'client', options.address, options.port, options.serverName, this.#forget)
    this.adopt(conn)
    return conn
  }

  /**
   * Closes every endpoint of this engine and destroys its connections still open (their close
   * events still come), then takes nothing more. Owners close their connections first to tell
   * their peers; this is the backstop that leaves no handle behind. Idempotent.
   */
  close (): void {
    if (this.#closed) return
    this.#closed = true
    for (const endpoint of [...this.#endpoints]) endpoint.close()
    for (const conn of [...this.#connections]) if (!conn.closed) conn.destroy()
    this.#events.detach(this)
  }

  /** @internal Whether the connection is one of this engine's. */
  owns (conn: QuicConnection): boolean {
    return this.#connections.has(conn)
  }

  /** @internal */
  ownsEndpoint (endpoint: QuicEndpoint): boolean {
    return this.#endpoints.has(endpoint)
  }

  /** @internal A connection dialled, or accepted on one of this engine's endpoints (QuicProposal.accept()). */
  adopt (conn: QuicConnection): void {
    this.#connections.add(conn)
    this.#events.addConnection(conn)
  }

  /** @internal */
  forgetEndpoint (endpoint: QuicEndpoint): void {
    this.#endpoints.delete(endpoint)
    this.#events.deleteEndpoint(endpoint)
  }

  /** @internal */
  newConnection (id: number, remoteAddress: string, remotePort: number, serverName: string | null): QuicConnection {
    return new QuicConnection(this.native, id, 'server', remoteAddress, remotePort, serverName, this.#forget)
  }

  #open (): void {
    if (this.#closed) throw new Error('the QUIC engine is closed')
  }
}

function defaultHandlerError (err: unknown): void {
  process.emitWarning(`quic event handler failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}`, { code: 'STARGATE_QUIC_HANDLER' })
}
