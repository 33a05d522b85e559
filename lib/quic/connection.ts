/**
 * One QUIC connection of the engine (either role), as TypeScript sees it: connection-level
 * events (established, a stream the peer opened, close, datagram, streams available) and the
 * calls that change it. The engine (engine.ts) routes the addon's event records here; streams
 * get theirs through their handler (stream.ts).
 *
 * 'close' is emitted once, when the connection starts closing for any reason: the peer's
 * CONNECTION_CLOSE (kind 'peer', its code and reason), ours ('local'), an engine-detected error
 * ('error': protocol or TLS, alert = the TLS alert we sent), 'idle', 'handshake_timeout',
 * 'stateless_reset', 'unreachable' (ICMP on the dial's socket) or 'destroyed'. Every open stream
 * gets onClose at that moment.
 */
import { EventEmitter } from 'node:events'
import { CLOSE_KINDS, OPEN_BLOCKED, type NativeConnStats, type NativeCloseInfo, type NativeQuic, type QuicCloseKind } from './native.ts'
import { QuicStream, type StreamHost } from './stream.ts'

export interface QuicCloseInfo {
  readonly kind: QuicCloseKind
  /** Application close (else a transport error code). */
  readonly app: boolean
  readonly code: number
  /** The reason bytes as sent (verbatim, for relaying). */
  readonly reason: Buffer
  /** The reason as UTF-8 text (for logs: bounded by the addon to 1 KiB). */
  readonly reasonText: string
  /** The handshake had completed. */
  readonly established: boolean
  /** TLS alert we sent when we failed the handshake (kind 'error'), else 0. */
  readonly alert: number
  /** ngtcp2 error code that made us close (kind 'error'), else 0. */
  readonly liberr: number
}

export interface QuicConnectionEvents {
  established: []
  /**
   * A stream the peer opened (TypeScript mode; set a handler or splice it in this call). Streams
   * that arrive before the first listener is added wait for it.
   */
  stream: [QuicStream]
  close: [QuicCloseInfo]
  datagram: [Buffer]
  /** More streams may be opened (after openStream returned null for lack of credit). */
  streamsAvailable: [bidi: number, uni: number]
  /** A draining connection (drain()) has no stream of work left. */
  drained: []
  /** Node's own, typed here because the connection listens to it (unclaimed streams). */
  newListener: [eventName: string | symbol, listener: unknown]
}

export type QuicRole = 'server' | 'client'

export class QuicConnection extends EventEmitter<QuicConnectionEvents> implements StreamHost {
  readonly id: number
  readonly role: QuicRole
  readonly native: NativeQuic
  /** Date.now() at creation. */
  readonly createdAt: number
  readonly remoteAddress: string
  readonly remotePort: number
  /** The SNI: what the client offered (server role) or sent (client role). */
  readonly serverName: string | null
  /** For the owner's bookkeeping (a relay's tunnel); the engine never reads it. */
  data: unknown = null
  readonly #streams = new Map<number, QuicStream>()
  /** Peer streams that arrived before anyone listened for 'stream' (bounded by the stream limits). */
  #unclaimed: QuicStream[] | null = null
  #established = false
  #alpn: string | null = null
  #datagrams = false
  #closeInfo: QuicCloseInfo | null = null
  #draining = false
  readonly #forget: (conn: QuicConnection) => void

  constructor (native: NativeQuic, id: number, role: QuicRole, remoteAddress: string, remotePort: number, serverName: string | null, forget: (conn: QuicConnection) => void) {
    super()
    this.native = native
    this.id = id
    this.role = role
    this.remoteAddress = remoteAddress
    this.remotePort = remotePort
    this.serverName = serverName
    this.createdAt = Date.now()
    this.#forget = forget
    this.on('newListener', (event) => {
      if (event === 'stream' && this.#unclaimed !== null) queueMicrotask(() => { this.#claim() })
    })
  }

  #claim (): void {
    const unclaimed = this.#unclaimed
    this.#unclaimed = null
    for (const stream of unclaimed ?? []) {
      if (!stream.closed) this.emit('stream', stream)
    }
  }

  get established (): boolean {
    return this.#established
  }

  /** The negotiated ALPN protocol, null for none (known once established). */
  get alpn (): string | null {
    return this.#alpn
  }

  /** Both sides negotiated QUIC datagrams (RFC 9221), known once established. */
  get datagrams (): boolean {
    return this.#datagrams
  }

  get closeInfo (): QuicCloseInfo | null {
    return this.#closeInfo
  }

  get closed (): boolean {
    return this.#closeInfo !== null
  }

  /** Streams in TypeScript mode or spliced and not finished. */
  get streamCount (): number {
    return this.#streams.size
  }

  stream (id: number): QuicStream | undefined {
    return this.#streams.get(id)
  }

  /** Opens a stream; null when the peer's stream limit is reached ('streamsAvailable' follows) or closed. */
  openStream (bidi = true): QuicStream | null {
    if (this.#closeInfo !== null) return null
    const id = this.native.streamOpen(this.id, bidi)
    if (id < 0) return id === OPEN_BLOCKED ? null : null
    const stream = new QuicStream(this, id, true)
    this.#streams.set(id, stream)
    return stream
  }

  /** How many more streams of the kind the peer lets us open now. */
  streamsLeft (bidi = true): number {
    return this.#closeInfo === null ? this.native.streamsLeft(this.id, bidi) : 0
  }

  /** CONNECTION_CLOSE with code and reason (an application close unless app is false). */
  close (code = 0, reason: string | Buffer = '', app = true): void {
    if (this.#closeInfo !== null) return
    this.native.close(this.id, app, code, reason)
  }

  /**
   * close(), once what this connection holds to send has reached its peer: every stream's bytes
   * and FIN acknowledged, its resets done (native/src/conn.c), or after timeoutMs at the latest
   * (the idle timeout still ends it sooner when the peer goes silent). A relay closes a leg so
   * when the other leg's peer closed: what the router took from that peer is delivered first.
   * 'close' (kind 'local') is emitted when the CONNECTION_CLOSE goes out; until then the
   * connection runs as before. At once when the handshake is not complete.
   */
  closeWhenFlushed (code: number, reason: string | Buffer, app: boolean, timeoutMs: number): void {
    if (this.#closeInfo !== null) return
    this.native.closeFlushed(this.id, app, code, reason, timeoutMs)
  }

  /** drain() was called. */
  get draining (): boolean {
    return this.#draining
  }

  /**
   * Takes no new streams from the peer from now on (native/src/drain.c): 'all' refuses every
   * stream it opens, 'webtransport' only new WebTransport streams of the session bridged with
   * bridgeStreams; each gets STOP_SENDING (and RESET_STREAM when bidirectional) with code, and
   * the peer's stream credit stops growing. Open streams go on. Returns the streams of work
   * open now; above 0, 'drained' follows once the last is gone. -1 when not open. A later call
   * (after splicing a stream held in TypeScript, say) keeps the scope and code and re-arms it.
   */
  drain (code: number, scope: 'all' | 'webtransport' = 'all'): number {
    if (this.#closeInfo !== null) return -1
    this.#draining = true
    return this.native.connDrain(this.id, scope === 'all' ? 1 : 2, code)
  }

  /** Forgets the connection now without telling the peer (after close(), or a crash in tests). */
  destroy (): void {
    this.native.destroy(this.id)
  }

  /** Queues a datagram; false when not negotiated, closed, the queue is full, or larger than one of this connection's packets carries. */
  sendDatagram (data: Uint8Array): boolean {
    return this.#closeInfo === null && this.native.datagramSend(this.id, data)
  }

  /**
   * Datagrams of this connection and other go to each other inside the addon: 'raw' as they
   * are, 'h3' with the leading quarter stream id mapped through mapDatagrams (unknown ones are
   * dropped and counted); 'off' stops it.
   */
  bridgeDatagrams (other: QuicConnection, mode: 'raw' | 'h3' | 'off' = 'raw'): boolean {
    return this.native.datagramBridge(this.id, other.id, mode === 'off' ? 0 : mode === 'raw' ? 1 : 2)
  }

  /**
   * Streams either peer opens from now on are paired and spliced inside the addon, in the same
   * engine turn, and never reach 'stream' (addon.c streamBridge; measured need in
   * native/src/bridge.c): 'raw' every stream, its twin with the same id; 'webtransport' only
   * WebTransport streams of the session `here` on this connection / `there` on other (the
   * header is rewritten), every other stream still comes as 'stream'. 'off' stops it; streams
   * the addon held come as 'stream'. Counted in stats().bridgedStreams. 'raw' with other null:
   * the other connection is named by a later call (it may still be handshaking then); the
   * peer's streams wait in the addon, unread, and are paired once it is established, or come as
   * 'stream' if it closes or fails first.
   */
  bridgeStreams (other: QuicConnection | null, mode: 'raw' | 'webtransport' | 'off', here = 0, there = 0): boolean {
    return this.#closeInfo === null && this.native.streamBridge(this.id, other?.id ?? 0, mode === 'off' ? 0 : mode === 'raw' ? 1 : 2, here, there)
  }

  /** For an 'h3' bridge: datagrams arriving here with quarter stream id from leave with to (-1 removes). */
  mapDatagrams (from: number, to: number): boolean {
    return this.native.datagramMap(this.id, from, to)
  }

  stats (): NativeConnStats | null {
    return this.native.connStats(this.id) ?? null
  }

  /** The peer's certificate chain (DER, leaf first); empty when it presented none. */
  peerCertificates (): Buffer[] {
    return this.native.peerCertificates(this.id)
  }

  // ---- from the engine (engine.ts), once per event ----

  /** @internal */
  handleEstablished (datagrams: boolean): void {
    const info = this.native.connInfo(this.id)
    this.#established = true
    this.#alpn = info?.alpn ?? null
    this.#datagrams = datagrams
    this.emit('established')
  }

  /** @internal */
  handleStreamOpened (id: number): void {
    const stream = new QuicStream(this, id, false)
    this.#streams.set(id, stream)
    if (this.listenerCount('stream') === 0) {
      // Streams can arrive in the same turn as 'established', before its listeners have run:
      // they wait (unread, so flow control bounds them) for the first 'stream' listener.
      this.#unclaimed ??= []
      this.#unclaimed.push(stream)
      return
    }
    this.emit('stream', stream)
  }

  /** @internal */
  handleStreamGone (id: number): void {
    const stream = this.#streams.get(id)
    if (stream === undefined) return
    this.#streams.delete(id)
    stream.closed = true
    stream.handler?.onClose?.(stream)
  }

  /** @internal */
  handleSpliceDone (id: number, bytes: number): void {
    const stream = this.#streams.get(id)
    if (stream === undefined) return
    this.#streams.delete(id)
    stream.closed = true
    stream.handler?.onSpliceDone?.(stream, bytes)
    stream.handler?.onClose?.(stream)
  }

  /** @internal */
  handleDrained (): void {
    if (this.#closeInfo === null) this.emit('drained')
  }

  /** @internal */
  handleClosed (kind: number, code: number, info: NativeCloseInfo | undefined): void {
    if (this.#closeInfo !== null) return
    const reason = info?.reason ?? Buffer.alloc(0)
    this.#closeInfo = {
      kind: (CLOSE_KINDS[kind] ?? 'destroyed') === 'unknown' ? 'destroyed' : CLOSE_KINDS[kind] as QuicCloseKind,
      app: info?.app ?? false,
      code,
      reason,
      reasonText: reason.toString('utf8'),
      established: info?.established ?? this.#established,
      alert: info?.alert ?? 0,
      liberr: info?.liberr ?? 0,
    }
    this.#forget(this)
    this.#unclaimed = null
    const streams = [...this.#streams.values()]
    this.#streams.clear()
    for (const stream of streams) {
      stream.closed = true
      stream.handler?.onClose?.(stream)
    }
    this.emit('close', this.#closeInfo)
  }
}
