/**
 * One QUIC connection over the quiche binding: the per-turn work of the driver (driver.ts)
 * for it, its streams (stream-slot.ts), datagrams, timers and close.
 *
 * Invariants:
 * - Only receive() runs in the socket's message handler, and it only calls quiche recv();
 *   everything else happens in process(), once per event-loop turn while the connection is
 *   dirty, or in calls from the application (stream writes, close), which mark it dirty.
 * - Stream handlers are called from process() only, with readStream/writeStream as their
 *   way into quiche; a handler that stops reading (backpressure) leaves the data in quiche,
 *   whose flow control then stops the peer: nothing is queued without bound here.
 * - Peer streams are announced in stream ID order: a stream that arrives before a lower ID
 *   of its type announces the lower ones first (RFC 9000 §3.2: they are implicitly opened),
 *   so a relay that opens streams in the order they are announced gets the same IDs.
 * - 'close' is emitted once, when quiche enters draining/closed (or on an abort); the
 *   connection stays routable until quiche reports closed so that a lost CONNECTION_CLOSE
 *   can be repeated, then it is released.
 */
import { EventEmitter } from 'node:events'
import type { DriverTask, QuicDriver } from './driver.ts'
import { parseQuicheError, SHUTDOWN_READ, SHUTDOWN_WRITE, type HostPort, type NativeConnection, type RecvInfo } from './native.ts'
import { isServerInitiated, isUniStream, StreamSlot } from './stream-slot.ts'
import { QuicStream } from './stream.ts'

/** Largest datagram quiche may write (the configured max payload is below it). */
export const SEND_BUFFER_LENGTH = 1500

export const READ_NONE = -1
export const READ_RESET = -2
export const WRITE_STOPPED = -2

const EMPTY = Buffer.alloc(0)
const decoder = new TextDecoder()

/** How a datagram leaves: a listening socket (server) or a connected one (client leg). */
export interface PacketTransport {
  readonly local: HostPort
  take (length: number): Buffer
  send (buf: Buffer, length: number, to: HostPort): void
  /** The socket's send queue is backed up: stop sending this turn. */
  backedUp (): boolean
  /** The connection is finished: forget it (server) or close the socket (client). */
  release (conn: QuicConnection): void
}

export type QuicCloseInitiator = 'peer' | 'local' | 'idle' | 'handshake_timeout' | 'socket_error'

export interface QuicCloseInfo {
  /** peer: the peer sent CONNECTION_CLOSE; local: we closed, or quiche did on a protocol or TLS error. */
  readonly initiator: QuicCloseInitiator
  /** Application close (else a transport error code). */
  readonly app: boolean
  readonly code: number
  readonly reason: string
  /** Whether the handshake had completed. */
  readonly established: boolean
}

export interface QuicConnectionEvents {
  established: []
  /** A stream opened by the peer (Duplex mode). */
  stream: [QuicStream]
  /** A stream opened by the peer (raw mode: the listener sets slot.handler). */
  slot: [StreamSlot]
  datagram: [Buffer]
  close: [QuicCloseInfo]
}

export interface QuicConnectionInit {
  readonly native: NativeConnection
  readonly driver: QuicDriver
  readonly transport: PacketTransport
  readonly isServer: boolean
  readonly remote: HostPort
  readonly handshakeTimeoutMs: number
  /** PING after this long without sending (0 disables). */
  readonly keepAliveMs: number
  /** Announce peer streams as StreamSlots ('slot') instead of Duplex streams ('stream'). */
  readonly rawStreams?: boolean
}

export class QuicConnection extends EventEmitter<QuicConnectionEvents> implements DriverTask {
  queued = false
  readonly isServer: boolean
  readonly createdAt: number
  readonly #native: NativeConnection
  readonly #driver: QuicDriver
  readonly #transport: PacketTransport
  readonly #handshakeTimeoutMs: number
  readonly #keepAliveMs: number
  readonly #rawStreams: boolean
  readonly #slots = new Map<number, StreamSlot>()
  #readQueue: StreamSlot[] = []
  #recvInfo: RecvInfo
  #nextPeerBidi: number
  #nextPeerUni: number
  #nextLocalBidi: number
  #nextLocalUni: number
  #rx = false
  #established = false
  #datagrams = false
  #serverName: string | null = null
  #alpn = ''
  #requestedClose: { app: boolean, code: number, reason: string } | null = null
  #closeInfo: QuicCloseInfo | null = null
  #finished = false
  #timer: NodeJS.Timeout | null = null
  #timerAt = 0
  #deadline = Infinity
  #lastSendAt: number

  constructor (init: QuicConnectionInit) {
    super()
    this.#native = init.native
    this.#driver = init.driver
    this.#transport = init.transport
    this.isServer = init.isServer
    this.#handshakeTimeoutMs = init.handshakeTimeoutMs
    this.#keepAliveMs = init.keepAliveMs
    this.#rawStreams = init.rawStreams === true
    this.#recvInfo = { from: { host: init.remote.host, port: init.remote.port }, to: init.transport.local }
    // RFC 9000 §2.1: client-initiated IDs are even, server-initiated odd; bit 1 marks uni.
    this.#nextPeerBidi = init.isServer ? 0 : 1
    this.#nextPeerUni = init.isServer ? 2 : 3
    this.#nextLocalBidi = init.isServer ? 1 : 0
    this.#nextLocalUni = init.isServer ? 3 : 2
    this.createdAt = Date.now()
    this.#lastSendAt = this.createdAt
    init.driver.register(this)
  }

  get remote (): HostPort {
    return this.#recvInfo.from
  }

  get established (): boolean {
    return this.#established
  }

  /** The TLS server name the client sent (server side), known once established. */
  get serverName (): string | null {
    return this.#serverName
  }

  /** The negotiated ALPN protocol ('' when none), known once established. */
  get alpn (): string {
    return this.#alpn
  }

  /** Both ends negotiated QUIC datagrams (RFC 9221), known once established. */
  get datagrams (): boolean {
    return this.#datagrams
  }

  /** Set once the connection has closed or started closing. */
  get closeInfo (): QuicCloseInfo | null {
    return this.#closeInfo
  }

  get closed (): boolean {
    return this.#closeInfo !== null
  }

  get openStreams (): number {
    return this.#slots.size
  }

  /** Scratch space for synchronous reads (shared by every connection of the driver). */
  get scratch (): Buffer {
    return this.#driver.scratch
  }

  stats (): { readonly sentBytes: number, readonly recvBytes: number, readonly lost: number, readonly sent: number, readonly recv: number } {
    return this.#native.stats()
  }

  /** The peer's leaf certificate (DER), when it presented one. */
  peerCertificate (): Buffer | null {
    const chain = this.#closeInfo === null ? this.#native.peerCertChain() : null
    const leaf = chain?.[0]
    return leaf === undefined ? null : Buffer.from(leaf)
  }

  /** quiche's view of the active path (RTT in ms, congestion window in bytes), for diagnostics. */
  pathStats (): { readonly rtt: number, readonly cwnd: number, readonly deliveryRate: number } | null {
    return this.#native.pathStats()[0] ?? null
  }

  // ---- from the socket ----

  /** One datagram for this connection: quiche recv() and nothing else. */
  receive (msg: Buffer, address: string, port: number): void {
    if (this.#finished) return
    const from = this.#recvInfo.from
    if (from.port !== port || from.host !== address) this.#recvInfo = { from: { host: address, port }, to: this.#transport.local }
    try {
      this.#native.recv(msg, this.#recvInfo)
    } catch {
      // quiche dropped the datagram, or closed the connection on it: process() reads which.
    }
    this.#rx = true
    this.#driver.schedule(this)
  }

  /** The socket failed (e.g. ICMP port unreachable on a connected socket). */
  socketError (message: string): void {
    this.#abort('socket_error', message)
  }

  // ---- streams ----

  /** Opens a stream (Duplex). Null when the peer's stream limit is reached. */
  openStream (bidi = true): QuicStream | null {
    const slot = this.openSlot(bidi)
    return slot === null ? null : new QuicStream(this, slot)
  }

  /** Opens a stream for a custom handler. Null when the peer's stream limit is reached. */
  openSlot (bidi: boolean): StreamSlot | null {
    if (this.#closeInfo !== null) return null
    const id = bidi ? this.#nextLocalBidi : this.#nextLocalUni
    try {
      // An empty write creates the stream in quiche; the peer sees it with its first frame.
      if (this.#native.streamSend(id, EMPTY, false) === null) return null
    } catch {
      return null
    }
    if (bidi) this.#nextLocalBidi += 4
    else this.#nextLocalUni += 4
    const slot = new StreamSlot(id, true)
    this.#slots.set(id, slot)
    return slot
  }

  /** How many more streams of the kind the peer lets us open now. */
  streamsLeft (bidi: boolean): number {
    if (this.#closeInfo !== null) return 0
    return bidi ? this.#native.peerStreamsLeftBidi() : this.#native.peerStreamsLeftUni()
  }

  /** The handler wants onReadable calls (again); it is called within the next turn. */
  requestRead (slot: StreamSlot): void {
    if (!slot.readOpen) return
    slot.wantRead = true
    this.#readQueue.push(slot)
    this.#driver.schedule(this)
  }

  /**
   * Reads what quiche holds for the stream into buf: the byte count (slot.finReceived is set
   * with the last bytes), READ_NONE when nothing is there now, READ_RESET when the peer reset
   * the stream (slot.resetCode) or it is gone.
   */
  readStream (slot: StreamSlot, buf: Buffer): number {
    if (!slot.readOpen) return slot.finReceived ? READ_NONE : READ_RESET
    let result: [number, boolean] | null
    try {
      result = this.#native.streamRecv(slot.id, buf)
    } catch (err) {
      const e = parseQuicheError(err)
      slot.resetCode = e.kind === 'StreamReset' ? e.code ?? 0 : 0
      this.#closeRead(slot)
      return READ_RESET
    }
    if (result === null) return READ_NONE
    const n = result[0]
    slot.bytesRead += n
    if (result[1]) {
      slot.finReceived = true
      this.#closeRead(slot)
    }
    // Reading frees flow-control credit that quiche announces on the next send().
    this.#driver.schedule(this)
    return n
  }

  /**
   * Writes as much of buf as quiche takes now (flow control and congestion allow), with FIN
   * when fin and all of buf was taken. Returns the bytes taken; fewer than buf.length sets
   * slot.writeBlocked and onWritable follows. WRITE_STOPPED when the peer sent STOP_SENDING
   * (slot.stopCode) or the stream is gone.
   */
  writeStream (slot: StreamSlot, buf: Buffer, fin: boolean): number {
    if (!slot.writeOpen) return WRITE_STOPPED
    let n: number | null
    try {
      n = this.#native.streamSend(slot.id, buf, fin)
    } catch (err) {
      const e = parseQuicheError(err)
      slot.stopCode = e.kind === 'StreamStopped' ? e.code ?? 0 : 0
      this.#closeWrite(slot)
      return WRITE_STOPPED
    }
    if (n === null) n = 0
    slot.bytesWritten += n
    if (n < buf.length) slot.writeBlocked = true
    else if (fin) this.#closeWrite(slot)
    this.#driver.schedule(this)
    return n
  }

  /** Bytes the stream can take now; WRITE_STOPPED when the peer sent STOP_SENDING. */
  streamCapacity (slot: StreamSlot): number {
    if (!slot.writeOpen) return WRITE_STOPPED
    try {
      return this.#native.streamCapacity(slot.id)
    } catch (err) {
      const e = parseQuicheError(err)
      slot.stopCode = e.kind === 'StreamStopped' ? e.code ?? 0 : 0
      this.#closeWrite(slot)
      return WRITE_STOPPED
    }
  }

  /** RESET_STREAM with code on the write side. */
  resetStream (slot: StreamSlot, code: number): void {
    if (!slot.writeOpen) return
    this.#shutdown(slot, SHUTDOWN_WRITE, code)
    this.#closeWrite(slot)
  }

  /** STOP_SENDING with code on the read side (quiche discards what arrives after). */
  stopSending (slot: StreamSlot, code: number): void {
    if (!slot.readOpen) return
    this.#shutdown(slot, SHUTDOWN_READ, code)
    this.#closeRead(slot)
  }

  // ---- datagrams ----

  /** Queues a QUIC datagram; false when it was dropped (not negotiated, too large, queue full). */
  sendDatagram (data: Uint8Array): boolean {
    if (!this.#datagrams || this.#closeInfo !== null) return false
    try {
      if (this.#native.dgramSend(data) === null) return false
    } catch {
      return false
    }
    this.#driver.schedule(this)
    return true
  }

  /** Largest datagram payload that fits in one packet now, or 0. */
  maxDatagramSize (): number {
    if (!this.#datagrams) return 0
    return this.#native.dgramMaxWritableLen() ?? 0
  }

  // ---- close ----

  /** CONNECTION_CLOSE with code and reason (application close unless app is false). */
  close (code = 0, reason = '', app = true): void {
    if (this.#closeInfo !== null || this.#requestedClose !== null || this.#finished) return
    this.#requestedClose = { app, code, reason }
    try {
      this.#native.close(app, code, Buffer.from(reason))
    } catch {
      // Already closing.
    }
    this.#driver.schedule(this)
  }

  /** Ends the connection now: CONNECTION_CLOSE if none was sent yet, then no draining period. */
  destroy (): void {
    if (this.#finished) return
    if (this.#closeInfo === null) {
      this.close(0, this.#requestedClose?.reason ?? '')
      try {
        this.#noteClosed()
        this.#flush()
      } catch {
        // Nothing more to tell the peer.
      }
    }
    this.#finish()
  }

  // ---- driver ----

  process (): void {
    if (this.#finished) return
    const native = this.#native
    try {
      if (this.#rx) {
        this.#rx = false
        if (!this.#established && native.isEstablished()) this.#onEstablished()
        if (this.#established && this.#closeInfo === null) this.#serviceStreams()
      }
      if (this.#readQueue.length > 0) this.#serviceReadQueue()
      if (this.#closeInfo === null && (this.#requestedClose !== null || native.isDraining() || native.isClosed())) this.#noteClosed()
      this.#flush()
      if (native.isClosed()) {
        this.#finish()
        return
      }
      this.#armTimer()
    } catch (err) {
      // A native failure or a bug in a handler must end this connection, not the process.
      this.#abort('local', `internal error: ${err instanceof Error ? err.message : String(err)}`)
    }
  }

  tick (now: number): void {
    if (this.#finished) return
    if (!this.#established) {
      if (this.#closeInfo === null && now - this.createdAt >= this.#handshakeTimeoutMs) this.#abort('handshake_timeout', 'handshake timeout')
      return
    }
    if (this.#closeInfo !== null) return
    if (this.#keepAliveMs > 0 && now - this.#lastSendAt >= this.#keepAliveMs) {
      this.#native.sendAckEliciting()
      this.#driver.schedule(this)
    }
    // Streams that skipped ahead of the next expected ID and stayed alone (rare): find them.
    if (this.#native.isReadable()) this.#scanReadable()
  }

  #onEstablished (): void {
    const native = this.#native
    this.#established = true
    this.#serverName = native.serverName()
    this.#alpn = Buffer.from(native.applicationProto()).toString('latin1')
    this.#datagrams = native.dgramMaxWritableLen() !== null
    this.emit('established')
  }

  #serviceStreams (): void {
    const native = this.#native
    // New peer streams, in ID order (streamReadable is ~0.2 µs; the readable() iterator ~12 µs).
    while (native.streamReadable(this.#nextPeerBidi)) this.#acceptThrough(this.#nextPeerBidi)
    while (native.streamReadable(this.#nextPeerUni)) this.#acceptThrough(this.#nextPeerUni)
    for (const slot of this.#slots.values()) {
      // Writers first: a STOP_SENDING shows up as an error from streamCapacity.
      if (slot.writeOpen) {
        let cap: number
        try {
          cap = native.streamCapacity(slot.id)
        } catch (err) {
          const e = parseQuicheError(err)
          slot.stopCode = e.kind === 'StreamStopped' ? e.code ?? 0 : 0
          this.#closeWrite(slot)
          slot.handler?.onStopped(slot)
          cap = 0
        }
        if (cap > 0 && slot.writeBlocked) {
          slot.writeBlocked = false
          slot.handler?.onWritable(slot)
        }
      }
      if (slot.readOpen && slot.wantRead && slot.handler !== null) slot.handler.onReadable(slot)
    }
    if (this.#datagrams && this.listenerCount('datagram') > 0) {
      const scratch = this.#driver.scratch
      for (;;) {
        const n = native.dgramRecv(scratch)
        if (n === null) break
        this.emit('datagram', Buffer.from(scratch.subarray(0, n)))
      }
    }
  }

  #serviceReadQueue (): void {
    const queue = this.#readQueue
    this.#readQueue = []
    if (!this.#established || this.#closeInfo !== null) return
    for (const slot of queue) {
      if (slot.readOpen && slot.wantRead && slot.handler !== null) slot.handler.onReadable(slot)
    }
  }

  #scanReadable (): void {
    const unknown: number[] = []
    for (const id of this.#native.readable()) {
      if (!this.#slots.has(id) && isServerInitiated(id) !== this.isServer && id >= (isUniStream(id) ? this.#nextPeerUni : this.#nextPeerBidi)) unknown.push(id)
    }
    if (unknown.length === 0) return
    unknown.sort((a, b) => a - b)
    for (const id of unknown) this.#acceptThrough(id)
    this.#driver.schedule(this)
    this.#rx = true
  }

  /** Announces peer streams of id's type up to and including id, in order. */
  #acceptThrough (id: number): void {
    const uni = isUniStream(id)
    let next = uni ? this.#nextPeerUni : this.#nextPeerBidi
    for (; next <= id; next += 4) {
      const slot = new StreamSlot(next, false)
      this.#slots.set(next, slot)
      if (uni) this.#nextPeerUni = next + 4
      else this.#nextPeerBidi = next + 4
      if (this.#rawStreams) this.emit('slot', slot)
      else {
        const stream = new QuicStream(this, slot)
        if (this.listenerCount('stream') > 0) this.emit('stream', stream)
        else stream.destroy()
      }
    }
  }

  #flush (): void {
    const native = this.#native
    const transport = this.#transport
    const batch = this.#driver.sendBatch
    if (transport.backedUp()) {
      this.#driver.schedule(this)
      return
    }
    let sent = 0
    for (; sent < batch; sent++) {
      const buf = transport.take(SEND_BUFFER_LENGTH)
      const result = native.send(buf)
      if (result === null) break
      transport.send(buf, result[0], result[1].to)
    }
    if (sent > 0) this.#lastSendAt = Date.now()
    if (sent === batch) this.#driver.schedule(this)
  }

  #armTimer (): void {
    const ms = this.#native.timeout()
    if (ms === null) {
      this.#deadline = Infinity
      return
    }
    this.#deadline = Date.now() + ms
    // Re-armed only when quiche wants to wake up earlier than the armed timer; a timer that
    // fires early finds the later deadline and sleeps again (onTimer).
    if (this.#timer === null || this.#deadline < this.#timerAt) {
      if (this.#timer !== null) clearTimeout(this.#timer)
      this.#timerAt = this.#deadline
      this.#timer = setTimeout(QuicConnection.#onTimer, ms, this)
    }
  }

  static #onTimer (conn: QuicConnection): void {
    conn.#timer = null
    if (conn.#finished || conn.#deadline === Infinity) return
    const now = Date.now()
    if (now < conn.#deadline) {
      conn.#timerAt = conn.#deadline
      conn.#timer = setTimeout(QuicConnection.#onTimer, conn.#deadline - now, conn)
      return
    }
    conn.#native.onTimeout()
    conn.#driver.schedule(conn)
  }

  #noteClosed (): void {
    const native = this.#native
    const requested = this.#requestedClose
    const peer = native.peerError()
    let info: QuicCloseInfo
    if (requested !== null) {
      info = { initiator: 'local', ...requested, established: this.#established }
    } else if (peer !== null) {
      info = { initiator: 'peer', app: peer.isApp, code: peer.errorCode, reason: decoder.decode(peer.reason), established: this.#established }
    } else if (native.isTimedOut()) {
      info = { initiator: 'idle', app: false, code: 0, reason: 'idle timeout', established: this.#established }
    } else {
      const local = native.localError()
      info = { initiator: 'local', app: local?.isApp ?? false, code: local?.errorCode ?? 0, reason: local === null ? '' : decoder.decode(local.reason), established: this.#established }
    }
    this.#setClosed(info)
  }

  #setClosed (info: QuicCloseInfo): void {
    this.#closeInfo = info
    const reason = info.reason === '' ? `connection closed (${info.initiator}, code ${info.code})` : info.reason
    const slots = [...this.#slots.values()]
    this.#slots.clear()
    this.#readQueue = []
    for (const slot of slots) {
      slot.readOpen = false
      slot.writeOpen = false
      slot.handler?.onAbort(slot, reason)
    }
    this.emit('close', info)
  }

  /** Ends the connection at once, without the draining period. */
  #abort (initiator: QuicCloseInitiator, reason: string): void {
    if (this.#finished) return
    if (this.#closeInfo === null) {
      try {
        // Tell the peer when there is a handshake to tell it on; silent otherwise.
        if (this.#established) {
          this.#native.close(false, 0x1, Buffer.from(reason))
          this.#flush()
        }
      } catch {
        // Already closing.
      }
      this.#setClosed({ initiator, app: false, code: initiator === 'socket_error' || initiator === 'handshake_timeout' ? 0 : 0x1, reason, established: this.#established })
    }
    this.#finish()
  }

  #finish (): void {
    if (this.#finished) return
    this.#finished = true
    if (this.#closeInfo === null) this.#noteClosed()
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#timer = null
    this.#driver.release(this)
    this.#transport.release(this)
  }

  #closeRead (slot: StreamSlot): void {
    slot.readOpen = false
    slot.wantRead = false
    if (!slot.writeOpen) this.#slots.delete(slot.id)
  }

  #closeWrite (slot: StreamSlot): void {
    slot.writeOpen = false
    slot.writeBlocked = false
    if (!slot.readOpen) this.#slots.delete(slot.id)
  }

  #shutdown (slot: StreamSlot, direction: 0 | 1, code: number): void {
    try {
      this.#native.streamShutdown(slot.id, direction, code)
    } catch {
      // The stream is already finished in that direction.
    }
    this.#driver.schedule(this)
  }
}
