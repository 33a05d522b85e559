/**
 * HTTP/3 on one engine QuicConnection: the thin I/O glue around the sans-I/O core
 * (connection.ts). It opens our control stream once the handshake is done, reads the peer's
 * streams into the core, carries out the core's writes, resets and close, and hands the
 * application the core's events.
 *
 * WebTransport streams are never read past their header: a peer stream's first read takes 3
 * bytes (the shortest WebTransport header), then the rest of its first varint (and, for 0x41 /
 * 0x54, of the session id) exactly, byte counts taken from each varint's first byte. So when the
 * core recognises a WebTransport stream every later byte is still in the addon, and the
 * application can splice the stream natively as it is. Other streams are read in 64 KiB pulls.
 *
 * Every stream the glue reads shares one handler object (no closure per stream); stream.data
 * points back here until a WebTransport stream is handed over (then it is the application's).
 * Writes the addon does not take at once wait in a per-stream queue, bounded per connection:
 * what the core writes is small (SETTINGS, HEADERS, capsules, a refusal body the caller bounds).
 */
import type { QuicCloseInfo, QuicConnection } from '../connection.ts'
import type { QuicStream, QuicStreamHandler } from '../stream.ts'
import { H3Connection, type H3Action, type H3ConnectionOptions, type RequestResult, type SessionState } from './connection.ts'
import { H3_ERROR } from './errors.ts'
import type { FieldLine } from './qpack.ts'
import { STREAM_TYPE, WEBTRANSPORT_BIDI_SIGNAL } from './frames.ts'
import { encodeDatagramPrefix } from './webtransport.ts'
import { varintLengthOf } from '../varint.ts'

/** Core events for the application (the core's I/O actions are carried out here). */
export type H3Event = Exclude<H3Action, { type: 'write' | 'reset_stream' | 'stop_sending' | 'close' | 'webtransport_stream' }>

export interface QuicH3Handler {
  onEvent (h3: QuicH3Connection, event: H3Event): void
  /**
   * A WebTransport stream the peer opened: its header is read; the stream is in TypeScript
   * mode with no handler, positioned at its first data byte. Set a handler or splice it now.
   */
  onWebTransportStream (h3: QuicH3Connection, stream: QuicStream, sessionId: number, session: SessionState): void
  /** The QUIC connection is closing (either side; the core's own closes included). */
  onClose (h3: QuicH3Connection, info: QuicCloseInfo): void
}

export type QuicH3Options = Omit<H3ConnectionOptions, 'role'>

/** Queued, not yet taken by the addon, per connection at most. */
const MAX_QUEUED_BYTES = 256 * 1024
const READ_CHUNK = 64 * 1024
/**
 * The shortest WebTransport stream header: 0x41 / 0x54 take two bytes as varints, the session
 * id at least one. A stream's first read takes this much: never past the header of a
 * WebTransport stream, and for the common session ids (< 64) the whole header in one call.
 */
const MIN_WT_HEADER = 3
const EMPTY = Buffer.alloc(0)

/** Reading state of a stream the glue reads: how many bytes its header varints still need. */
const PHASE_TYPE = 0
const PHASE_SESSION = 1
const PHASE_BODY = 2
/** FIN fed to the core: nothing more to read (the core forgets finished streams; feeding it again would look like a new stream). */
const PHASE_ENDED = 3

interface StreamState {
  phase: number
  /** Bytes of the current varint still to read (0: its first byte is next). */
  need: number
  /** The leading varint's value, once read. */
  type: number
  typeBytes: number[]
  queue: Buffer[] | null
  queueFin: boolean
}

export class QuicH3Connection {
  readonly quic: QuicConnection
  readonly core: H3Connection
  readonly #handler: QuicH3Handler
  readonly #streams = new Map<number, StreamState>()
  #queued = 0
  #started = false
  /** For the owner's bookkeeping (a relay's tunnel). */
  data: unknown = null

  static readonly #streamHandler: QuicStreamHandler = {
    onReadable: (stream) => { (stream.data as QuicH3Connection).#onReadable(stream) },
    onWritable: (stream) => { (stream.data as QuicH3Connection).#flush(stream) },
    onReset: (stream, code) => {
      const h3 = stream.data as QuicH3Connection
      h3.#apply(h3.core.onStreamReset(stream.id, code))
    },
    onStopSending: (stream, code) => {
      const h3 = stream.data as QuicH3Connection
      h3.#dropQueue(stream.id)
      h3.#apply(h3.core.onStopSending(stream.id, code))
    },
    onClose: (stream) => {
      const h3 = stream.data as QuicH3Connection | null
      if (h3 !== null) h3.#forget(stream.id)
    },
  }

  constructor (quic: QuicConnection, options: QuicH3Options, handler: QuicH3Handler) {
    this.quic = quic
    this.core = new H3Connection({ ...options, role: quic.role })
    this.#handler = handler
    quic.on('stream', (stream) => { this.#onPeerStream(stream) })
    quic.on('datagram', (datagram) => { this.#apply(this.core.onDatagram(datagram)) })
    quic.once('close', (info) => { this.#handler.onClose(this, info) })
    if (quic.established) this.#start()
    else quic.once('established', () => { this.#start() })
  }

  get started (): boolean {
    return this.#started
  }

  /** Client: sends a request on a new bidi stream; the stream id, or why not. */
  request (fields: readonly FieldLine[], fin = false): { readonly ok: true, readonly streamId: number } | { readonly ok: false, readonly reason: Exclude<RequestResult, { ok: true }>['reason'] | 'streams_blocked' } {
    const stream = this.quic.openStream(true)
    if (stream === null) return { ok: false, reason: 'streams_blocked' }
    const result = this.core.request(stream.id, fields, fin)
    if (!result.ok) {
      stream.reset(H3_ERROR.H3_REQUEST_CANCELLED)
      return result
    }
    this.#own(stream, PHASE_BODY)
    this.#apply(result.actions)
    return { ok: true, streamId: stream.id }
  }

  respond (streamId: number, status: number, fields: readonly FieldLine[] = [], fin = false): void {
    this.#apply(this.core.respond(streamId, status, fields, fin))
  }

  sendData (streamId: number, data: Uint8Array, fin = false): void {
    this.#apply(this.core.sendData(streamId, data, fin))
  }

  finish (streamId: number): void {
    this.#apply(this.core.finish(streamId))
  }

  resetStream (streamId: number, code?: number): void {
    this.#apply(this.core.resetStream(streamId, code))
  }

  closeSession (sessionId: number, code: number, reason: string): void {
    this.#apply(this.core.closeSession(sessionId, code, reason))
  }

  drainSession (sessionId: number): void {
    this.#apply(this.core.drainSession(sessionId))
  }

  /** GOAWAY on our control stream (a server names the first request stream id it will not process). */
  goaway (id: number): void {
    this.#apply(this.core.goaway(id))
  }

  /**
   * Opens a WebTransport stream of an open session and writes its header; the stream is the
   * caller's (no handler). Null when the session is not open or the peer's stream limit is
   * reached ('streamsAvailable' on the QUIC connection says when to retry).
   */
  openWebTransportStream (sessionId: number, bidi: boolean): QuicStream | null {
    if (this.core.sessionState(sessionId) !== 'open') return null
    const stream = this.quic.openStream(bidi)
    if (stream === null) return null
    const header = this.core.openWebTransportStream(stream.id, sessionId)
    if (header === null || stream.write(header) !== header.length) {
      // A fresh stream takes a header of at most 16 bytes; anything else is a closed connection.
      stream.reset(H3_ERROR.H3_INTERNAL_ERROR)
      return null
    }
    return stream
  }

  /** A datagram for a session (quarter stream id + payload); false when not sent. */
  sendDatagram (sessionId: number, payload: Uint8Array): boolean {
    if (this.core.sessionState(sessionId) !== 'open') return false
    return this.quic.sendDatagram(Buffer.concat([encodeDatagramPrefix(sessionId), payload]))
  }

  /** Closes the QUIC connection with an HTTP/3 code (H3_NO_ERROR by default). */
  close (code: number = H3_ERROR.H3_NO_ERROR, reason = ''): void {
    this.quic.close(code, reason)
  }

  #start (): void {
    if (this.#started || this.quic.closed) return
    this.#started = true
    const control = this.quic.openStream(false)
    if (control === null) {
      this.quic.close(H3_ERROR.H3_STREAM_CREATION_ERROR, 'no room for the control stream')
      return
    }
    this.#own(control, PHASE_BODY)
    this.#apply(this.core.start(control.id))
  }

  #own (stream: QuicStream, phase: number): StreamState {
    const state: StreamState = { phase, need: 0, type: -1, typeBytes: [], queue: null, queueFin: false }
    this.#streams.set(stream.id, state)
    stream.data = this
    stream.handler = QuicH3Connection.#streamHandler
    return state
  }

  #onPeerStream (stream: QuicStream): void {
    this.#own(stream, PHASE_TYPE)
    this.#onReadable(stream)
  }

  /** Pulls what the stream has into the core: header varints byte-exact, then in chunks. */
  #onReadable (stream: QuicStream): void {
    for (;;) {
      const state = this.#streams.get(stream.id)
      if (state === undefined || stream.data !== this || state.phase === PHASE_ENDED) return
      const max = state.phase >= PHASE_BODY ? READ_CHUNK : state.typeBytes.length === 0 ? MIN_WT_HEADER : (state.need === 0 ? 1 : state.need)
      const chunk = stream.read(max)
      if (chunk === null) {
        if (stream.readEnded) {
          state.phase = PHASE_ENDED
          this.#feed(stream, EMPTY, true)
        }
        return
      }
      if (state.phase < PHASE_BODY) this.#advanceHeader(stream, state, chunk)
      if (!this.#feed(stream, chunk, false)) return
    }
  }

  /** Tracks the header varints through bytes just read (so the next read is exact). */
  #advanceHeader (stream: QuicStream, state: StreamState, chunk: Buffer): void {
    for (const byte of chunk) {
      if (state.phase >= PHASE_BODY) return // what follows the header is the core's (a non-WebTransport stream's frames)
      if (state.need === 0) state.need = varintLengthOf(byte)
      state.need--
      if (state.phase === PHASE_TYPE) state.typeBytes.push(byte)
      if (state.need > 0) continue
      if (state.phase === PHASE_SESSION) {
        state.phase = PHASE_BODY
        continue
      }
      // The leading varint is complete: a WebTransport type has a session id next.
      const bytes = state.typeBytes
      let type = (bytes[0] as number) & 0x3f
      for (let i = 1; i < bytes.length; i++) type = type * 256 + (bytes[i] as number)
      state.type = type
      const webTransport = stream.bidi ? type === WEBTRANSPORT_BIDI_SIGNAL : type === STREAM_TYPE.WEBTRANSPORT_UNI
      state.phase = webTransport ? PHASE_SESSION : PHASE_BODY
    }
  }

  /** Feeds the core; false once the stream is no longer ours to read (handed over or gone). */
  #feed (stream: QuicStream, chunk: Buffer, fin: boolean): boolean {
    const actions = this.core.onStreamData(stream.id, chunk, fin)
    this.#apply(actions, stream)
    return stream.data === this && !stream.closed && this.#streams.has(stream.id)
  }

  /** Carries out the core's actions; `reading` is the stream being read, if any. */
  #apply (actions: readonly H3Action[], reading: QuicStream | null = null): void {
    for (const action of actions) {
      switch (action.type) {
        case 'write':
          this.#write(action.streamId, action.data, action.fin)
          break
        case 'reset_stream':
          this.#dropQueue(action.streamId)
          this.quic.stream(action.streamId)?.reset(action.code)
          break
        case 'stop_sending':
          this.quic.stream(action.streamId)?.stopSending(action.code)
          break
        case 'close':
          this.quic.close(action.code, action.reason)
          break
        case 'webtransport_stream': {
          const stream = reading !== null && reading.id === action.streamId ? reading : this.quic.stream(action.streamId)
          this.#streams.delete(action.streamId)
          if (stream === undefined) break
          stream.handler = null
          stream.data = null
          this.#handler.onWebTransportStream(this, stream, action.sessionId, action.session)
          break
        }
        default:
          this.#handler.onEvent(this, action)
      }
    }
  }

  #write (streamId: number, data: Uint8Array, fin: boolean): void {
    const stream = this.quic.stream(streamId)
    const state = this.#streams.get(streamId)
    if (stream === undefined || state === undefined) return
    if (state.queue !== null) {
      this.#enqueue(state, data, fin)
      return
    }
    // write() then end(): end(data) does not say how much of data it took when it took part.
    const taken = data.length === 0 ? 0 : stream.write(data)
    if (taken < 0) return
    if (taken === data.length && (!fin || stream.end())) return
    state.queue = []
    this.#enqueue(state, data.subarray(taken), fin)
  }

  #enqueue (state: StreamState, data: Uint8Array, fin: boolean): void {
    if (this.#queued + data.length > MAX_QUEUED_BYTES) {
      // The peer reads none of what we write it: nothing here is worth more memory.
      this.quic.close(H3_ERROR.H3_EXCESSIVE_LOAD, 'peer does not read')
      return
    }
    ;(state.queue as Buffer[]).push(Buffer.from(data))
    this.#queued += data.length
    state.queueFin ||= fin
  }

  #flush (stream: QuicStream): void {
    const state = this.#streams.get(stream.id)
    if (state === undefined || state.queue === null) return
    const queue = state.queue
    let i = 0
    for (; i < queue.length; i++) {
      const head = queue[i] as Buffer
      const taken = head.length === 0 ? 0 : stream.write(head)
      if (taken < 0) return this.#dropQueue(stream.id)
      this.#queued -= taken
      if (taken < head.length) {
        queue[i] = head.subarray(taken)
        break
      }
    }
    // Compact once per flush rather than shift() per chunk.
    if (i > 0) queue.splice(0, i)
    if (queue.length > 0) return
    if (state.queueFin && !stream.writeEnded && !stream.end()) return
    state.queue = null
  }

  #dropQueue (streamId: number): void {
    const state = this.#streams.get(streamId)
    if (state?.queue == null) return
    for (const chunk of state.queue) this.#queued -= chunk.length
    state.queue = null
  }

  #forget (streamId: number): void {
    this.#dropQueue(streamId)
    this.#streams.delete(streamId)
  }
}
