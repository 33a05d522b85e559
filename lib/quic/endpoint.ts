/**
 * A listening QUIC endpoint. The addon reads each client's ClientHello from its Initial
 * packet(s) before keeping any connection state, and proposes the connection here with the SNI
 * and ALPN list it offered; the owner decides, in the onProposal call or later:
 *
 *   proposal.accept({ credentials, alpn })  the TLS material and the ALPN protocols the server
 *                                           accepts (the relay passes exactly what the client
 *                                           offered, including nothing; HTTP/3 passes ['h3'])
 *   proposal.reject()                       a CONNECTION_CLOSE in an Initial packet, before any
 *                                           handshake work (SPEC §7: unknown SNI), with no reason
 *                                           phrase: the owner logs and counts its own reason
 *
 * A proposal not decided within pendingTimeoutMs is dropped by the addon, as is a ClientHello
 * still incomplete pendingTimeoutMs after the last datagram that brought new bytes of it (its
 * datagrams are held until it is whole: at most six, 20 KiB; a repeated datagram is not kept and
 * does not extend the wait); neither is held past the handshake timeout from its first datagram.
 * Limits (connections, half-open per address, the Retry threshold) apply before a proposal is
 * made.
 */
import { encodeAlpn } from './alpn.ts'
import type { QuicConnection } from './connection.ts'
import type { ServerCredentials } from './credentials.ts'
import type { NativeEndpointStats, NativeProposal, NativeQuic, NativeTransport as TransportOptions } from './native.ts'

/** Transport error APPLICATION_ERROR: RFC 9000 §10.2.3 makes an application close sent before
    the handshake completes (in an Initial packet) this code, with the reason phrase cleared. */
export const APPLICATION_ERROR = 0x0c

export interface QuicEndpointLimits {
  /** Connections plus proposals at most; more Initials are dropped (default 10,000). */
  readonly maxConnections?: number
  /** Half-open handshakes per source address before its new Initials get a Retry (default 64). */
  readonly maxHalfOpenPerAddress?: number
  /** Half-open handshakes in total before every new Initial gets a Retry (default 500). */
  readonly retryThreshold?: number
  /** Retry every client first, whatever the load. */
  readonly retry?: boolean
  /**
   * An incomplete ClientHello is dropped when no new byte of it came for this long, a proposal when
   * it is not decided within this long; either at the latest after the handshake timeout from the
   * first datagram (default 4000: two retransmissions of a client's first flight, 1 s and 3 s after
   * it, lib/quic/native/src/quic.h).
   */
  readonly pendingTimeoutMs?: number
}

export interface QuicListenOptions extends QuicEndpointLimits {
  /** An IP address (0.0.0.0 / :: for all). */
  readonly host: string
  readonly port: number
  /** Called once per proposed connection, within the addon's turn. */
  readonly onProposal: (proposal: QuicProposal) => void
  /** Transport parameters of accepted connections (accept() may override per connection). */
  readonly transport?: TransportOptions
  /**
   * Key for stateless reset tokens (≥ 16 bytes). Derive it from something that survives a
   * restart (the server key) so peers of a previous process are reset at once instead of
   * waiting out their idle timeout. Default: random per endpoint.
   */
  readonly resetSecret?: Uint8Array | null
  /** Socket buffer sizes (default 4 MiB; the kernel caps them at net.core.[rw]mem_max). */
  readonly recvBuffer?: number
  readonly sendBuffer?: number
}

export interface AcceptOptions {
  readonly credentials: ServerCredentials
  /** Protocols the server accepts, in preference order; empty: no ALPN. */
  readonly alpn: readonly string[]
  readonly transport?: TransportOptions
}

export class QuicProposal {
  readonly endpoint: QuicEndpoint
  readonly pendingId: number
  /** Lower-cased SNI the client sent, or null. */
  readonly sni: string | null
  /** ALPN protocols the client offered, in its order (empty: none). */
  readonly alpn: readonly string[]
  readonly address: string
  readonly port: number
  /** The client proved its address with a Retry token. */
  readonly validated: boolean
  #decided = false

  constructor (endpoint: QuicEndpoint, pendingId: number, p: NativeProposal) {
    this.endpoint = endpoint
    this.pendingId = pendingId
    this.sni = p.sni
    this.alpn = p.alpn
    this.address = p.address
    this.port = p.port
    this.validated = p.validated
  }

  get decided (): boolean {
    return this.#decided
  }

  /** Starts the handshake. Null when the proposal expired or was already decided. */
  accept (options: AcceptOptions): QuicConnection | null {
    if (this.#decided) return null
    this.#decided = true
    return this.endpoint.acceptPending(this, options)
  }

  /**
   * Refuses it with a transport CONNECTION_CLOSE(code) in an Initial, without a reason phrase
   * (anyone on the path reads an Initial; RFC 9000 §10.2.3); nothing else is kept.
   */
  reject (code = APPLICATION_ERROR): void {
    if (this.#decided) return
    this.#decided = true
    this.endpoint.rejectPending(this, code)
  }
}

/**
 * What an endpoint needs of the engine that owns it (QuicEngine implements it). Declared here
 * so that endpoint.ts does not import engine.ts, which creates endpoints (no cycle).
 */
export interface EndpointEngine {
  readonly native: NativeQuic
  /** Takes a connection accepted on this endpoint into the engine's event dispatch. */
  adopt: (conn: QuicConnection) => void
  forgetEndpoint: (endpoint: QuicEndpoint) => void
  newConnection: (id: number, remoteAddress: string, remotePort: number, serverName: string | null) => QuicConnection
}

export class QuicEndpoint {
  readonly id: number
  readonly address: string
  readonly port: number
  readonly #engine: EndpointEngine
  readonly #onProposal: (proposal: QuicProposal) => void
  readonly #pending = new Map<number, QuicProposal>()
  #closed = false

  constructor (engine: EndpointEngine, options: QuicListenOptions) {
    this.#engine = engine
    this.#onProposal = options.onProposal
    const [id, address, port] = engine.native.listen(options.host, options.port, {
      recvBuffer: options.recvBuffer ?? 4 * 1024 * 1024,
      sendBuffer: options.sendBuffer ?? 4 * 1024 * 1024,
      maxConnections: options.maxConnections,
      maxHalfOpenPerAddress: options.maxHalfOpenPerAddress,
      retryThreshold: options.retryThreshold,
      retry: options.retry,
      pendingTimeoutMs: options.pendingTimeoutMs,
      resetSecret: options.resetSecret ?? null,
      transport: options.transport,
    })
    this.id = id
    this.address = address
    this.port = port
  }

  get closed (): boolean {
    return this.#closed
  }

  stats (): NativeEndpointStats | null {
    return this.#engine.native.endpointStats(this.id) ?? null
  }

  /** Changes limits for Initials from now on. */
  configure (limits: QuicEndpointLimits): void {
    this.#engine.native.endpointConfigure(this.id, limits)
  }

  /** Closes the socket; connections still on it are destroyed (close them first to tell their peers). Idempotent. */
  close (): void {
    if (this.#closed) return
    this.#closed = true
    this.#pending.clear()
    this.#engine.native.endpointClose(this.id)
    this.#engine.forgetEndpoint(this)
  }

  /** @internal */
  handleProposal (pendingId: number, p: NativeProposal): void {
    const proposal = new QuicProposal(this, pendingId, p)
    this.#pending.set(pendingId, proposal)
    try {
      this.#onProposal(proposal)
    } finally {
      if (proposal.decided) this.#pending.delete(pendingId)
    }
  }

  /** @internal */
  handleExpired (pendingId: number): void {
    this.#pending.delete(pendingId)
  }

  /** @internal */
  acceptPending (proposal: QuicProposal, options: AcceptOptions): QuicConnection | null {
    this.#pending.delete(proposal.pendingId)
    const native = this.#engine.native
    const id = native.accept(proposal.pendingId, options.credentials.id, encodeAlpn(options.alpn), options.transport ?? null)
    if (id === 0) return null
    const conn = this.#engine.newConnection(id, proposal.address, proposal.port, proposal.sni)
    this.#engine.adopt(conn)
    return conn
  }

  /** @internal */
  rejectPending (proposal: QuicProposal, code: number): void {
    this.#pending.delete(proposal.pendingId)
    this.#engine.native.reject(proposal.pendingId, code)
  }
}
