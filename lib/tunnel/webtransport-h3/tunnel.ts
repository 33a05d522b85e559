/**
 * One WebTransport-over-HTTP/3 tunnel (SPEC §7): a Pylon's QUIC connection (routed by SNI
 * before it was accepted), its one session, the router's own HTTP/3 connection to the pod, and
 * the bridge between the two sessions.
 *
 *   awaiting ──first request (within --connect-timeout-ms)──▶ checked (400 invalid_connect)
 *     ──▶ dialing: QUIC to the pod's quic address, same SNI, ALPN h3; its SETTINGS must offer
 *         extended CONNECT and WebTransport; the CONNECT with every downstream field
 *         (502 upstream_connect_error on any failure or when --connect-timeout-ms runs out)
 *     ──▶ the pod's answer: non-2xx passed on with its fields and (bounded) body
 *         (upstream_rejected); 2xx → 200 to the Pylon and bridged
 *     ──▶ bridged: every WebTransport stream either side opens gets a stream of the same kind
 *         on the other leg with that leg's session id in its header, then the two are spliced
 *         natively (FIN, RESET_STREAM and STOP_SENDING cross with their codes); datagrams go
 *         through the engine's HTTP/3 datagram bridge (quarter stream ids mapped); close and
 *         drain capsules and the CONNECT stream's FIN and reset are passed to the other leg
 *     ──▶ closing: a session closed by either side (capsule or reset), a QUIC connection that
 *         closed, the relay (shutdown, trust change, the pod leaving the ready set): both
 *         legs are told, and closed after CLOSE_GRACE_MS at the latest — Chromium drops its
 *         connection after a session ends without a CONNECTION_CLOSE, so the router must close
 *         the pod's side itself rather than wait out the idle timeout.
 *
 * The tunnel reports exactly one outcome (onEnd), the metric the relay counts.
 */
import type { QuicCloseInfo, QuicConnection } from '../../quic/connection.ts'
import type { QuicStream } from '../../quic/stream.ts'
import { H3_ERROR } from '../../quic/h3/errors.ts'
import type { SessionState } from '../../quic/h3/connection.ts'
import type { RequestHead } from '../../quic/h3/message.ts'
import type { FieldLine } from '../../quic/h3/qpack.ts'
import { QuicH3Connection, type H3Event, type QuicH3Handler, type QuicH3Options } from '../../quic/h3/quic-h3.ts'
import type { PodTarget } from '../../discovery/types.ts'
import { REJECTIONS, checkConnectHead, downstreamH3Fields, upstreamH3Fields, type RejectionCode } from '../webtransport-connect.ts'
import type { WebTransportOutcome } from '../webtransport-metrics.ts'
import { webTransportCodeToHttp3 } from '../../quic/h3/errors.ts'
import { STREAM_REFUSALS } from '../errors.ts'
import { tunnelCloseReasonOf, type DrainReason } from '../../drain/drain-reasons.ts'
import { CLOSE_FLUSH_MS } from '../quic-port.ts'

/** The stream error a draining session refuses a new stream with: the catalogue's code, as WebTransport carries it. */
const DRAIN_REFUSAL = webTransportCodeToHttp3(STREAM_REFUSALS.draining.code)

/** Longest wait for the last bytes (a close capsule, a refusal) before a leg is closed. */
export const CLOSE_GRACE_MS = 1000
/** A refused pod's body reaches the Pylon up to this size. */
const MAX_REJECTION_BODY = 64 * 1024
/** Streams waiting for the other leg's stream credit (or for the session to be bridged). */
const MAX_PENDING_STREAMS = 256

export type TunnelEnd = Extract<WebTransportOutcome, 'invalid_connect' | 'upstream_connect_error' | 'upstream_rejected' | 'completed' | 'relay_error' | 'trust_replaced'>

/** What a tunnel needs of its relay. */
export interface TunnelHost {
  readonly h3Options: QuicH3Options
  readonly connectTimeoutMs: number
  /** Dials the pod (QUIC, ALPN h3, the same SNI, the current upstream trust); null when it cannot start. */
  dial (target: PodTarget, serverName: string): { readonly quic: QuicConnection, readonly trustKey: string } | null
  /** A session may start: false when the relay carries as many as it may. */
  admit (): boolean
  /** An admitted session has ended (its outcome is final): its slot is free again. */
  release (): void
  /** The pod accepted and the session is bridged. */
  onBridged (tunnel: WebTransportH3Tunnel): void
  /** The tunnel's one outcome; null for a refusal outside the outcome names (a session cap). */
  onEnd (tunnel: WebTransportH3Tunnel, end: TunnelEnd | null, detail: string): void
  onRejected (tunnel: WebTransportH3Tunnel, code: RejectionCode, detail: string): void
  /** A leg's QUIC handshake failed (the Pylon's: downstream, the pod's: upstream). */
  onHandshakeFailed (tunnel: WebTransportH3Tunnel, leg: 'downstream' | 'upstream', info: QuicCloseInfo): void
  /** A draining session refused new streams opened by the Pylon or the pod. */
  onDrainRefused (tunnel: WebTransportH3Tunnel, side: 'pylon' | 'stargate', count: number): void
}

type State = 'awaiting' | 'dialing' | 'rejecting' | 'bridged' | 'closing' | 'closed'

interface PendingStream {
  readonly stream: QuicStream
  /** The leg it arrived on. */
  readonly fromDown: boolean
}

function onTimer (tunnel: WebTransportH3Tunnel): void {
  tunnel.handleTimer()
}

export class WebTransportH3Tunnel {
  readonly down: QuicH3Connection
  readonly target: PodTarget
  readonly serverName: string
  readonly startedAt = Date.now()
  up: QuicH3Connection | null = null
  trustKey = ''
  #state: State = 'awaiting'
  readonly #host: TunnelHost
  #timer: NodeJS.Timeout | null = null
  #downSession = -1
  #upSession = -1
  #head: RequestHead | null = null
  /** The Pylon finished its side of the CONNECT stream before the pod's was open (the Rust h3 client does at once). */
  #downFin = false
  #rejectionBytes = 0
  #admitted = false
  /** The session was bridged (for the active-sessions gauge at its end). */
  wasBridged = false
  #pending: PendingStream[] = []
  #creditListening = false
  /** Sent with the connections' close once the grace ends. */
  #closeReason = 'webtransport session closed'
  #ended = false
  /** Why the tunnel drains (lib/drain), or null; legs whose bridged streams have not all ended. */
  #drainReason: DrainReason | null = null
  readonly #drainBusy = new Set<QuicConnection>()
  #refusalsCounted = false

  constructor (quic: QuicConnection, target: PodTarget, serverName: string, host: TunnelHost) {
    this.target = target
    this.serverName = serverName
    this.#host = host
    this.down = new QuicH3Connection(quic, host.h3Options, DOWN_HANDLER)
    this.down.data = this
    this.#arm(host.connectTimeoutMs)
  }

  get state (): State {
    return this.#state
  }

  /** Closes both legs: the session with a close capsule (code, reason), then the connections. */
  close (reason: string, end: TunnelEnd = 'completed', code = 0): void {
    if (this.#state === 'closed') return
    if (this.#state === 'bridged') {
      this.down.closeSession(this.#downSession, code, reason)
      this.up?.closeSession(this.#upSession, code, reason)
    }
    this.#end(end, reason)
    this.#closeAfterGrace(reason)
  }

  /** Asks both peers to wind the session down (DRAIN_WEBTRANSPORT_SESSION); a close follows. */
  drain (): void {
    if (this.#state !== 'bridged') return
    this.down.drainSession(this.#downSession)
    this.up?.drainSession(this.#upSession)
  }

  /** Closes both legs now (no grace): a second shutdown signal, a destroyed relay, a drain out of time. */
  destroy (reason: string): void {
    this.#countRefusals()
    this.#end('completed', reason)
    this.#closeNow(H3_ERROR.H3_NO_ERROR, reason)
  }

  /** The drain's reason once one began (lib/drain), else null. */
  get draining (): DrainReason | null {
    return this.#drainReason
  }

  /**
   * Stops new work (SPEC §11): a bridged session's Pylon connection gets an HTTP/3 GOAWAY, both
   * sessions a drain capsule, and both legs refuse new bidirectional WebTransport streams with
   * STREAM_REFUSALS.draining (native/src/drain.c; in TypeScript for a stream the bridge handed
   * over); the session closes with the reason once its bridged streams have all ended. A
   * session not bridged yet is refused (503 `router is shutting down`) or closed at once.
   */
  beginDrain (reason: DrainReason): void {
    if (this.#drainReason !== null) return
    this.#drainReason = reason
    switch (this.#state) {
      case 'awaiting':
        this.close(tunnelCloseReasonOf(reason))
        return
      case 'dialing':
        this.#refuse('shutting_down', tunnelCloseReasonOf(reason))
        return
      case 'bridged':
        break
      default:
        return // ending already
    }
    this.#drainLegs()
    // GOAWAY names the first client stream id this server will not process. The session's
    // WebTransport streams share that id space with requests (Chromium resets its own streams
    // above the id), so it is the one after every bidirectional stream the Pylon has opened:
    // those run on, a new one the Pylon does not open (and the engine refuses one in flight).
    const seen = Math.max(this.#downSession, this.down.quic.stats()?.peerMaxBidiStream ?? -1)
    this.down.goaway(seen + 4)
    this.down.drainSession(this.#downSession)
    this.up?.drainSession(this.#upSession)
    this.#settleDrain()
  }

  /** Each leg reports its bridged streams; a leg with some says when the last has ended. */
  #drainLegs (): void {
    for (const leg of [this.down, this.up]) {
      if (leg === null || leg.quic.closed) continue
      const conn = leg.quic
      if (conn.drain(DRAIN_REFUSAL, 'webtransport') <= 0 || this.#drainBusy.has(conn)) continue
      this.#drainBusy.add(conn)
      conn.once('drained', () => {
        this.#drainBusy.delete(conn)
        this.#settleDrain()
      })
    }
  }

  #settleDrain (): void {
    if (this.#drainReason === null || this.#state !== 'bridged') return
    if (this.#drainBusy.size > 0 || this.#pending.length > 0) return
    this.#countRefusals()
    this.close(tunnelCloseReasonOf(this.#drainReason))
  }

  /** The streams both legs refused while draining, counted once (the legs' stats go with them). */
  #countRefusals (): void {
    if (this.#drainReason === null || this.#refusalsCounted) return
    this.#refusalsCounted = true
    const pylon = this.down.quic.stats()?.refusedStreams ?? 0
    const stargate = this.up?.quic.stats()?.refusedStreams ?? 0
    if (pylon > 0) this.#host.onDrainRefused(this, 'pylon', pylon)
    if (stargate > 0) this.#host.onDrainRefused(this, 'stargate', stargate)
  }

  handleTimer (): void {
    this.#timer = null
    switch (this.#state) {
      case 'awaiting':
        this.#end('invalid_connect', 'no session request in time')
        this.#closeNow(H3_ERROR.H3_NO_ERROR, 'no webtransport session request')
        return
      case 'dialing':
        this.#refuse('upstream_timeout', 'the pod did not answer in time')
        return
      default:
        this.#closeNow(H3_ERROR.H3_NO_ERROR, this.#closeReason)
    }
  }

  // ── the Pylon's leg ───────────────────────────────────────────────────────────────

  onDownEvent (event: H3Event): void {
    switch (event.type) {
      case 'request':
        if (event.streamId !== this.#downSession && this.#downSession >= 0) {
          // One session per connection: the core resets further WebTransport requests (above
          // the max-sessions setting); any other request on it is no session request.
          this.down.respond(event.streamId, 400, [['content-type', 'text/plain; charset=utf-8']])
          this.down.sendData(event.streamId, Buffer.from('one webtransport session per connection\n'), true)
          return
        }
        return this.#onRequest(event.streamId, event.head)
      case 'session_closed':
        if (event.sessionId !== this.#downSession) return
        if (this.#state === 'bridged') this.up?.closeSession(this.#upSession, event.code, event.reason)
        this.#end('completed', 'the pylon closed the session')
        return this.#closeAfterGrace('session closed')
      case 'session_drain':
        if (event.sessionId === this.#downSession && this.#state === 'bridged') this.up?.drainSession(this.#upSession)
        return
      case 'session_fin':
        if (event.sessionId !== this.#downSession) return
        if (this.#state === 'bridged') this.up?.finish(this.#upSession)
        else this.#downFin = true
        return
      case 'session_reset':
        if (event.sessionId !== this.#downSession) return
        if (this.#state === 'bridged') this.up?.resetStream(this.#upSession, event.code)
        this.#end(this.#state === 'dialing' ? 'relay_error' : 'completed', 'the pylon reset the session')
        return this.#closeAfterGrace('session reset')
      case 'stream_error':
        if (event.streamId !== this.#downSession) {
          // A session request beyond the max-sessions setting, reset by the core.
          if (event.violation === 'request_rejected') this.#host.onRejected(this, 'connection_session_limit', event.detail)
          return
        }
        this.#end('relay_error', `pylon session stream: ${event.detail}`)
        return this.#closeAfterGrace('session aborted')
      default:
        return
    }
  }

  onDownStream (stream: QuicStream, sessionId: number): void {
    if (sessionId !== this.#downSession || this.#state === 'closing' || this.#state === 'closed') return refuseStream(stream)
    this.#bridgeStream(stream, true)
  }

  onDownClose (info: QuicCloseInfo): void {
    if (!info.established) this.#host.onHandshakeFailed(this, 'downstream', info)
    switch (this.#state) {
      case 'awaiting':
        this.#end('invalid_connect', 'the pylon left before its session request')
        break
      case 'dialing':
        this.#end('relay_error', 'the pylon left before the pod answered')
        break
      default:
        this.#end('completed', 'the pylon closed its connection')
    }
    this.#closeLeg(this.up, info)
    this.#finalise()
  }

  // ── the pod's leg ─────────────────────────────────────────────────────────────────

  onUpEvent (event: H3Event): void {
    const up = this.up
    if (up === null) return
    switch (event.type) {
      case 'settings':
        return this.#onUpSettings(up)
      case 'response':
        if (event.streamId === this.#upSession) this.#onUpResponse(event.status, event.fields)
        return
      case 'body':
        if (event.streamId === this.#upSession && this.#state === 'rejecting') this.#passBody(event.data)
        return
      case 'end':
        if (event.streamId === this.#upSession && this.#state === 'rejecting') {
          this.down.finish(this.#downSession)
          this.#closeAfterGrace('session refused by the pod')
        }
        return
      case 'session_closed':
        if (event.sessionId !== this.#upSession) return
        if (this.#state === 'bridged') this.down.closeSession(this.#downSession, event.code, event.reason)
        this.#end('completed', 'the pod closed the session')
        return this.#closeAfterGrace('session closed')
      case 'session_drain':
        if (event.sessionId === this.#upSession && this.#state === 'bridged') this.down.drainSession(this.#downSession)
        return
      case 'session_fin':
        if (event.sessionId === this.#upSession && this.#state === 'bridged') this.down.finish(this.#downSession)
        return
      case 'session_reset':
        if (event.sessionId !== this.#upSession) return
        if (this.#state === 'dialing') return this.#refuse('upstream_unreachable', `the pod reset the session request (code 0x${event.code.toString(16)})`)
        if (this.#state === 'bridged') this.down.resetStream(this.#downSession, event.code)
        this.#end('completed', 'the pod reset the session')
        return this.#closeAfterGrace('session reset')
      case 'stream_error':
        if (event.streamId !== this.#upSession) return
        if (this.#state === 'dialing') return this.#refuse('upstream_unreachable', `the pod's answer was malformed: ${event.detail}`)
        this.#end('relay_error', `pod session stream: ${event.detail}`)
        return this.#closeAfterGrace('session aborted')
      default:
        return
    }
  }

  onUpStream (stream: QuicStream, sessionId: number, session: SessionState): void {
    if (sessionId !== this.#upSession || session === 'closed' || this.#state === 'closing' || this.#state === 'closed') return refuseStream(stream)
    // A stream of the pod may come before its 2xx was read (streams race): held until bridged.
    this.#bridgeStream(stream, false)
  }

  onUpClose (info: QuicCloseInfo): void {
    if (this.#state === 'dialing') {
      if (!info.established) this.#host.onHandshakeFailed(this, 'upstream', info)
      const why = info.established ? `the pod closed the connection (${info.kind} 0x${info.code.toString(16)} ${info.reasonText})` : `no QUIC connection to the pod (${info.kind}${info.alert !== 0 ? `, TLS alert ${info.alert}` : ''})`
      this.#refuse(info.kind === 'handshake_timeout' ? 'upstream_timeout' : 'upstream_unreachable', why)
      return
    }
    if (this.#state !== 'bridged') {
      // Refusing or closing already: the Pylon's leg ends with its own answer and grace.
      this.#finalise()
      return
    }
    this.#end('completed', 'the pod closed its connection')
    this.#closeLeg(this.down, info)
  }

  // ── internals ─────────────────────────────────────────────────────────────────────

  #onRequest (streamId: number, head: RequestHead): void {
    if (this.#state !== 'awaiting') return
    this.#downSession = streamId
    const check = checkConnectHead(head.method, head.protocol, head.path)
    if (!check.ok) {
      this.#head = head
      return this.#refuse(check.code, `${head.method} ${head.path ?? ''}`)
    }
    if (!this.#host.admit()) return this.#refuse('total_session_limit', 'session cap reached')
    this.#admitted = true
    const dialed = this.#host.dial(this.target, this.serverName)
    if (dialed === null) return this.#refuse('upstream_unreachable', 'the dial could not start')
    this.#head = head
    this.trustKey = dialed.trustKey
    this.#state = 'dialing'
    this.up = new QuicH3Connection(dialed.quic, { ...this.#host.h3Options, drafts: undefined }, UP_HANDLER)
    this.up.data = this
    this.#arm(this.#host.connectTimeoutMs)
  }

  #onUpSettings (up: QuicH3Connection): void {
    if (this.#state !== 'dialing' || this.#upSession >= 0 || this.#head === null) return
    const peer = up.core.peerSettings
    if (peer === null || !peer.enableConnectProtocol || up.core.webTransportDraft === null) {
      return this.#refuse('upstream_no_webtransport', 'the pod\'s SETTINGS offer no extended CONNECT or no WebTransport')
    }
    const sent = up.request(upstreamH3Fields(this.#head), false)
    if (!sent.ok) return this.#refuse('upstream_unreachable', `the session request could not be sent: ${sent.reason}`)
    this.#upSession = sent.streamId
    if (this.#downFin) up.finish(this.#upSession)
  }

  #onUpResponse (status: number, fields: FieldLine[]): void {
    if (this.#state !== 'dialing') return
    this.#disarm()
    if (status >= 200 && status < 300) {
      this.down.respond(this.#downSession, 200, downstreamH3Fields(fields))
      this.#state = 'bridged'
      this.wasBridged = true
      this.#host.onBridged(this)
      this.#bridgeDatagrams()
      // From here on the addon pairs the session's new streams itself (no turn through here).
      this.down.quic.bridgeStreams((this.up as QuicH3Connection).quic, 'webtransport', this.#downSession, this.#upSession)
      if (this.#pending.length > 0) this.#flushPending()
      return
    }
    this.#state = 'rejecting'
    this.#end('upstream_rejected', `the pod answered ${status}`)
    this.down.respond(this.#downSession, status, downstreamH3Fields(fields))
    this.#arm(this.#host.connectTimeoutMs) // the body must come within the connect timeout too
  }

  #passBody (data: Uint8Array): void {
    const room = MAX_REJECTION_BODY - this.#rejectionBytes
    if (room <= 0) return
    const part = data.length > room ? data.subarray(0, room) : data
    this.#rejectionBytes += part.length
    this.down.sendData(this.#downSession, part)
  }

  /** Answers the Pylon with a rejection of the table (status, code header, message) and winds the tunnel down. */
  #refuse (code: RejectionCode, detail: string): void {
    if (this.#state === 'closing' || this.#state === 'closed') return
    const rejection = REJECTIONS[code]
    this.#host.onRejected(this, code, detail)
    this.#end(rejection.outcome as TunnelEnd | null, detail)
    if (this.#downSession >= 0) {
      this.down.respond(this.#downSession, rejection.status, [['content-type', 'text/plain; charset=utf-8'], ['x-stargate-error-code', code]])
      this.down.sendData(this.#downSession, Buffer.from(rejection.message + '\n'), true)
    }
    this.#closeLeg(this.up, null)
    this.#closeAfterGrace(rejection.message)
  }

  #bridgeDatagrams (): void {
    const up = this.up
    if (up === null || !this.down.quic.datagrams || !up.quic.datagrams) return
    if (!this.down.quic.bridgeDatagrams(up.quic, 'h3')) return
    this.down.quic.mapDatagrams(this.#downSession / 4, this.#upSession / 4)
    up.quic.mapDatagrams(this.#upSession / 4, this.#downSession / 4)
  }

  /** New streams come to TypeScript again (and are refused there: the session is ending). */
  #unbridgeStreams (): void {
    if (this.up !== null && this.wasBridged) this.down.quic.bridgeStreams(this.up.quic, 'off')
  }

  #bridgeStream (stream: QuicStream, fromDown: boolean): void {
    if (this.#drainReason !== null && stream.bidi) {
      // Handed over by the native bridge (a header it could not place) while draining: refused
      // as the bridge refuses (uni streams are relayed, as there).
      stream.stopSending(DRAIN_REFUSAL)
      stream.reset(DRAIN_REFUSAL)
      this.#host.onDrainRefused(this, fromDown ? 'pylon' : 'stargate', 1)
      return
    }
    if (this.#state !== 'bridged' || this.#pending.length > 0) {
      if (this.#pending.length >= MAX_PENDING_STREAMS) return refuseStream(stream)
      this.#pending.push({ stream, fromDown })
      this.#waitForCredit()
      return
    }
    if (!this.#splice(stream, fromDown)) {
      this.#pending.push({ stream, fromDown })
      this.#waitForCredit()
    }
  }

  /** Opens the partner stream on the other leg and splices; false when the other leg has no stream credit now. */
  #splice (stream: QuicStream, fromDown: boolean): boolean {
    if (stream.closed) return true
    const other = fromDown ? this.up : this.down
    if (other === null) {
      refuseStream(stream)
      return true
    }
    const partner = other.openWebTransportStream(fromDown ? this.#upSession : this.#downSession, stream.bidi)
    if (partner === null) {
      if (other.quic.closed || other.core.sessionState(fromDown ? this.#upSession : this.#downSession) !== 'open') {
        refuseStream(stream)
        return true
      }
      return false
    }
    if (!stream.splice(partner)) {
      refuseStream(stream)
      partner.reset(H3_ERROR.H3_INTERNAL_ERROR)
    }
    return true
  }

  #flushPending (): void {
    if (this.#state !== 'bridged') return
    let i = 0
    for (; i < this.#pending.length; i++) {
      const { stream, fromDown } = this.#pending[i] as PendingStream
      if (!this.#splice(stream, fromDown)) break
    }
    this.#pending = i === 0 ? this.#pending : this.#pending.slice(i)
    if (this.#pending.length > 0) this.#waitForCredit()
    if (i > 0 && this.#drainReason !== null) {
      // Streams spliced now are the legs' work too: ask them again (it re-arms 'drained').
      this.#drainLegs()
      this.#settleDrain()
    }
  }

  /** From the first wait on, each leg's new stream credit retries the waiting streams (one listener per leg). */
  #waitForCredit (): void {
    if (this.#creditListening || this.#state !== 'bridged') return
    this.#creditListening = true
    const retry = (): void => { if (this.#pending.length > 0) this.#flushPending() }
    this.down.quic.on('streamsAvailable', retry)
    this.up?.quic.on('streamsAvailable', retry)
  }

  #end (end: TunnelEnd | null, detail: string): void {
    if (this.#ended) return
    this.#ended = true
    if (this.#admitted) this.#host.release()
    this.#host.onEnd(this, end, detail)
  }

  #closeAfterGrace (reason: string): void {
    if (this.#state === 'closed') return
    if (this.#state !== 'closing') {
      this.#state = 'closing'
      this.#unbridgeStreams()
      for (const { stream } of this.#pending) refuseStream(stream)
      this.#pending = []
    }
    this.#closeReason = reason
    this.#arm(CLOSE_GRACE_MS)
  }

  #closeNow (code: number, reason: string): void {
    this.#state = 'closed'
    this.#disarm()
    this.#unbridgeStreams()
    for (const { stream } of this.#pending) refuseStream(stream)
    this.#pending = []
    if (!this.down.quic.closed) this.down.close(code, reason)
    if (this.up !== null && !this.up.quic.closed) this.up.close(code, reason)
  }

  /** One leg closed: close the other with the same code and reason (SPEC §7: carried across). */
  #closeLeg (leg: QuicH3Connection | null, info: QuicCloseInfo | null): void {
    if (leg === null || leg.quic.closed) {
      if (leg === this.up || this.up === null || this.up.quic.closed) this.#finalise()
      return
    }
    if (info === null) leg.close(H3_ERROR.H3_NO_ERROR, '')
    // A peer's own close waits for the other leg to deliver what that peer had sent.
    else if (info.kind === 'peer') leg.quic.closeWhenFlushed(info.code, info.reason, info.app, CLOSE_FLUSH_MS)
    else leg.quic.close(info.code, info.reason, info.app)
    this.#finalise()
  }

  #finalise (): void {
    if (this.down.quic.closed && (this.up === null || this.up.quic.closed)) {
      this.#state = 'closed'
      this.#disarm()
    }
  }

  #arm (ms: number): void {
    this.#disarm()
    this.#timer = setTimeout(onTimer, ms, this)
    this.#timer.unref()
  }

  #disarm (): void {
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#timer = null
  }
}

function refuseStream (stream: QuicStream): void {
  if (stream.closed) return
  stream.stopSending(H3_ERROR.WT_BUFFERED_STREAM_REJECTED)
  stream.reset(H3_ERROR.WT_BUFFERED_STREAM_REJECTED)
}

function tunnelOf (h3: QuicH3Connection): WebTransportH3Tunnel {
  return h3.data as WebTransportH3Tunnel
}

/** One handler object per leg kind for every tunnel (no closures per connection). */
const DOWN_HANDLER: QuicH3Handler = {
  onEvent (h3, event) { tunnelOf(h3).onDownEvent(event) },
  onWebTransportStream (h3, stream, sessionId) { tunnelOf(h3).onDownStream(stream, sessionId) },
  onClose (h3, info) { tunnelOf(h3).onDownClose(info) },
}

const UP_HANDLER: QuicH3Handler = {
  onEvent (h3, event) { tunnelOf(h3).onUpEvent(event) },
  onWebTransportStream (h3, stream, sessionId, session) { tunnelOf(h3).onUpStream(stream, sessionId, session) },
  onClose (h3, info) { tunnelOf(h3).onUpClose(info) },
}
