/**
 * One bridged WebTransport session: the Pylon's CONNECT stream (downstream) and the pod's
 * (upstream), their capsules forwarded both ways unmodified (see lib/quic/h3/capsule.ts).
 *
 *   Pylon ──h2 CONNECT stream──▶ [Pump to_upstream]   ──h2 CONNECT stream──▶ pod
 *         ◀────────────────────  [Pump to_downstream] ◀────────────────────
 *
 * Everything a WebTransport session carries travels in those capsules: bidirectional and
 * unidirectional streams opened by either side (with FIN, RESET_STREAM and STOP_SENDING
 * codes), datagrams, flow-control credit, and CLOSE_WEBTRANSPORT_SESSION with its code and
 * reason. Backpressure is HTTP/2's: a pump stops reading its source while its destination's
 * write buffer is full, and Node stops granting the source HTTP/2 credit while it is paused,
 * so the router holds about one flow-control window per direction. Per-stream flow control
 * is the endpoints' (end to end): the relay never waits on one WebTransport stream, so a
 * stream whose reader stalls cannot hold up the others on the CONNECT stream.
 *
 * Closing: a close capsule or a clean END_STREAM from one side is forwarded, and the other
 * leg is ended after it (outcome `completed`). A leg that is reset or lost without a close
 * capsule makes the relay close the other leg itself, with a close capsule of code 0 and
 * reason `downstream session aborted` / `upstream session aborted` (outcome `relay_error`) —
 * or, when the lost leg stopped inside a capsule, with RST_STREAM CANCEL, since nothing
 * well-formed can follow half a capsule. When the relay closes a session (shutdown, trust
 * change, idle timeout) it waits on each direction for the capsule in flight to end, writes
 * its own close capsule and ends the leg. Every leg the relay ends gets a close capsule
 * first: the library's endpoints ignore a bare END_STREAM. CLOSE_GRACE_MS after a close
 * began, what is left is reset.
 *
 * Per chunk the pumps only walk capsule headers and count bytes; the handlers are module
 * functions that find their pump through a symbol on the stream (no closure per chunk).
 */
import { constants, type ClientHttp2Session, type ClientHttp2Stream, type Http2Stream, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2'
import { CapsuleCursor, encodeCloseCapsule, encodeDrainCapsule, encodeStreamRefusal, type WtStreamCapsuleKind } from '../../quic/h3/capsule.ts'
import { STREAM_REFUSALS, WEBTRANSPORT_CLOSE_REASONS } from '../errors.ts'
import { pingIfOpen } from '../../safe-io.ts'
import type { BridgeDirection, WebTransportMetrics } from '../webtransport-metrics.ts'
import { WtStreamLedger, type Side } from './streams.ts'

/** After a close began, how long the legs get to finish before they are reset. */
export const CLOSE_GRACE_MS = 2000

export type BridgeEnd = 'completed' | 'relay_error' | 'trust_replaced'

const kReadPump = Symbol('read-pump')
const kWritePump = Symbol('write-pump')
const kBridge = Symbol('bridge')

type Leg = Http2Stream & { [kReadPump]?: Pump, [kWritePump]?: Pump, [kBridge]?: WebTransportBridge }

class Pump {
  readonly src: Leg
  readonly dst: Leg
  readonly direction: BridgeDirection
  readonly cursor: CapsuleCursor
  /** Bytes forwarded and not yet added to the metric. */
  unflushed = 0
  /** Source sent END_STREAM (all its bytes were read). */
  ended = false
  /** Nothing more is written to dst (it was ended or reset). */
  done = false
  /** A close the relay started: this capsule goes out at the next capsule boundary. */
  closing: Buffer | null = null
  /** Capsules of the relay's own (a drain, stream refusals) waiting for the next capsule boundary. */
  injects: Buffer[] | null = null

  constructor (src: Leg, dst: Leg, direction: BridgeDirection, onStream: (kind: WtStreamCapsuleKind, streamId: number) => void) {
    this.src = src
    this.dst = dst
    this.direction = direction
    this.cursor = new CapsuleCursor(onStream)
  }

  /** Writes a capsule of the relay's own between two of the source's: now when at a boundary. */
  inject (capsule: Buffer): void {
    if (this.done || this.closing !== null) return
    if (this.cursor.atBoundary && this.injects === null) {
      this.#write(capsule)
      return
    }
    (this.injects ??= []).push(capsule)
    if (this.src.isPaused()) this.src.resume()
  }

  /** At a capsule boundary: the capsules waiting for one go out. */
  flushInjects (): void {
    const injects = this.injects
    if (injects === null || !this.cursor.atBoundary) return
    this.injects = null
    for (const capsule of injects) this.#write(capsule)
  }

  #write (capsule: Buffer): void {
    if (this.dst.destroyed || this.dst.closed || this.dst.writableEnded) return
    this.dst.write(capsule)
  }

  /** Ends dst after the bytes written so far, with a close capsule unless one went through. */
  finish (capsule: Buffer): void {
    if (this.done) return
    this.done = true
    this.closing = null
    if (this.dst.destroyed || this.dst.closed || this.dst.writableEnded) return
    if (!this.cursor.atBoundary) {
      // The source stopped inside a capsule: dst cannot be given a well-formed end.
      this.dst.close(constants.NGHTTP2_CANCEL)
      return
    }
    if (this.cursor.closeSeen) this.dst.end()
    else this.dst.end(capsule)
  }

  /** The relay closes the session: finish at the next capsule boundary. */
  beginClose (capsule: Buffer): void {
    if (this.done) return
    if (this.cursor.atBoundary || this.ended) {
      this.finish(capsule)
      return
    }
    this.closing = capsule
    // Bytes up to the boundary must still flow, whatever backpressure said before.
    if (this.src.isPaused()) this.src.resume()
  }
}

function onData (this: Leg, chunk: Buffer): void {
  const pump = this[kReadPump] as Pump
  const bridge = this[kBridge] as WebTransportBridge
  if (pump.direction === 'to_upstream') bridge.lastFromDownstream = bridge.clock.now
  else bridge.lastFromUpstream = bridge.clock.now
  if (pump.done) return
  if (pump.closing !== null) {
    const n = pump.cursor.advance(chunk, true)
    if (n > 0) {
      pump.unflushed += n
      pump.dst.write(n === chunk.length ? chunk : chunk.subarray(0, n))
    }
    if (pump.cursor.atBoundary) pump.finish(pump.closing)
    return
  }
  if (pump.injects !== null) {
    // The relay's own capsules go out at the first boundary of this chunk.
    let at = 0
    while (pump.injects !== null && at < chunk.length && !pump.cursor.atBoundary) {
      const n = pump.cursor.advance(chunk, true, at)
      pump.dst.write(chunk.subarray(at, at + n))
      at += n
    }
    pump.flushInjects()
    pump.unflushed += chunk.length
    if (at === chunk.length) return
    chunk = chunk.subarray(at)
  } else {
    pump.unflushed += chunk.length
  }
  pump.cursor.advance(chunk)
  const room = pump.dst.write(chunk)
  // A stream capsule in the chunk may have asked for capsules of the relay's own: they follow
  // it when the chunk ended at a boundary, else at the next one.
  pump.flushInjects()
  if (!room) this.pause()
}

function onDrain (this: Leg): void {
  const pump = this[kWritePump]
  if (pump !== undefined && !pump.src.destroyed && pump.src.isPaused()) pump.src.resume()
}

function onEnd (this: Leg): void {
  // Node ends the readable side of every stream of a connection that is lost, after an
  // 'aborted' event: that is not the peer's END_STREAM. onLegClosed handles it.
  if (this.aborted) return
  const pump = this[kReadPump] as Pump
  pump.ended = true
  pump.finish(pump.closing ?? encodeCloseCapsule(0, ''))
}

function onLegClose (this: Leg): void {
  (this[kBridge] as WebTransportBridge).onLegClosed(this)
}

function ignoreError (): void {
  // A leg's error (reset, broken connection) shows as its 'close' with rstCode; handled there.
}

function onCloseTimeout (bridge: WebTransportBridge): void {
  bridge.closeTimer = null
  bridge.destroy()
}

/** A coarse clock: the relay's tick updates it, pumps read it (no Date.now() per chunk). */
export interface CoarseClock {
  now: number
}

export interface BridgeOptions {
  readonly downstream: ServerHttp2Stream
  readonly upstream: ClientHttp2Stream
  readonly upstreamSession: ClientHttp2Session
  /** The trust the upstream leg was verified with (see UpstreamTrust.key). */
  readonly trustKey: string
  readonly target: string
  readonly clock: CoarseClock
  /** PING both legs' connections when asked (--relay-keep-alive-ms > 0). */
  readonly keepAlive: boolean
  readonly metrics: WebTransportMetrics
  readonly onEnd: (bridge: WebTransportBridge, end: BridgeEnd) => void
  /** A draining session refused a stream the Pylon or the pod opened. */
  readonly onRefused?: (side: Side) => void
  /** Streams a draining session refuses before it is closed at once (default MAX_REFUSALS). */
  readonly maxRefusals?: number
}

/**
 * Streams a draining session refuses at most: each refusal is two small capsules, waiting for a
 * capsule boundary of each direction, so a peer opening streams without end must not grow them
 * without bound; beyond this the session is closed at once.
 */
const MAX_REFUSALS = 1024

function onSettleTick (bridge: WebTransportBridge): void {
  bridge.settleDrain()
}

function onCloseNowTick (bridge: WebTransportBridge): void {
  bridge.closeDrainingNow()
}

export class WebTransportBridge {
  readonly downstream: Leg
  readonly upstream: Leg
  readonly upstreamSession: ClientHttp2Session
  readonly downstreamSession: ServerHttp2Session | undefined
  readonly trustKey: string
  readonly target: string
  readonly clock: CoarseClock
  readonly startedAt: number
  lastFromDownstream: number
  lastFromUpstream: number
  lastPing: number
  closeTimer: NodeJS.Timeout | null = null
  /** PING acknowledgements count as signs of life; null without keep-alive. */
  readonly #onDownstreamPing: ((err: Error | null) => void) | null
  readonly #onUpstreamPing: ((err: Error | null) => void) | null
  readonly #toUpstream: Pump
  readonly #toDownstream: Pump
  readonly #metrics: WebTransportMetrics
  readonly #onEnd: BridgeOptions['onEnd']
  readonly #onRefused: BridgeOptions['onRefused']
  #end: BridgeEnd | null = null
  #finished = false
  /** The session's WebTransport streams, from the capsules both ways (streams.ts). */
  readonly ledger = new WtStreamLedger()
  /** Set by drain(): the close reason once the last stream ended. */
  #drainReason: string | null = null
  #settleQueued = false
  #refusals = 0
  readonly #maxRefusals: number

  constructor (options: BridgeOptions) {
    this.downstream = options.downstream as Leg
    this.upstream = options.upstream as Leg
    this.upstreamSession = options.upstreamSession
    this.downstreamSession = options.downstream.session as ServerHttp2Session | undefined
    this.trustKey = options.trustKey
    this.target = options.target
    this.clock = options.clock
    this.startedAt = options.clock.now
    this.lastFromDownstream = options.clock.now
    this.lastFromUpstream = options.clock.now
    this.lastPing = options.clock.now
    this.#metrics = options.metrics
    this.#onEnd = options.onEnd
    this.#onRefused = options.onRefused
    this.#maxRefusals = options.maxRefusals ?? MAX_REFUSALS
    // One pair of callbacks per session, made once, reused by every PING.
    this.#onDownstreamPing = options.keepAlive ? (err) => { if (err === null) this.lastFromDownstream = this.clock.now } : null
    this.#onUpstreamPing = options.keepAlive ? (err) => { if (err === null) this.lastFromUpstream = this.clock.now } : null
    this.#toUpstream = new Pump(this.downstream, this.upstream, 'to_upstream', (kind, id) => { this.#onStreamCapsule('pylon', kind, id) })
    this.#toDownstream = new Pump(this.upstream, this.downstream, 'to_downstream', (kind, id) => { this.#onStreamCapsule('stargate', kind, id) })
    for (const leg of [this.downstream, this.upstream]) {
      leg[kBridge] = this
      leg.on('error', ignoreError)
      leg.on('close', onLegClose)
      leg.on('drain', onDrain)
    }
    this.downstream[kReadPump] = this.#toUpstream
    this.upstream[kWritePump] = this.#toUpstream
    this.upstream[kReadPump] = this.#toDownstream
    this.downstream[kWritePump] = this.#toDownstream
    for (const leg of [this.downstream, this.upstream]) {
      leg.on('end', onEnd)
      leg.on('data', onData)
    }
    this.upstreamSession.on('error', ignoreError)
    // A leg may have closed before the bridge existed (a reset racing the response).
    if (this.downstream.closed || this.upstream.closed) queueMicrotask(() => { this.onLegClosed(this.downstream.closed ? this.downstream : this.upstream) })
  }

  get finished (): boolean {
    return this.#finished
  }

  get draining (): boolean {
    return this.#drainReason !== null
  }

  /**
   * Stops new work (SPEC §11): with a stream open, both ends get DRAIN_WEBTRANSPORT_SESSION, a bidirectional stream
   * either opens from now on is refused at both ends (WT_RESET_STREAM and WT_STOP_SENDING with
   * STREAM_REFUSALS.draining: its first capsule has passed already, the capsules are relayed
   * untouched), and the session is closed with closeReason once its last stream ended. The
   * relay sends the Pylon's connection GOAWAY itself.
   */
  drain (closeReason: string): void {
    if (this.#finished || this.#drainReason !== null) return
    this.#drainReason = closeReason
    this.ledger.beginDrain()
    // Nothing open: closed in the same breath, so no drain signal first.
    if (this.ledger.open === 0) {
      this.settleDrain()
      return
    }
    const capsule = encodeDrainCapsule()
    this.#toDownstream.inject(capsule)
    this.#toUpstream.inject(capsule)
    this.settleDrain()
  }

  /** @internal A draining session whose peer opens streams without end is closed at once. */
  closeDrainingNow (): void {
    this.#settleQueued = false
    if (this.#drainReason !== null && !this.#finished) this.close(0, this.#drainReason, 'completed')
  }

  /** @internal Closes a draining session once none of its streams is open. */
  settleDrain (): void {
    this.#settleQueued = false
    if (this.#drainReason === null || this.#finished || this.ledger.open > 0) return
    this.close(0, this.#drainReason, 'completed')
  }

  #onStreamCapsule (from: Side, kind: WtStreamCapsuleKind, id: number): void {
    if (this.ledger.onCapsule(from, kind, id) === 'refuse') {
      if (++this.#refusals > this.#maxRefusals) {
        this.#onRefused?.(from)
        // Closed from the next turn, not from inside the pump's advance (a close touches both pumps).
        if (!this.#settleQueued) {
          this.#settleQueued = true
          setImmediate(onCloseNowTick, this)
        }
        return
      }
      const refusal = encodeStreamRefusal(id, STREAM_REFUSALS.draining.code)
      this.#toDownstream.inject(refusal)
      this.#toUpstream.inject(refusal)
      this.#onRefused?.(from)
    }
    // Not from inside the pump's advance: a close touches both pumps.
    if (this.#drainReason !== null && this.ledger.open === 0 && !this.#settleQueued) {
      this.#settleQueued = true
      setImmediate(onSettleTick, this)
    }
  }

  /** Closes the session on both legs with a close capsule (code, reason); `end` is the outcome counted. */
  close (code: number, reason: string, end: BridgeEnd): void {
    if (this.#finished) return
    this.#end ??= end
    const capsule = encodeCloseCapsule(code, reason)
    this.#toUpstream.beginClose(capsule)
    this.#toDownstream.beginClose(capsule)
    this.#armCloseTimer()
  }

  /** Called when either leg's stream closed. */
  onLegClosed (leg: Leg): void {
    if (this.#finished) return
    const other = leg === this.downstream ? this.upstream : this.downstream
    const from = leg[kReadPump] as Pump
    const into = leg[kWritePump] as Pump
    into.done = true
    // Whatever the other side still sends has nowhere to go: read and drop it.
    if (other.isPaused()) other.resume()
    if (other.closed || other.destroyed) {
      this.#finish()
      return
    }
    const clean = from.ended || this.#toUpstream.cursor.closeSeen || this.#toDownstream.cursor.closeSeen
    if (clean) {
      this.#end ??= 'completed'
      from.finish(encodeCloseCapsule(0, ''))
    } else {
      this.#end ??= 'relay_error'
      // A reset code is HTTP/2's (CANCEL for a lost connection), not the application's.
      from.finish(encodeCloseCapsule(0, WEBTRANSPORT_CLOSE_REASONS[leg === this.downstream ? 'downstream_aborted' : 'upstream_aborted'].reason))
    }
    this.#armCloseTimer()
  }

  /** Resets whatever is still open (the close grace ran out, or the relay is going away). */
  destroy (): void {
    if (this.#finished) return
    this.#end ??= 'relay_error'
    for (const leg of [this.downstream, this.upstream]) {
      if (!leg.closed && !leg.destroyed) leg.close(constants.NGHTTP2_CANCEL)
    }
    if (!this.upstreamSession.destroyed) this.upstreamSession.destroy()
    // A stream whose session is gone may not emit 'close' again; finish here.
    this.#finish()
  }

  /** Keep-alive: PINGs both legs' connections; an answer counts as a sign of life. */
  ping (): void {
    this.lastPing = this.clock.now
    // Not sent on a session that is closing or gone; a peer that stops answering is the idle timeout's.
    if (this.#onDownstreamPing !== null && this.downstreamSession !== undefined) pingIfOpen(this.downstreamSession, this.#onDownstreamPing)
    if (this.#onUpstreamPing !== null) pingIfOpen(this.upstreamSession, this.#onUpstreamPing)
  }

  /** Adds the bytes forwarded since the last call to the metric. */
  flushBytes (): void {
    for (const pump of [this.#toUpstream, this.#toDownstream]) {
      if (pump.unflushed === 0) continue
      this.#metrics.bridgedBytes.labels(pump.direction).inc(pump.unflushed)
      pump.unflushed = 0
    }
  }

  #armCloseTimer (): void {
    if (this.closeTimer === null && !this.#finished) {
      this.closeTimer = setTimeout(onCloseTimeout, CLOSE_GRACE_MS, this)
      this.closeTimer.unref()
    }
  }

  #finish (): void {
    if (this.#finished) return
    this.#finished = true
    if (this.closeTimer !== null) {
      clearTimeout(this.closeTimer)
      this.closeTimer = null
    }
    this.flushBytes()
    // One session per upstream connection: GOAWAY once its stream is gone.
    if (!this.upstreamSession.closed && !this.upstreamSession.destroyed) this.upstreamSession.close()
    this.#onEnd(this, this.#end ?? 'completed')
  }
}

