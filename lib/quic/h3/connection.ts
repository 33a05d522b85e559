/**
 * A sans-I/O HTTP/3 connection (RFC 9114) with extended CONNECT (RFC 9220), HTTP datagrams
 * (RFC 9297) and WebTransport sessions (draft-ietf-webtrans-http3 02 and 07+), for either
 * role. It owns no socket, stream or timer: the glue on the QUIC engine hands it stream
 * bytes and events, and each call returns the actions to carry out and the events for the
 * application, in order.
 *
 *   glue ──onStreamData / onStreamReset / onStopSending / onDatagram──▶ H3Connection
 *   app  ──start / request / respond / sendData / closeSession / openWebTransportStream──▶
 *        ◀── H3Action[]: write · stop_sending · reset_stream · close   (I/O to do)
 *                        settings · request · response · body · webtransport_stream ·
 *                        datagram · session_* · goaway · stream_*      (what happened)
 *
 * Streams are opened by the glue (the engine assigns ids; flow control may delay them);
 * the core is told the id and says what to write on it. Our QPACK encoder and decoder
 * streams are never opened: with a dynamic table capacity of 0 on both sides RFC 9204 §4.2
 * lets an endpoint skip them.
 *
 * A WebTransport stream (bidi 0x41 or uni 0x54 + session id) is handed to the application
 * with the bytes that followed its header ('webtransport_stream'); from then on it is not
 * HTTP/3 and the glue must not feed it here again (it relays or splices it itself).
 *
 * Errors: every input method catches what it throws and closes the connection with
 * H3_INTERNAL_ERROR rather than let an exception out of an event handler; protocol
 * violations close the connection or reset the stream with the code errors.ts assigns.
 * After a close, every call returns no actions.
 *
 * Bounds: frames and field sections are limited (frames.ts, qpack.ts); a WebTransport
 * request beyond the session limit is refused (H3_REQUEST_REJECTED); stream state is
 * dropped once both directions of a stream are done; requests that wait for the peer's
 * SETTINGS are bounded by the peer's stream limit.
 */
import { type H3Failure, H3_ERROR, H3_VIOLATIONS, type H3Violation, failure } from './errors.ts'
import { DEFAULT_FRAME_LIMITS, FRAME, FrameReader, STREAM_TYPE, WEBTRANSPORT_BIDI_SIGNAL, decodeVarintPayload, encodeFrameHeader, encodeVarintFrame, type FrameEvent, type FrameLimits } from './frames.ts'
import { type FieldLine, QpackStreamReader, decodeFieldSection, encodeFieldSection, fieldSectionSize } from './qpack.ts'
import { type PeerSettings, SUPPORTED_DRAFTS, type WebTransportDraft, decodeSettings, encodeSettingsFrame, interpretSettings, localSettings, negotiateWebTransport } from './settings.ts'
import { type RequestHead, validateRequest, validateResponse, validateTrailers } from './message.ts'
import { DRAFT02_RESPONSE_HEADER, StreamHeaderReader, WEBTRANSPORT_PROTOCOL, datagramPayloadOffset, datagramSessionId, encodeStreamHeader } from './webtransport.ts'
import { CapsuleReader, type CapsuleEvent, encodeCloseCapsule, encodeDrainCapsule } from './capsule.ts'
import { encodeVarint } from '../varint.ts'

export type H3Role = 'client' | 'server'

/** Where a session stands: 'pending' until the 2xx (sent as server, received as client). */
export type SessionState = 'pending' | 'open' | 'closed' | 'unknown'

export type H3Action =
  | { readonly type: 'write', readonly streamId: number, readonly data: Uint8Array, readonly fin: boolean }
  | { readonly type: 'stop_sending', readonly streamId: number, readonly code: number }
  | { readonly type: 'reset_stream', readonly streamId: number, readonly code: number }
  /** Close the QUIC connection with this application error code (an H3 code) and reason. */
  | { readonly type: 'close', readonly code: number, readonly reason: string, readonly violation: H3Violation | 'internal', readonly cause: unknown }
  | { readonly type: 'settings', readonly settings: PeerSettings, readonly webTransport: WebTransportDraft | null }
  | { readonly type: 'request', readonly streamId: number, readonly head: RequestHead, readonly webTransport: boolean }
  | { readonly type: 'response', readonly streamId: number, readonly status: number, readonly fields: FieldLine[] }
  | { readonly type: 'body', readonly streamId: number, readonly data: Uint8Array }
  | { readonly type: 'trailers', readonly streamId: number, readonly fields: FieldLine[] }
  /** The peer finished a request stream that is not a session (FIN after a complete message). */
  | { readonly type: 'end', readonly streamId: number }
  /** The core aborted this stream (both directions) for a protocol reason. */
  | { readonly type: 'stream_error', readonly streamId: number, readonly code: number, readonly violation: H3Violation, readonly detail: string }
  /** The peer reset (RESET_STREAM) or stopped (STOP_SENDING) a request stream that is not a session. */
  | { readonly type: 'stream_reset', readonly streamId: number, readonly code: number }
  | { readonly type: 'goaway', readonly id: number }
  | { readonly type: 'webtransport_stream', readonly streamId: number, readonly sessionId: number, readonly bidi: boolean, readonly session: SessionState, readonly data: Uint8Array, readonly fin: boolean }
  | { readonly type: 'datagram', readonly sessionId: number, readonly payload: Uint8Array }
  | { readonly type: 'session_closed', readonly sessionId: number, readonly code: number, readonly reason: string }
  | { readonly type: 'session_drain', readonly sessionId: number }
  /** The peer ended its side of the CONNECT stream (FIN). The Rust h3 client does this right after its request. */
  | { readonly type: 'session_fin', readonly sessionId: number }
  | { readonly type: 'session_reset', readonly sessionId: number, readonly code: number }

export interface H3ConnectionOptions {
  readonly role: H3Role
  /** Our SETTINGS_MAX_FIELD_SECTION_SIZE: the largest field section we decode. */
  readonly maxFieldSectionSize: number
  /** WebTransport sessions accepted (server) or opened (client) at once; 0 disables WebTransport. */
  readonly webTransportMaxSessions: number
  readonly drafts?: readonly WebTransportDraft[]
  readonly frameLimits?: FrameLimits
  /** A reserved setting id to send (settings.ts greaseSettingId), or null for none. */
  readonly greaseSettingId?: number | null
}

export type RequestResult = { readonly ok: true, readonly actions: H3Action[] } | { readonly ok: false, readonly reason: 'settings_pending' | 'no_extended_connect' | 'no_webtransport' | 'too_many_sessions' | 'field_section_too_large' | 'closed' | 'invalid' }

const EMPTY: readonly H3Action[] = Object.freeze([])

class Session {
  readonly id: number
  state: SessionState = 'pending'
  readonly capsules = new CapsuleReader()

  constructor (id: number) {
    this.id = id
  }
}

/** A request stream: a peer-opened bidi stream (server) or one we opened for a request (client). */
class RequestStream {
  readonly id: number
  readonly frames: FrameReader
  /** 'head' until the first final HEADERS, then 'body', 'trailers' after a trailer section. */
  phase: 'head' | 'body' | 'trailers' = 'head'
  session: Session | null = null
  /** A WebTransport request held until the peer's SETTINGS say which draft it speaks. */
  deferred: RequestHead | null = null
  peerDone = false
  localDone = false

  constructor (id: number, frames: FrameReader) {
    this.id = id
    this.frames = frames
  }
}

/** A peer-opened unidirectional stream (or a server-opened bidi on a client) until its type is known, and after. */
class PeerUniStream {
  readonly id: number
  kind: 'header' | 'control' | 'qpack' | 'ignored' = 'header'
  readonly header = new StreamHeaderReader()
  frames: FrameReader | null = null
  qpack: QpackStreamReader | null = null

  constructor (id: number) {
    this.id = id
  }
}

function isBidi (streamId: number): boolean {
  return (streamId & 0x02) === 0
}

function isServerInitiated (streamId: number): boolean {
  return (streamId & 0x01) === 1
}

export class H3Connection {
  readonly #role: H3Role
  readonly #options: H3ConnectionOptions
  readonly #limits: FrameLimits
  readonly #drafts: readonly WebTransportDraft[]
  readonly #webTransportEnabled: boolean
  readonly #requests = new Map<number, RequestStream>()
  readonly #uni = new Map<number, PeerUniStream>()
  readonly #sessions = new Map<number, Session>()
  #controlStreamId = -1
  #peerControl = -1
  #peerEncoder = -1
  #peerDecoder = -1
  #peerSettings: PeerSettings | null = null
  #peerSettingsMap: ReadonlyMap<number, number> | null = null
  #draft: WebTransportDraft | null = null
  #goawayReceived = -1
  #closed = false
  /** Sessions counted against the limit: pending and open ones. */
  #activeSessions = 0
  #droppedDatagrams = 0
  #out: H3Action[] = []

  constructor (options: H3ConnectionOptions) {
    this.#role = options.role
    this.#options = options
    this.#limits = options.frameLimits ?? { ...DEFAULT_FRAME_LIMITS, maxHeadersBytes: options.maxFieldSectionSize }
    this.#drafts = options.drafts ?? SUPPORTED_DRAFTS
    this.#webTransportEnabled = options.webTransportMaxSessions > 0
  }

  get role (): H3Role {
    return this.#role
  }

  get closed (): boolean {
    return this.#closed
  }

  /** The peer's SETTINGS once received. */
  get peerSettings (): PeerSettings | null {
    return this.#peerSettings
  }

  /** The raw SETTINGS map of the peer (for logs: which identifiers it sent). */
  get peerSettingsMap (): ReadonlyMap<number, number> | null {
    return this.#peerSettingsMap
  }

  /** The WebTransport draft of this connection: negotiated from the peer's SETTINGS, null until then. */
  get webTransportDraft (): WebTransportDraft | null {
    return this.#draft
  }

  /** Datagrams dropped because their session is not open (RFC 9297 §2.1 lets a receiver drop them). */
  get droppedDatagrams (): number {
    return this.#droppedDatagrams
  }

  /** Streams and sessions tracked (tests check that finished ones are released). */
  get tracked (): { readonly requests: number, readonly uni: number, readonly sessions: number } {
    return { requests: this.#requests.size, uni: this.#uni.size, sessions: this.#sessions.size }
  }

  sessionState (sessionId: number): SessionState {
    return this.#sessions.get(sessionId)?.state ?? 'unknown'
  }

  // ── application calls ──────────────────────────────────────────────────────────────

  /** Our control stream is open (a uni stream the glue opened): its type and SETTINGS. */
  start (controlStreamId: number): readonly H3Action[] {
    return this.#guard(() => {
      this.#controlStreamId = controlStreamId
      const settings = encodeSettingsFrame(localSettings({
        role: this.#role,
        maxFieldSectionSize: this.#options.maxFieldSectionSize,
        webTransportMaxSessions: this.#options.webTransportMaxSessions,
        drafts: this.#drafts,
        greaseId: this.#options.greaseSettingId ?? null,
      }))
      this.#write(controlStreamId, Buffer.concat([encodeVarint(STREAM_TYPE.CONTROL), settings]), false)
    })
  }

  /**
   * Client: send a request on a bidi stream the glue opened. An extended CONNECT waits for
   * the server's SETTINGS (RFC 9220 §3) and, for WebTransport, needs a draft both speak.
   */
  request (streamId: number, fields: readonly FieldLine[], fin: boolean = false): RequestResult {
    if (this.#closed) return { ok: false, reason: 'closed' }
    if (this.#role !== 'client' || !isBidi(streamId) || isServerInitiated(streamId) || this.#requests.has(streamId)) return { ok: false, reason: 'invalid' }
    const head = validateRequest(fields)
    if (!head.ok) return { ok: false, reason: 'invalid' }
    const webTransport = head.head.protocol === WEBTRANSPORT_PROTOCOL
    if (head.head.protocol !== null) {
      const peer = this.#peerSettings
      if (peer === null) return { ok: false, reason: 'settings_pending' }
      if (!peer.enableConnectProtocol) return { ok: false, reason: 'no_extended_connect' }
      if (webTransport) {
        if (!this.#webTransportEnabled || this.#draft === null) return { ok: false, reason: 'no_webtransport' }
        if (this.#activeSessions >= Math.min(this.#options.webTransportMaxSessions, peer.webTransportMaxSessions)) return { ok: false, reason: 'too_many_sessions' }
      }
    }
    if (fieldSectionSize(fields) > (this.#peerSettings?.maxFieldSectionSize ?? Number.POSITIVE_INFINITY)) return { ok: false, reason: 'field_section_too_large' }
    const actions = this.#guard(() => {
      const stream = new RequestStream(streamId, new FrameReader('request', this.#limits, false))
      this.#requests.set(streamId, stream)
      if (webTransport) this.#openSession(stream)
      this.#writeHeaders(stream, fields, fin)
    })
    return { ok: true, actions: actions as H3Action[] }
  }

  /**
   * Server: answer a request. A 2xx to a WebTransport request opens the session (draft-02
   * answers also carry sec-webtransport-http3-draft: draft02); any other status refuses it.
   */
  respond (streamId: number, status: number, fields: readonly FieldLine[] = [], fin: boolean = false): readonly H3Action[] {
    return this.#guard(() => {
      const stream = this.#requests.get(streamId)
      if (this.#role !== 'server' || stream === undefined || stream.localDone) return
      const section: FieldLine[] = [[':status', String(status)]]
      const session = stream.session
      if (session !== null && session.state === 'pending') {
        if (status >= 200 && status < 300) {
          session.state = 'open'
          if (this.#draft === 'draft02' && !fields.some(([name]) => name === DRAFT02_RESPONSE_HEADER[0])) section.push([DRAFT02_RESPONSE_HEADER[0], DRAFT02_RESPONSE_HEADER[1]])
        } else if (status >= 200) {
          this.#endSession(session)
        }
      }
      for (const line of fields) section.push(line)
      this.#writeHeaders(stream, section, fin)
    })
  }

  /** DATA on a request stream (a body; for a session, the glue should use closeSession/drainSession). */
  sendData (streamId: number, data: Uint8Array, fin: boolean = false): readonly H3Action[] {
    return this.#guard(() => {
      const stream = this.#requests.get(streamId)
      if (stream === undefined || stream.localDone) return
      if (data.length > 0) this.#write(streamId, Buffer.concat([encodeFrameHeader(FRAME.DATA, data.length), data]), fin)
      else if (fin) this.#write(streamId, Buffer.alloc(0), true)
      if (fin) this.#localDone(stream)
    })
  }

  /** Ends our side of a request stream. */
  finish (streamId: number): readonly H3Action[] {
    return this.sendData(streamId, Buffer.alloc(0), true)
  }

  /** Aborts a request stream both ways with an HTTP/3 code (H3_REQUEST_CANCELLED by default). */
  resetStream (streamId: number, code: number = H3_ERROR.H3_REQUEST_CANCELLED): readonly H3Action[] {
    return this.#guard(() => {
      const stream = this.#requests.get(streamId)
      if (stream === undefined) return
      this.#abort(stream, code)
    })
  }

  /** Closes a session: CLOSE_WEBTRANSPORT_SESSION with code and reason, then FIN (draft-ietf-webtrans-http3 §5). */
  closeSession (sessionId: number, code: number, reason: string): readonly H3Action[] {
    return this.#guard(() => {
      const stream = this.#requests.get(sessionId)
      if (stream === undefined || stream.session === null || stream.localDone) return
      const capsule = encodeCloseCapsule(code, reason)
      this.#write(sessionId, Buffer.concat([encodeFrameHeader(FRAME.DATA, capsule.length), capsule]), true)
      this.#endSession(stream.session)
      this.#localDone(stream)
    })
  }

  /** Asks the peer to wind a session down (DRAIN_WEBTRANSPORT_SESSION). */
  drainSession (sessionId: number): readonly H3Action[] {
    return this.#guard(() => {
      const stream = this.#requests.get(sessionId)
      if (stream === undefined || stream.session === null || stream.localDone) return
      const capsule = encodeDrainCapsule()
      this.#write(sessionId, Buffer.concat([encodeFrameHeader(FRAME.DATA, capsule.length), capsule]), false)
    })
  }

  /**
   * The header for a WebTransport stream the glue opened for an open session; null when the
   * session is not open (the glue should then reset the stream it opened).
   */
  openWebTransportStream (streamId: number, sessionId: number): Buffer | null {
    const session = this.#sessions.get(sessionId)
    if (session === undefined || session.state !== 'open') return null
    return encodeStreamHeader(isBidi(streamId), sessionId)
  }

  /** GOAWAY on our control stream: servers name the first request id they will not process. */
  goaway (id: number): readonly H3Action[] {
    return this.#guard(() => {
      if (this.#controlStreamId < 0) return
      this.#write(this.#controlStreamId, encodeVarintFrame(FRAME.GOAWAY, id), false)
    })
  }

  // ── glue events ───────────────────────────────────────────────────────────────────

  /** Bytes (and FIN) on a stream the peer opened, or on one of our request streams. */
  onStreamData (streamId: number, chunk: Uint8Array, fin: boolean): readonly H3Action[] {
    return this.#guard(() => {
      if (isBidi(streamId)) this.#onBidiData(streamId, chunk, fin)
      else this.#onUniData(streamId, chunk, fin)
    })
  }

  /** The peer reset a stream's sending side (RESET_STREAM). */
  onStreamReset (streamId: number, code: number): readonly H3Action[] {
    return this.#guard(() => {
      if (!isBidi(streamId)) {
        const uni = this.#uni.get(streamId)
        if (uni === undefined) return
        if (uni.kind === 'control' || uni.kind === 'qpack') return this.#fail(failure('critical_stream_closed', `peer reset critical stream ${streamId}`))
        this.#uni.delete(streamId)
        return
      }
      const stream = this.#requests.get(streamId)
      if (stream === undefined) {
        this.#uni.delete(streamId)
        return
      }
      stream.peerDone = true
      this.#peerAborted(stream, code)
    })
  }

  /** The peer asked us to stop sending on a stream (STOP_SENDING). */
  onStopSending (streamId: number, code: number): readonly H3Action[] {
    return this.#guard(() => {
      if (streamId === this.#controlStreamId) return this.#fail(failure('critical_stream_closed', 'peer stopped our control stream'))
      const stream = this.#requests.get(streamId)
      if (stream === undefined) return
      // RFC 9000 §3.5: answer STOP_SENDING with RESET_STREAM.
      if (!stream.localDone) this.#out.push({ type: 'reset_stream', streamId, code })
      stream.localDone = true
      this.#peerAborted(stream, code)
    })
  }

  /** A QUIC DATAGRAM frame's payload (RFC 9297 §2.1: quarter stream id, then the payload). */
  onDatagram (datagram: Uint8Array): readonly H3Action[] {
    return this.#guard(() => {
      if (!this.#webTransportEnabled) return this.#fail(failure('datagram_malformed', 'datagram received but SETTINGS_H3_DATAGRAM was not sent'))
      const sessionId = datagramSessionId(datagram)
      if (sessionId < 0) return this.#fail(failure('datagram_malformed', 'datagram too short for its quarter stream id'))
      const session = this.#sessions.get(sessionId)
      if (session === undefined || session.state !== 'open') {
        this.#droppedDatagrams++
        return
      }
      this.#out.push({ type: 'datagram', sessionId, payload: datagram.subarray(datagramPayloadOffset(datagram)) })
    })
  }

  // ── internals ─────────────────────────────────────────────────────────────────────

  /** Runs fn, collecting its actions; an exception closes the connection (H3_INTERNAL_ERROR). */
  #guard (fn: () => void): readonly H3Action[] {
    if (this.#closed) return EMPTY
    try {
      fn()
    } catch (err) {
      // The peer sees only the code; the cause is for the glue's log.
      this.#closeConnection(H3_ERROR.H3_INTERNAL_ERROR, 'internal error', 'internal', err)
    }
    const out = this.#out
    if (out.length === 0) return EMPTY
    this.#out = []
    return out
  }

  #write (streamId: number, data: Uint8Array, fin: boolean): void {
    this.#out.push({ type: 'write', streamId, data, fin })
  }

  #writeHeaders (stream: RequestStream, fields: readonly FieldLine[], fin: boolean): void {
    const block = encodeFieldSection(fields)
    this.#write(stream.id, Buffer.concat([encodeFrameHeader(FRAME.HEADERS, block.length), block]), fin)
    if (fin) this.#localDone(stream)
  }

  #fail (f: H3Failure): void {
    const row = H3_VIOLATIONS[f.violation]
    this.#closeConnection(row.code, f.detail, f.violation, null)
  }

  #closeConnection (code: number, reason: string, violation: H3Violation | 'internal', cause: unknown): void {
    if (this.#closed) return
    this.#closed = true
    this.#out.push({ type: 'close', code, reason, violation, cause })
  }

  /** A stream-scoped violation: abort the stream both ways; a connection-scoped one closes everything. */
  #streamFailure (stream: RequestStream, f: H3Failure): void {
    const row = H3_VIOLATIONS[f.violation]
    if (row.scope === 'connection') return this.#fail(f)
    this.#abort(stream, row.code)
    this.#out.push({ type: 'stream_error', streamId: stream.id, code: row.code, violation: f.violation, detail: f.detail })
  }

  #abort (stream: RequestStream, code: number): void {
    if (!stream.peerDone) this.#out.push({ type: 'stop_sending', streamId: stream.id, code })
    if (!stream.localDone) this.#out.push({ type: 'reset_stream', streamId: stream.id, code })
    stream.peerDone = true
    stream.localDone = true
    if (stream.session !== null) this.#endSession(stream.session)
    this.#release(stream)
  }

  #localDone (stream: RequestStream): void {
    stream.localDone = true
    if (stream.peerDone) this.#release(stream)
  }

  #release (stream: RequestStream): void {
    if (!stream.peerDone || !stream.localDone) return
    this.#requests.delete(stream.id)
    if (stream.session !== null) {
      this.#endSession(stream.session)
      this.#sessions.delete(stream.session.id)
    }
  }

  #openSession (stream: RequestStream): void {
    const session = new Session(stream.id)
    stream.session = session
    this.#sessions.set(session.id, session)
    this.#activeSessions++
  }

  /** A session stops counting against the limit (closed, refused or aborted); its id is remembered until its stream is released. */
  #endSession (session: Session): void {
    if (session.state === 'closed') return
    session.state = 'closed'
    this.#activeSessions--
  }

  #peerAborted (stream: RequestStream, code: number): void {
    if (stream.session !== null && stream.session.state !== 'closed') {
      this.#endSession(stream.session)
      this.#out.push({ type: 'session_reset', sessionId: stream.id, code })
    } else if (stream.session === null) {
      this.#out.push({ type: 'stream_reset', streamId: stream.id, code })
    }
    this.#release(stream)
  }

  #onBidiData (streamId: number, chunk: Uint8Array, fin: boolean): void {
    let stream = this.#requests.get(streamId)
    if (stream === undefined) {
      if (this.#role === 'server' && !isServerInitiated(streamId)) {
        stream = new RequestStream(streamId, new FrameReader('request', this.#limits, this.#webTransportEnabled))
        this.#requests.set(streamId, stream)
      } else if (this.#role === 'client' && isServerInitiated(streamId)) {
        return this.#onServerBidi(streamId, chunk, fin)
      } else {
        return // our own stream with no request on it, or already released: nothing for HTTP/3
      }
    }
    if (stream.peerDone) return
    const events: FrameEvent[] = []
    const failed = stream.frames.push(chunk, events)
    for (const event of events) {
      if (this.#closed || stream.peerDone) return
      switch (event.kind) {
        case 'webtransport':
          // Only a server's reader accepts the signal, and only as the first frame.
          this.#requests.delete(streamId)
          this.#handOver(streamId, event.sessionId, true, event.rest, fin)
          return
        case 'frame':
          this.#onRequestFrame(stream, event.type, event.payload)
          break
        case 'data':
          this.#onRequestData(stream, event.data)
          break
        default: {
          const never: never = event
          throw new Error(`unknown frame event ${JSON.stringify(never)}`)
        }
      }
    }
    if (this.#closed || stream.peerDone) return
    if (failed !== null) return this.#fail(failed)
    if (fin) this.#onRequestFin(stream)
  }

  #onRequestFrame (stream: RequestStream, type: number, payload: Uint8Array): void {
    if (type === FRAME.PUSH_PROMISE) {
      // We never send MAX_PUSH_ID, so a client sees no legal push; a server never receives one.
      return this.#fail(this.#role === 'client' ? failure('push_refused') : failure('frame_unexpected', 'PUSH_PROMISE sent to a server'))
    }
    // HEADERS: the only other frame a request stream collects.
    if (stream.phase === 'trailers') return this.#fail(failure('frame_unexpected', 'HEADERS after trailers'))
    const decoded = decodeFieldSection(payload, this.#options.maxFieldSectionSize)
    if (!decoded.ok) {
      if (decoded.error === 'qpack_decompression') return this.#fail(failure('qpack_decompression', decoded.detail))
      return this.#tooLarge(stream, decoded.detail)
    }
    if (stream.phase === 'body') {
      const trailers = validateTrailers(decoded.fields)
      if (!trailers.ok) return this.#streamFailure(stream, failure('message_malformed', trailers.detail))
      stream.phase = 'trailers'
      this.#out.push({ type: 'trailers', streamId: stream.id, fields: trailers.head })
      return
    }
    if (this.#role === 'server') return this.#onRequestHead(stream, decoded.fields)
    const response = validateResponse(decoded.fields)
    if (!response.ok) return this.#streamFailure(stream, failure('message_malformed', response.detail))
    const { status, fields } = response.head
    if (status < 200) return // interim response (1xx): the final one follows
    stream.phase = 'body'
    const session = stream.session
    if (session !== null && session.state === 'pending') {
      if (status < 300) session.state = 'open'
      else this.#endSession(session)
    }
    this.#out.push({ type: 'response', streamId: stream.id, status, fields })
  }

  #tooLarge (stream: RequestStream, detail: string): void {
    if (this.#role === 'server' && stream.phase === 'head' && !stream.localDone) {
      // RFC 9114 §4.2.2 lets a server answer 431 rather than reset the stream.
      stream.phase = 'body'
      this.#writeHeaders(stream, [[':status', '431']], true)
      if (!stream.peerDone) this.#out.push({ type: 'stop_sending', streamId: stream.id, code: H3_ERROR.H3_EXCESSIVE_LOAD })
      stream.peerDone = true
      this.#release(stream)
      this.#out.push({ type: 'stream_error', streamId: stream.id, code: H3_ERROR.H3_EXCESSIVE_LOAD, violation: 'field_section_too_large', detail })
      return
    }
    this.#streamFailure(stream, failure('field_section_too_large', detail))
  }

  #onRequestHead (stream: RequestStream, section: FieldLine[]): void {
    const validated = validateRequest(section)
    if (!validated.ok) return this.#streamFailure(stream, failure('message_malformed', validated.detail))
    const head = validated.head
    stream.phase = 'body'
    const webTransport = this.#webTransportEnabled && head.method === 'CONNECT' && head.protocol === WEBTRANSPORT_PROTOCOL
    if (webTransport) {
      if (this.#activeSessions >= this.#options.webTransportMaxSessions) return this.#streamFailure(stream, failure('request_rejected', `more than ${this.#options.webTransportMaxSessions} webtransport sessions`))
      this.#openSession(stream)
      if (this.#peerSettings === null) {
        // Which draft the client speaks is in its SETTINGS, which may still be in flight.
        stream.deferred = head
        return
      }
    }
    this.#out.push({ type: 'request', streamId: stream.id, head, webTransport })
  }

  #onRequestData (stream: RequestStream, data: Uint8Array): void {
    if (stream.phase !== 'body') return this.#fail(failure('frame_unexpected', stream.phase === 'head' ? 'DATA before HEADERS' : 'DATA after trailers'))
    const session = stream.session
    if (session === null || !this.#capsulesFlow(stream)) {
      this.#out.push({ type: 'body', streamId: stream.id, data })
      return
    }
    const events: CapsuleEvent[] = []
    const read = session.capsules.push(data, events)
    for (const event of events) {
      switch (event.kind) {
        case 'close':
          this.#endSession(session)
          this.#out.push({ type: 'session_closed', sessionId: session.id, code: event.code, reason: event.reason })
          break
        case 'drain':
          this.#out.push({ type: 'session_drain', sessionId: session.id })
          break
        default: {
          const never: never = event
          throw new Error(`unknown capsule event ${JSON.stringify(never)}`)
        }
      }
    }
    if (!read.ok) this.#streamFailure(stream, failure('capsule_malformed', read.detail))
  }

  /**
   * Whether a session stream's DATA is capsules: always from a client (Chromium sends a
   * GREASE capsule before the answer); from a server only after a 2xx (a refusal's body is
   * an ordinary body, passed on to the Pylon).
   */
  #capsulesFlow (stream: RequestStream): boolean {
    if (this.#role === 'server') return true
    const session = stream.session as Session
    return session.state === 'open' || (session.state === 'closed' && session.capsules.closed)
  }

  #onRequestFin (stream: RequestStream): void {
    const truncated = stream.frames.end()
    if (truncated !== null) return this.#fail(truncated)
    stream.peerDone = true
    const session = stream.session
    if (stream.phase === 'head') {
      if (this.#role === 'server') {
        // RFC 9114 §4.1: a request stream that ends before its head gets H3_REQUEST_INCOMPLETE.
        if (!stream.localDone) this.#out.push({ type: 'reset_stream', streamId: stream.id, code: H3_ERROR.H3_REQUEST_INCOMPLETE })
        stream.localDone = true
        if (session !== null) this.#endSession(session)
        this.#release(stream)
        return
      }
      return this.#streamFailure(stream, failure('message_malformed', 'response stream ended before the response head'))
    }
    if (session !== null && this.#capsulesFlow(stream)) {
      const end = session.capsules.end()
      if (!end.ok) return this.#streamFailure(stream, failure('capsule_malformed', end.detail))
      this.#out.push({ type: 'session_fin', sessionId: session.id })
    } else {
      this.#out.push({ type: 'end', streamId: stream.id })
    }
    this.#release(stream)
  }

  /** Client: a server-opened bidi stream may only be a WebTransport stream (RFC 9114 §6.1). */
  #onServerBidi (streamId: number, chunk: Uint8Array, fin: boolean): void {
    if (!this.#webTransportEnabled) return this.#fail(failure('stream_wrong_direction', 'server-initiated bidirectional stream'))
    let pending = this.#uni.get(streamId)
    if (pending === undefined) {
      pending = new PeerUniStream(streamId)
      this.#uni.set(streamId, pending)
    }
    const header = pending.header.push(chunk)
    if (header.status === 'incomplete') {
      if (fin) this.#uni.delete(streamId)
      return
    }
    this.#uni.delete(streamId)
    if (header.type !== WEBTRANSPORT_BIDI_SIGNAL) return this.#fail(failure('stream_wrong_direction', `server-initiated bidirectional stream of type 0x${header.type.toString(16)}`))
    this.#handOver(streamId, header.sessionId, true, chunk.subarray(header.consumed), fin)
  }

  #handOver (streamId: number, sessionId: number, bidi: boolean, rest: Uint8Array, fin: boolean): void {
    this.#out.push({ type: 'webtransport_stream', streamId, sessionId, bidi, session: this.sessionState(sessionId), data: rest, fin })
  }

  #onUniData (streamId: number, chunk: Uint8Array, fin: boolean): void {
    let stream = this.#uni.get(streamId)
    if (stream === undefined) {
      if (isServerInitiated(streamId) === (this.#role === 'server')) return // one of ours: nothing comes back on it
      stream = new PeerUniStream(streamId)
      this.#uni.set(streamId, stream)
    }
    let data = chunk
    if (stream.kind === 'header') {
      const header = stream.header.push(chunk)
      if (header.status === 'incomplete') {
        if (fin) this.#uni.delete(streamId)
        return
      }
      data = chunk.subarray(header.consumed)
      if (!this.#typeUni(stream, header.type, header.sessionId, data, fin)) return
    }
    switch (stream.kind) {
      case 'control':
        return this.#onControlData(stream, data, fin)
      case 'qpack': {
        const outcome = (stream.qpack as QpackStreamReader).push(data)
        if (!outcome.ok) return this.#fail(failure(outcome.error, outcome.detail))
        if (fin) return this.#fail(failure('critical_stream_closed', `peer closed its QPACK ${stream.id === this.#peerEncoder ? 'encoder' : 'decoder'} stream`))
        return
      }
      case 'ignored':
        if (fin) this.#uni.delete(streamId)
        return
      case 'header':
        return
      default: {
        const never: never = stream.kind
        throw new Error(`unknown uni stream kind ${String(never)}`)
      }
    }
  }

  /** The type of a peer uni stream is known; false when the stream is no longer ours to read. */
  #typeUni (stream: PeerUniStream, type: number, sessionId: number, rest: Uint8Array, fin: boolean): boolean {
    switch (type) {
      case STREAM_TYPE.CONTROL:
        if (this.#peerControl >= 0) {
          this.#fail(failure('stream_duplicate', 'second control stream'))
          return false
        }
        this.#peerControl = stream.id
        stream.kind = 'control'
        stream.frames = new FrameReader('control', this.#limits)
        return true
      case STREAM_TYPE.PUSH:
        this.#fail(this.#role === 'server' ? failure('stream_wrong_direction', 'push stream from a client') : failure('push_refused'))
        return false
      case STREAM_TYPE.QPACK_ENCODER:
      case STREAM_TYPE.QPACK_DECODER: {
        const encoder = type === STREAM_TYPE.QPACK_ENCODER
        if ((encoder ? this.#peerEncoder : this.#peerDecoder) >= 0) {
          this.#fail(failure('stream_duplicate', `second QPACK ${encoder ? 'encoder' : 'decoder'} stream`))
          return false
        }
        if (encoder) this.#peerEncoder = stream.id
        else this.#peerDecoder = stream.id
        stream.kind = 'qpack'
        stream.qpack = new QpackStreamReader(encoder)
        return true
      }
      case STREAM_TYPE.WEBTRANSPORT_UNI:
        if (this.#webTransportEnabled) {
          this.#uni.delete(stream.id)
          this.#handOver(stream.id, sessionId, false, rest, fin)
          return false
        }
        break
      default:
        break
    }
    // RFC 9114 §6.2.3: unknown stream types (GREASE included) are read no further.
    stream.kind = 'ignored'
    this.#out.push({ type: 'stop_sending', streamId: stream.id, code: H3_VIOLATIONS.unknown_stream_type.code })
    return true
  }

  #onControlData (stream: PeerUniStream, data: Uint8Array, fin: boolean): void {
    const events: FrameEvent[] = []
    const failed = (stream.frames as FrameReader).push(data, events)
    for (const event of events) {
      if (this.#closed) return
      if (event.kind === 'frame') this.#onControlFrame(event.type, event.payload)
    }
    if (this.#closed) return
    if (failed !== null) return this.#fail(failed)
    if (fin) this.#fail(failure('critical_stream_closed', 'peer closed its control stream'))
  }

  #onControlFrame (type: number, payload: Uint8Array): void {
    switch (type) {
      case FRAME.SETTINGS:
        return this.#onSettings(payload)
      case FRAME.GOAWAY: {
        const id = decodeVarintPayload(payload)
        if (id < 0) return this.#fail(failure('frame_malformed', 'GOAWAY payload is not one varint'))
        if (this.#role === 'client' && (id % 4) !== 0) return this.#fail(failure('goaway_invalid'))
        if (this.#goawayReceived >= 0 && id > this.#goawayReceived) return this.#fail(failure('goaway_increased'))
        this.#goawayReceived = id
        this.#out.push({ type: 'goaway', id })
        return
      }
      case FRAME.MAX_PUSH_ID:
        if (this.#role === 'client') return this.#fail(failure('frame_unexpected', 'MAX_PUSH_ID sent to a client'))
        if (decodeVarintPayload(payload) < 0) return this.#fail(failure('frame_malformed', 'MAX_PUSH_ID payload is not one varint'))
        return // we never push
      case FRAME.CANCEL_PUSH:
        // No push was ever promised or allowed (RFC 9114 §7.2.3: H3_ID_ERROR).
        return this.#fail(failure('push_refused', 'CANCEL_PUSH for a push that never existed'))
      default:
        return
    }
  }

  #onSettings (payload: Uint8Array): void {
    const decoded = decodeSettings(payload)
    if (!decoded.ok) return this.#fail(decoded.failure)
    this.#peerSettingsMap = decoded.settings
    const settings = interpretSettings(decoded.settings)
    this.#peerSettings = settings
    this.#draft = this.#webTransportEnabled ? negotiateWebTransport(decoded.settings, this.#drafts) : null
    if (this.#draft === null && this.#webTransportEnabled && this.#role === 'server' && this.#drafts.includes('draft02')) {
      // The Rust h3 client (0.0.8, under the real Pylon) sends ENABLE_WEBTRANSPORT = 0 yet
      // opens draft-02 sessions; a server meets such a client on draft-02.
      this.#draft = 'draft02'
    }
    this.#out.push({ type: 'settings', settings, webTransport: this.#draft })
    if (this.#role !== 'server') return
    for (const stream of this.#requests.values()) {
      if (stream.deferred === null) continue
      const head = stream.deferred
      stream.deferred = null
      this.#out.push({ type: 'request', streamId: stream.id, head, webTransport: true })
    }
  }

}
