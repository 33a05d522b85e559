/**
 * The replica-balancing decision (SPEC §10), pure: from this replica's load and its peers',
 * how many connections of each kind it moves this interval. Every replica runs it on the same
 * figures and moves only its own connections; nobody coordinates.
 *
 * Rules, per kind (each one is a row of test/unit/rebalance-decide.test.ts):
 * - mean = (own + every peer's load) / (1 + peers). band = mean ± w, w = tolerance × mean but
 *   never less than one connection: counts are whole numbers, so a spread of ±1 around a
 *   fractional mean (1/1/0 around 0.67) is as even as it gets and must never trigger a move.
 *   A perfectly even placement (every load floor or ceil of the mean) is therefore always
 *   inside the band: a balanced state stays put.
 * - A replica is outside when its load is above mean + w or below mean - w. The dwell of a
 *   kind counts the consecutive intervals in which some replica (this one or a peer) was
 *   outside. At DWELL_INTERVALS in a row the kind triggers: every replica above the mean moves
 *   floor(load - mean) connections, so it never ends below the mean, at most the per-interval
 *   cap. Both sides trigger: a replica below the band (one that just came up) starts the moves
 *   as much as one above it; with only "above" as the trigger, states like 12/12/6 (band
 *   8..12) never move and the new replica stays starved.
 * - After a trigger the dwell starts again from 0, on every replica: moved Pylons need a
 *   moment to re-dial and land, and until they have the mean undercounts them. Waiting two
 *   fresh intervals before the next moves keeps the replicas from moving again on figures
 *   that do not show the last moves yet (which would overshoot, then move back).
 * - Fail safe: nothing moves, and every dwell starts again, while any peer's load is unknown
 *   or stale, and in the first interval after start or after the peer set changed (settling).
 *
 * The cap: --rebalance-max-moves-per-interval per kind; 0 (the default) is AUTO_MOVE_SHARE of
 * this replica's connections of that kind, rounded up, so that no replica drops many Pylons at
 * once whatever the fleet's size.
 */
import { PYLON_LOAD_KINDS, type PylonLoad, type PylonLoadKind } from './load.ts'

/** Consecutive intervals outside the band before moves start. */
export const DWELL_INTERVALS = 2

/** With a cap of 0: the share of a replica's connections of one kind it may move per interval. */
export const AUTO_MOVE_SHARE = 0.1

/**
 * known: read in this interval. stale: the last read succeeded, this one did not (what it said
 * may no longer hold). unknown: never read since the peer joined the set.
 */
export type PeerFreshness = 'known' | 'stale' | 'unknown'

export interface PeerLoadView {
  readonly id: string
  readonly freshness: PeerFreshness
  /** The last load read; null before the first. Used only when freshness is known. */
  readonly load: PylonLoad | null
}

/** Consecutive intervals, per kind, in which some replica was outside the band. */
export type Dwell = { readonly [K in PylonLoadKind]: number }

export const NO_DWELL: Dwell = { registration: 0, raw_quic: 0, webtransport: 0 }

export interface DecideInput {
  readonly own: PylonLoad
  readonly peers: readonly PeerLoadView[]
  /** --rebalance-tolerance: the band's half-width as a fraction of the mean, 0 < t < 1. */
  readonly tolerance: number
  readonly dwell: Dwell
  /** The first interval after start or after a peer set change. */
  readonly settling: boolean
  /** --rebalance-max-moves-per-interval: per kind; 0 is AUTO_MOVE_SHARE of own connections. */
  readonly maxMovesPerInterval: number
}

/** Why moves of a kind started: some replica above the band, or (none above) some below it. */
export const MOVE_REASONS = ['above_band', 'below_band'] as const
export type MoveReason = typeof MOVE_REASONS[number]

/**
 * The interval as a whole, most telling first: settling, peer_load_unknown (fail safe),
 * moving (this replica moves), others_move (a kind triggered; this replica is not above the
 * mean), waiting (outside the band, dwell not reached), balanced.
 */
export const ROUND_RESULTS = ['settling', 'peer_load_unknown', 'moving', 'others_move', 'waiting', 'balanced'] as const
export type RoundResult = typeof ROUND_RESULTS[number]

export interface KindDecision {
  /** Over this replica and the peers whose load is known. */
  readonly mean: number
  readonly low: number
  readonly high: number
  /** Replicas (this one included) above and below the band. */
  readonly above: number
  readonly below: number
  /** Set when the kind triggered this interval. */
  readonly reason: MoveReason | null
  readonly moves: number
}

export interface Decision {
  readonly result: RoundResult
  readonly moves: PylonLoad
  /** To pass back as the next interval's dwell. */
  readonly dwell: Dwell
  readonly kinds: { readonly [K in PylonLoadKind]: KindDecision }
}

/** The most this replica may move of a kind holding `own` connections. */
export function moveCap (own: number, maxMovesPerInterval: number): number {
  return maxMovesPerInterval > 0 ? maxMovesPerInterval : Math.max(1, Math.ceil(own * AUTO_MOVE_SHARE))
}

function decideKind (kind: PylonLoadKind, input: DecideInput, known: readonly PylonLoad[], blocked: boolean): { decision: KindDecision, dwell: number } {
  const own = input.own[kind]
  let total = own
  for (const load of known) total += load[kind]
  const replicas = 1 + known.length
  const mean = total / replicas
  const halfWidth = Math.max(input.tolerance * mean, 1)
  const low = mean - halfWidth
  const high = mean + halfWidth
  let above = own > high ? 1 : 0
  let below = own < low ? 1 : 0
  for (const load of known) {
    if (load[kind] > high) above++
    else if (load[kind] < low) below++
  }
  const outside = above + below > 0
  const dwell = blocked || !outside ? 0 : input.dwell[kind] + 1
  if (dwell < DWELL_INTERVALS) return { decision: { mean, low, high, above, below, reason: null, moves: 0 }, dwell }
  // Whole numbers: floor((own * n - total) / n) is floor(own - mean) without rounding error.
  const excess = Math.max(0, Math.floor((own * replicas - total) / replicas))
  const moves = Math.min(excess, moveCap(own, input.maxMovesPerInterval))
  return { decision: { mean, low, high, above, below, reason: above > 0 ? 'above_band' : 'below_band', moves }, dwell: 0 }
}

export function decide (input: DecideInput): Decision {
  const known: PylonLoad[] = []
  let allKnown = true
  for (const peer of input.peers) {
    if (peer.freshness === 'known' && peer.load !== null) known.push(peer.load)
    else allKnown = false
  }
  const blocked = input.settling || !allKnown
  const moves: Record<PylonLoadKind, number> = { registration: 0, raw_quic: 0, webtransport: 0 }
  const dwell: Record<PylonLoadKind, number> = { registration: 0, raw_quic: 0, webtransport: 0 }
  const kinds = {} as Record<PylonLoadKind, KindDecision>
  let moving = false
  let triggered = false
  let waiting = false
  for (const kind of PYLON_LOAD_KINDS) {
    const { decision, dwell: next } = decideKind(kind, input, known, blocked)
    kinds[kind] = decision
    dwell[kind] = next
    moves[kind] = decision.moves
    if (decision.moves > 0) moving = true
    if (decision.reason !== null) triggered = true
    if (next > 0) waiting = true
  }
  const result: RoundResult = input.settling
    ? 'settling'
    : !allKnown ? 'peer_load_unknown' : moving ? 'moving' : triggered ? 'others_move' : waiting ? 'waiting' : 'balanced'
  return { result, moves, dwell, kinds }
}
