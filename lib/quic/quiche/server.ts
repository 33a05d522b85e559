/**
 * A listening QUIC endpoint: one UDP socket, many connections, routed by destination
 * connection ID read in JavaScript (packet.ts) — quiche is called only once a datagram is
 * known to belong to a connection, or is a well-formed Initial that may open one.
 *
 *   datagram ─▶ DCID known? ─yes─▶ well-formed? ─▶ connection.receive()
 *                   │no
 *                   ▼
 *   long header, ≥ 1200 bytes? ─▶ version 1? (else Version Negotiation) ─▶ Initial?
 *      ─▶ under maxConnections? ─▶ retry on: token valid? (else send Retry)
 *      ─▶ hello (SNI/ALPN from the ClientHello) ─▶ configFor(hello) ─▶ quiche accept
 *
 * Everything else is dropped and counted (stats()). Half-open handshakes are bounded by
 * maxConnections and expire after handshakeTimeoutMs (driver tick), so a flood of Initials
 * costs bounded memory; with retry on, an Initial from an unproven address costs no state.
 */
import { createSocket, type RemoteInfo, type Socket } from 'node:dgram'
import { randomFillSync } from 'node:crypto'
import { isIPv6 } from 'node:net'
import type { AddressInfo } from 'node:net'
import { SendSlab, type QuicDriver } from './driver.ts'
import { QuicConnection, type PacketTransport } from './connection.ts'
import { quiche, type HostPort, type NativeConfig } from './native.ts'
import { dcidKey, isLongHeader, isWellFormedDatagram, LONG_INITIAL, MIN_INITIAL_DATAGRAM, QUIC_V1, readLongHeader } from './packet.ts'
import { RetryTokens } from './retry-token.ts'
import { readClientHello, type ClientHelloInfo } from './client-hello.ts'

/** Length of the connection IDs this endpoint issues (and reads from short headers). */
export const SERVER_CID_LENGTH = 16

export interface QuicServerOptions {
  readonly host: string
  readonly port: number
  readonly driver: QuicDriver
  /**
   * The Config for a new connection, chosen at accept time (so a reloaded identity applies to
   * new connections). hello carries the SNI and ALPN list of the ClientHello when it fits in
   * the first datagram; null otherwise.
   */
  readonly configFor: (hello: ClientHelloInfo | null) => NativeConfig
  /** Connections (handshaking or open) at most; further Initials are dropped. */
  readonly maxConnections: number
  /** A handshake not completed in this time is dropped (default 10 s). */
  readonly handshakeTimeoutMs?: number
  readonly keepAliveMs?: number
  /** Validate client addresses with a stateless Retry first. */
  readonly retry?: boolean
  /** Announce streams as StreamSlots (the relay) rather than Duplex streams. */
  readonly rawStreams?: boolean
  /** Called once per connection when its handshake completes. */
  readonly onConnection: (conn: QuicConnection) => void
  /** Socket buffer sizes (default 4 MiB; the kernel caps them at net.core.[rw]mem_max). */
  readonly socketBufferBytes?: number
}

/** Why a datagram was dropped before reaching quiche. */
export type DropReason = 'malformed' | 'unknown_connection' | 'connection_limit' | 'invalid_token'

export interface QuicServerStats {
  /** Datagrams dropped before quiche, by reason (monotonic). */
  readonly dropped: Readonly<Record<DropReason, number>>
  readonly retries: number
  readonly versionNegotiations: number
  /** Connections created (handshakes started). */
  readonly accepted: number
}

const VN_BUFFER = Buffer.alloc(1500)

export class QuicServer implements PacketTransport {
  readonly #options: QuicServerOptions
  readonly #socket: Socket
  readonly #byCid = new Map<string, QuicConnection>()
  readonly #cids = new Map<QuicConnection, string[]>()
  readonly #slab = new SendSlab()
  readonly #retry: RetryTokens | null
  #local: HostPort = { host: '0.0.0.0', port: 0 }
  #closing: Promise<void> | null = null
  readonly #dropped: Record<DropReason, number> = { malformed: 0, unknown_connection: 0, connection_limit: 0, invalid_token: 0 }
  #stats = { retries: 0, versionNegotiations: 0, accepted: 0 }

  private constructor (options: QuicServerOptions) {
    this.#options = options
    this.#retry = options.retry === true ? new RetryTokens() : null
    this.#socket = createSocket({ type: isIPv6(options.host) ? 'udp6' : 'udp4', recvBufferSize: options.socketBufferBytes ?? 4 * 1024 * 1024, sendBufferSize: options.socketBufferBytes ?? 4 * 1024 * 1024 })
  }

  static async listen (options: QuicServerOptions): Promise<QuicServer> {
    const server = new QuicServer(options)
    await server.#bind()
    return server
  }

  get local (): HostPort {
    return this.#local
  }

  address (): AddressInfo {
    return this.#socket.address()
  }

  /** Connections handshaking, open or draining. */
  get size (): number {
    return this.#cids.size
  }

  connections (): IterableIterator<QuicConnection> {
    return this.#cids.keys()
  }

  stats (): QuicServerStats {
    return { ...this.#stats, dropped: { ...this.#dropped } }
  }

  /** Closes every connection with code and reason, then the socket. Idempotent. */
  close (code = 0, reason = ''): Promise<void> {
    this.#closing ??= (async () => {
      for (const conn of this.#cids.keys()) conn.close(code, reason)
      // Let the CONNECTION_CLOSE frames go out before the socket closes.
      await new Promise((resolve) => { setImmediate(resolve) })
      await new Promise((resolve) => { setImmediate(resolve) })
      await new Promise<void>((resolve) => { this.#socket.close(() => { resolve() }) })
    })()
    return this.#closing
  }

  /** Closes the socket at once, telling no peer (a crash, for tests). */
  abort (): void {
    if (this.#closing !== null) return
    this.#closing = new Promise<void>((resolve) => { this.#socket.close(() => { resolve() }) })
  }

  // ---- PacketTransport ----

  readonly #queued = (): number => this.#socket.getSendQueueCount()

  take (length: number): Buffer {
    return this.#slab.take(length, this.#options.driver.turn, this.#queued)
  }

  send (buf: Buffer, length: number, to: HostPort): void {
    this.#slab.commit(length)
    this.#socket.send(buf, 0, length, to.port, to.host)
  }

  backedUp (): boolean {
    return this.#socket.getSendQueueCount() > 64
  }

  release (conn: QuicConnection): void {
    const keys = this.#cids.get(conn)
    if (keys === undefined) return
    this.#cids.delete(conn)
    for (const key of keys) {
      if (this.#byCid.get(key) === conn) this.#byCid.delete(key)
    }
  }

  // ---- receive path ----

  async #bind (): Promise<void> {
    const socket = this.#socket
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject)
      socket.bind(this.#options.port, this.#options.host, () => {
        socket.off('error', reject)
        resolve()
      })
    })
    const address = socket.address()
    this.#local = { host: address.address, port: address.port }
    socket.on('message', (msg, rinfo) => { this.#onMessage(msg, rinfo) })
    // A listening socket has no peer whose errors matter (ICMP errors land on connected sockets).
    socket.on('error', () => {})
  }

  #onMessage (msg: Buffer, rinfo: RemoteInfo): void {
    const key = dcidKey(msg, SERVER_CID_LENGTH)
    if (key === null) {
      this.#dropped.malformed++
      return
    }
    const conn = this.#byCid.get(key)
    if (conn !== undefined) {
      // Long headers (handshake) are checked whole; short ones need the fixed bit and room
      // for a packet number and the header-protection sample.
      const ok = isLongHeader(msg) ? isWellFormedDatagram(msg, SERVER_CID_LENGTH) : ((msg[0] as number) & 0x40) !== 0 && msg.length >= 1 + SERVER_CID_LENGTH + 20
      if (!ok) {
        this.#dropped.malformed++
        return
      }
      conn.receive(msg, rinfo.address, rinfo.port)
      return
    }
    this.#onUnknown(msg, rinfo)
  }

  #onUnknown (msg: Buffer, rinfo: RemoteInfo): void {
    const stats = this.#stats
    // Only a client's padded first datagram can open a connection (RFC 9000 §14.1).
    if (!isLongHeader(msg) || msg.length < MIN_INITIAL_DATAGRAM || this.#closing !== null) {
      this.#dropped.unknown_connection++
      return
    }
    const header = readLongHeader(msg)
    if (header === null) {
      this.#dropped.malformed++
      return
    }
    const q = quiche()
    if (header.version !== QUIC_V1) {
      if (header.version === 0) {
        this.#dropped.malformed++
        return
      }
      // RFC 9000 §6.1: answer an unknown version with the versions we speak.
      const length = q.negotiateVersion(header.scid, header.dcid, VN_BUFFER)
      this.#socket.send(VN_BUFFER, 0, length, rinfo.port, rinfo.address)
      stats.versionNegotiations++
      return
    }
    if (header.type !== LONG_INITIAL) {
      this.#dropped.unknown_connection++
      return
    }
    if (!isWellFormedDatagram(msg, SERVER_CID_LENGTH)) {
      this.#dropped.malformed++
      return
    }
    if (this.#cids.size >= this.#options.maxConnections) {
      this.#dropped.connection_limit++
      return
    }
    let scid: Buffer
    let odcid: Buffer | null = null
    if (this.#retry !== null) {
      if (header.token.length === 0) {
        const newScid = randomFillSync(Buffer.allocUnsafe(SERVER_CID_LENGTH))
        const token = this.#retry.mint(header.dcid, rinfo.address, rinfo.port)
        const out = Buffer.allocUnsafe(1500)
        const length = q.retry(header.scid, header.dcid, newScid, token, header.version, out)
        this.#socket.send(out, 0, length, rinfo.port, rinfo.address)
        stats.retries++
        return
      }
      odcid = this.#retry.validate(header.token, rinfo.address, rinfo.port)
      if (odcid === null || header.dcid.length !== SERVER_CID_LENGTH) {
        this.#dropped.invalid_token++
        return
      }
      // The client now addresses us by the connection ID we chose in the Retry.
      scid = Buffer.from(header.dcid)
    } else {
      scid = randomFillSync(Buffer.allocUnsafe(SERVER_CID_LENGTH))
    }
    let config: NativeConfig
    try {
      config = this.#options.configFor(readClientHello(msg))
    } catch {
      this.#dropped.malformed++
      return
    }
    const remote = { host: rinfo.address, port: rinfo.port }
    let native
    try {
      native = q.Connection.accept(scid, odcid, this.#local, remote, config)
    } catch {
      this.#dropped.malformed++
      return
    }
    const conn = new QuicConnection({
      native,
      driver: this.#options.driver,
      transport: this,
      isServer: true,
      remote,
      handshakeTimeoutMs: this.#options.handshakeTimeoutMs ?? 10_000,
      keepAliveMs: this.#options.keepAliveMs ?? 0,
      rawStreams: this.#options.rawStreams === true,
    })
    const keys = [scid.toString('latin1', 0, scid.length)]
    const original = header.dcid.toString('latin1', 0, header.dcid.length)
    if (original !== keys[0]) keys.push(original)
    for (const k of keys) this.#byCid.set(k, conn)
    this.#cids.set(conn, keys)
    stats.accepted++
    conn.once('established', () => { this.#options.onConnection(conn) })
    conn.receive(msg, rinfo.address, rinfo.port)
  }
}
