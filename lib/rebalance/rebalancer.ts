/**
 * The replica-balancing loop (SPEC §10, `--rebalance`): every --rebalance-interval-ms it reads
 * every peer's `/debug/load` and this replica's own load, runs decide() (decide.ts: the band,
 * the dwell, the cap, the fail safe), and asks the ConnectionMover to move that many
 * connections of each kind, oldest first. It moves only its own connections; peers run the
 * same loop on the same figures.
 *
 *   every interval ──▶ read each peer's /debug/load (in parallel, bounded) ──▶ own load
 *         ▲                 known / stale / unknown (or draining)                 │
 *         │                                                                       ▼
 *   next round an interval          mover.movable(kind).slice(0, n) ◀── decide(): n per kind
 *   after this one started                 .move(reason)                  + next dwell
 *
 * - Settling: the first round after start, and every round during or after which the peer
 *   set changed (a peer joined, left or moved), moves nothing (decide's `settling`).
 * - A peer is `known` when this round read it, `stale` when this round failed but an earlier
 *   one succeeded, `unknown` before any success. A peer that reports it is shutting down
 *   (`draining`) counts as unknown: its connections are leaving and its figure is no band.
 * - Rounds do not overlap; the next starts an interval after the previous one started, or at
 *   once if it took longer (a read is bounded by --peer-check-timeout-ms, shorter than the
 *   interval).
 * - Each round sets rebalance_peer_mean and counts rebalance_rounds_total{result}; a round that
 *   moves something counts rebalance_moves_total{kind,reason} and logs one line.
 */
import type { Peer, PeerSet } from '../discovery/peers.ts'
import { PeerStates } from '../discovery/peer-states.ts'
import type { PeerCheckErrorReason } from '../discovery/peer-metrics.ts'
import type { Logger } from '../log.ts'
import { decide, NO_DWELL, type Decision, type Dwell, type KindDecision, type MoveReason, type PeerFreshness, type PeerLoadView, type RoundResult } from './decide.ts'
import { PYLON_LOAD_KINDS, type PylonLoad, type PylonLoadKind, type PylonLoadSource } from './load.ts'
import type { PeerLoadResult } from './load-report.ts'
import type { RebalanceMetrics } from './rebalance-metrics.ts'

/** One connection the balancer may move. */
export interface MovableConnection {
  /** When it opened (ms, any clock common to the list): the oldest move first. */
  readonly openedAt: number
  /**
   * Starts the per-connection drain (SPEC §11): registrations end with UNAVAILABLE and the
   * connection gets GOAWAY; a tunnel takes no new streams, finishes its open ones, then closes.
   * Returns at once; must hold when the connection is already closing or gone.
   */
  move (reason: MoveReason): void
}

/** The port to the connections themselves (the drain registry in production). */
export interface ConnectionMover {
  /** Live connections of a kind that are not being moved already, oldest first. */
  movable (kind: PylonLoadKind): readonly MovableConnection[]
}

export interface Timers {
  setTimeout (callback: () => void, ms: number): unknown
  clearTimeout (handle: unknown): void
}

const REAL_TIMERS: Timers = {
  setTimeout: (callback, ms) => setTimeout(callback, ms).unref(),
  clearTimeout: (handle) => { clearTimeout(handle as NodeJS.Timeout) },
}

export interface RebalancerOptions {
  readonly peers: PeerSet
  readonly load: PylonLoadSource
  readonly fetchLoad: (peer: Peer) => Promise<PeerLoadResult>
  readonly mover: ConnectionMover
  /** --rebalance-tolerance */
  readonly tolerance: number
  /** --rebalance-interval-ms */
  readonly intervalMs: number
  /** --rebalance-max-moves-per-interval (0: a share of own connections) */
  readonly maxMovesPerInterval: number
  readonly metrics: RebalanceMetrics
  readonly logger: Logger
  readonly now?: () => number
  readonly timers?: Timers
}

interface PeerLoadState {
  /** The last load read successfully, null before one. */
  readonly load: PylonLoad | null
  readonly freshness: PeerFreshness
  readonly draining: boolean
  readonly readAt: number | null
  readonly lastError: { readonly reason: PeerCheckErrorReason, readonly message: string, readonly at: number } | null
  readonly consecutiveErrors: number
}

const NEW_PEER: PeerLoadState = { load: null, freshness: 'unknown', draining: false, readAt: null, lastError: null, consecutiveErrors: 0 }

/** Pure: a peer's state after one read at `now`. */
export function nextPeerLoadState (previous: PeerLoadState, result: PeerLoadResult, now: number): PeerLoadState {
  if (result.ok) {
    // Shutting down: what it reports is leaving, so it counts as unknown (nothing moves).
    const freshness: PeerFreshness = result.load.draining ? 'unknown' : 'known'
    return { load: result.load.connections, freshness, draining: result.load.draining, readAt: now, lastError: previous.lastError, consecutiveErrors: 0 }
  }
  return {
    ...previous,
    freshness: previous.load === null ? 'unknown' : 'stale',
    lastError: { reason: result.reason, message: result.message, at: now },
    consecutiveErrors: previous.consecutiveErrors + 1,
  }
}

export interface PeerLoadReport {
  readonly id: string
  readonly freshness: PeerFreshness
  readonly draining: boolean
  readonly connections: PylonLoad | null
  readonly readAt: string | null
  readonly lastError: { readonly reason: PeerCheckErrorReason, readonly message: string, readonly at: string } | null
}

export interface RoundReport {
  readonly at: string
  readonly result: RoundResult
  readonly own: PylonLoad
  /** Connections asked to move, by kind. */
  readonly moved: PylonLoad
  readonly dwell: Dwell
  readonly kinds: { readonly [K in PylonLoadKind]: KindDecision }
  /** Sorted by id. */
  readonly peers: readonly PeerLoadReport[]
}

export interface RebalanceReport {
  readonly intervalMs: number
  readonly tolerance: number
  readonly maxMovesPerInterval: number
  readonly lastRound: RoundReport | null
}

function iso (ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString()
}

function round2 (n: number): number {
  return Math.round(n * 100) / 100
}

export class Rebalancer {
  readonly #options: RebalancerOptions
  readonly #now: () => number
  readonly #timers: Timers
  /** What the last reads said of every peer in the set. */
  readonly #states: PeerStates<PeerLoadState>
  #dwell: Dwell = NO_DWELL
  /** The peer set changed since the last round began (true until the first round). */
  #peersChanged = true
  #lastRound: RoundReport | null = null
  #timer: unknown = null
  #round: Promise<RoundReport | null> | null = null
  #closed: Promise<void> | null = null

  constructor (options: RebalancerOptions) {
    this.#options = options
    this.#now = options.now ?? Date.now
    this.#timers = options.timers ?? REAL_TIMERS
    // Any change (a peer joined, left, or moved to a new address: its figure is stale until
    // read there) settles the next round.
    this.#states = new PeerStates(options.peers, NEW_PEER, () => { this.#peersChanged = true })
  }

  /** The first round an interval from now (it settles), then one every interval. */
  start (): void {
    if (this.#closed !== null || this.#timer !== null || this.#round !== null) return
    this.#schedule(this.#options.intervalMs)
  }

  /** One round now; concurrent calls share the round in progress. Null once closed. */
  runRound (): Promise<RoundReport | null> {
    this.#round ??= this.#runRound().finally(() => { this.#round = null })
    return this.#round
  }

  report (): RebalanceReport {
    const { intervalMs, tolerance, maxMovesPerInterval } = this.#options
    return { intervalMs, tolerance, maxMovesPerInterval, lastRound: this.#lastRound }
  }

  /** Stops the loop and waits for the round in progress (moves already asked for go on). Idempotent. */
  close (): Promise<void> {
    this.#closed ??= (async () => {
      this.#states.close()
      if (this.#timer !== null) this.#timers.clearTimeout(this.#timer)
      this.#timer = null
      await this.#round
    })()
    return this.#closed
  }

  #schedule (delayMs: number): void {
    this.#timer = this.#timers.setTimeout(() => {
      this.#timer = null
      const started = this.#now()
      void this.runRound().then(() => {
        if (this.#closed === null) this.#schedule(Math.max(0, this.#options.intervalMs - (this.#now() - started)))
      })
    }, delayMs)
  }

  async #runRound (): Promise<RoundReport | null> {
    if (this.#closed !== null) return null
    let settling = this.#peersChanged
    this.#peersChanged = false
    const peers = this.#options.peers.peers()
    const results = await Promise.all(peers.map((peer) => this.#options.fetchLoad(peer).catch((err: unknown): PeerLoadResult => ({ ok: false, reason: 'unreachable', message: String(err) }))))
    if (this.#closed !== null) return null
    const now = this.#now()
    peers.forEach((peer, i) => { this.#record(peer, results[i] as PeerLoadResult, now) })
    // A change while we were reading: the figures may not belong to one peer set.
    if (this.#peersChanged) settling = true
    const own = this.#options.load.load()
    const views: PeerLoadView[] = []
    for (const peer of this.#options.peers.peers()) {
      const state = this.#states.get(peer.id)
      views.push({ id: peer.id, freshness: state.freshness, load: state.load })
    }
    const decision = decide({
      own,
      peers: views,
      tolerance: this.#options.tolerance,
      dwell: this.#dwell,
      settling,
      maxMovesPerInterval: this.#options.maxMovesPerInterval,
    })
    this.#dwell = decision.dwell
    const moved = this.#move(decision)
    const report = this.#report(now, own, decision, moved)
    this.#lastRound = report
    this.#account(report, decision)
    return report
  }

  /** Asks the mover for the oldest connections of each kind; returns how many were asked to move. */
  #move (decision: Decision): PylonLoad {
    const moved: Record<PylonLoadKind, number> = { registration: 0, raw_quic: 0, webtransport: 0 }
    for (const kind of PYLON_LOAD_KINDS) {
      const wanted = decision.moves[kind]
      const reason = decision.kinds[kind].reason
      if (wanted === 0 || reason === null) continue
      const candidates = this.#options.mover.movable(kind)
      for (let i = 0; i < candidates.length && moved[kind] < wanted; i++) {
        const candidate = candidates[i] as MovableConnection
        try {
          candidate.move(reason)
          moved[kind]++
        } catch (err) {
          // One connection that cannot be moved (it closed meanwhile) does not stop the round.
          this.#options.logger.warn({ err, kind }, 'rebalancing: a connection could not be moved')
        }
      }
    }
    return moved
  }

  #report (now: number, own: PylonLoad, decision: Decision, moved: PylonLoad): RoundReport {
    const peers: PeerLoadReport[] = []
    for (const peer of this.#options.peers.peers()) {
      const state = this.#states.get(peer.id)
      const error = state.lastError
      peers.push({
        id: peer.id,
        freshness: state.freshness,
        draining: state.draining,
        connections: state.load,
        readAt: iso(state.readAt),
        lastError: error === null ? null : { reason: error.reason, message: error.message, at: new Date(error.at).toISOString() },
      })
    }
    return { at: new Date(now).toISOString(), result: decision.result, own, moved, dwell: decision.dwell, kinds: decision.kinds, peers }
  }

  #account (report: RoundReport, decision: Decision): void {
    const { metrics, logger } = this.#options
    metrics.rebalanceRounds.labels(report.result).inc()
    let any = false
    for (const kind of PYLON_LOAD_KINDS) {
      metrics.rebalancePeerMean.labels(kind).set(decision.kinds[kind].mean)
      const reason = decision.kinds[kind].reason
      if (report.moved[kind] > 0 && reason !== null) {
        metrics.rebalanceMoves.labels(kind, reason).inc(report.moved[kind])
        any = true
      }
    }
    if (!any) return
    const kinds: Record<string, unknown> = {}
    for (const kind of PYLON_LOAD_KINDS) {
      const k = decision.kinds[kind]
      if (report.moved[kind] > 0) kinds[kind] = { moved: report.moved[kind], own: report.own[kind], mean: round2(k.mean), band: [round2(k.low), round2(k.high)], reason: k.reason }
    }
    logger.info({ kinds, peers: report.peers.length }, 'rebalancing: moving pylon connections to even out the replicas')
  }

  #record (peer: Peer, result: PeerLoadResult, now: number): void {
    const current = this.#options.peers.get(peer.id)
    // The peer left, or moved, while we were asking: the answer is about someone else.
    if (current === undefined || current.address !== peer.address || current.port !== peer.port) return
    const previous = this.#states.get(peer.id)
    const next = nextPeerLoadState(previous, result, now)
    this.#states.set(peer.id, next)
    const { logger, metrics } = this.#options
    if (!result.ok) {
      metrics.rebalancePeerLoadErrors.labels(result.reason).inc()
      // Once per streak (and when the reason changes), not once per interval.
      if (previous.consecutiveErrors === 0 || previous.lastError?.reason !== result.reason) {
        logger.warn({ peer: peer.id, address: peer.address, port: peer.port, reason: result.reason, detail: result.message }, 'rebalancing: cannot read a peer\'s load; nothing moves until it can')
      }
    } else if (previous.consecutiveErrors > 0) {
      logger.info({ peer: peer.id, failedReads: previous.consecutiveErrors }, 'rebalancing: peer load readable again')
    }
  }
}
