/**
 * Snapshot divergence between router replicas (SPEC §10). Every --peer-check-interval-ms the
 * checker reads each peer's /debug/snapshot and compares its digest with ours (the digest
 * depends only on the target set, so replicas that agree have equal digests). A peer whose
 * digest has differed for at least --peer-divergence-grace-ms is divergent: it advertises a
 * different Stargate set to Pylons, e.g. because its watch of the API server is cut off.
 *
 * Rules (nextPeerState, pure; each one is a test):
 * - equal digest: not differing, not divergent.
 * - different digest: differing since the first check that saw it (kept while it lasts);
 *   divergent once `now - differingSince >= grace`.
 * - a failed check (unreachable, timeout, HTTP error, garbage) is an error, never
 *   divergence: the peer is not divergent until a check succeeds again. What was last seen
 *   and since when it differs are kept, so a peer that still differs after an error is
 *   divergent at once if the grace period has passed meanwhile.
 *
 * Divergence is evaluated at each check, so it is reported within grace + one interval.
 * Rounds do not overlap: the next starts an interval after the previous one started, or at
 * once if it took longer.
 */
import type { SnapshotReader } from './types.ts'
import type { Peer, PeerSet } from './peers.ts'
import { PeerStates } from './peer-states.ts'
import type { PeerSnapshotResult } from './peer-snapshot-fetch.ts'
import type { PeerCheckErrorReason, PeerMetrics } from './peer-metrics.ts'
import type { Logger } from '../log.ts'

export interface PeerCheckError {
  readonly reason: PeerCheckErrorReason
  readonly message: string
  readonly at: number
}

export interface PeerCheckState {
  /** What the last successful check saw; null before one. */
  readonly initialized: boolean | null
  readonly generation: number | null
  readonly digest: string | null
  readonly checkedAt: number | null
  /** When the digest was first seen to differ from ours, while it keeps differing. */
  readonly differingSince: number | null
  readonly divergent: boolean
  readonly lastError: PeerCheckError | null
  /** Failed checks since the last successful one. */
  readonly consecutiveErrors: number
}

export const INITIAL_PEER_STATE: PeerCheckState = {
  initialized: null,
  generation: null,
  digest: null,
  checkedAt: null,
  differingSince: null,
  divergent: false,
  lastError: null,
  consecutiveErrors: 0,
}

/** Pure: a peer's state after one check at `now`, given our digest at that moment. */
export function nextPeerState (previous: PeerCheckState, result: PeerSnapshotResult, ourDigest: string, now: number, graceMs: number): PeerCheckState {
  if (!result.ok) {
    return {
      ...previous,
      divergent: false,
      lastError: { reason: result.reason, message: result.message, at: now },
      consecutiveErrors: previous.consecutiveErrors + 1,
    }
  }
  const { snapshot } = result
  const differingSince = snapshot.digest === ourDigest ? null : (previous.differingSince ?? now)
  return {
    initialized: snapshot.initialized,
    generation: snapshot.generation,
    digest: snapshot.digest,
    checkedAt: now,
    differingSince,
    divergent: differingSince !== null && now - differingSince >= graceMs,
    lastError: previous.lastError,
    consecutiveErrors: 0,
  }
}

export interface PeerReport {
  readonly id: string
  readonly address: string
  readonly port: number
  readonly initialized: boolean | null
  readonly generation: number | null
  readonly digest: string | null
  readonly checkedAt: string | null
  readonly differingSince: string | null
  readonly divergent: boolean
  readonly lastError: { readonly reason: PeerCheckErrorReason, readonly message: string, readonly at: string } | null
  readonly consecutiveErrors: number
}

export interface PeersReport {
  readonly ours: { readonly initialized: boolean, readonly generation: number, readonly digest: string }
  readonly checkIntervalMs: number
  readonly divergenceGraceMs: number
  readonly divergent: number
  /** Sorted by id. */
  readonly peers: readonly PeerReport[]
}

export interface PeerDivergenceCheckerOptions {
  readonly peers: PeerSet
  readonly snapshot: SnapshotReader
  readonly fetchSnapshot: (peer: Peer) => Promise<PeerSnapshotResult>
  readonly intervalMs: number
  readonly graceMs: number
  readonly metrics: PeerMetrics
  readonly logger: Logger
  readonly now?: () => number
}

function iso (ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString()
}

export class PeerDivergenceChecker {
  readonly #options: PeerDivergenceCheckerOptions
  readonly #now: () => number
  /** A state for exactly the peers in the set. */
  readonly #states: PeerStates<PeerCheckState>
  #timer: NodeJS.Timeout | null = null
  #round: Promise<void> | null = null
  #closed: Promise<void> | null = null

  constructor (options: PeerDivergenceCheckerOptions) {
    this.#options = options
    this.#now = options.now ?? Date.now
    this.#states = new PeerStates(options.peers, INITIAL_PEER_STATE, () => { this.#onPeerChange() })
  }

  /** Checks every peer now, then every interval. */
  start (): void {
    if (this.#closed !== null || this.#timer !== null || this.#round !== null) return
    this.#schedule(0)
  }

  /** One round over the current peers; concurrent calls share the round in progress. */
  checkNow (): Promise<void> {
    this.#round ??= this.#checkAll().finally(() => { this.#round = null })
    return this.#round
  }

  report (): PeersReport {
    const ours = this.#options.snapshot.current()
    const peers: PeerReport[] = []
    let divergent = 0
    for (const peer of this.#options.peers.peers()) {
      const state = this.#states.get(peer.id)
      if (state.divergent) divergent++
      peers.push({
        id: peer.id,
        address: peer.address,
        port: peer.port,
        initialized: state.initialized,
        generation: state.generation,
        digest: state.digest,
        checkedAt: iso(state.checkedAt),
        differingSince: iso(state.differingSince),
        divergent: state.divergent,
        lastError: state.lastError === null ? null : { reason: state.lastError.reason, message: state.lastError.message, at: new Date(state.lastError.at).toISOString() },
        consecutiveErrors: state.consecutiveErrors,
      })
    }
    return {
      ours: { initialized: ours.initialized, generation: ours.generation, digest: ours.digest },
      checkIntervalMs: this.#options.intervalMs,
      divergenceGraceMs: this.#options.graceMs,
      divergent,
      peers,
    }
  }

  /** Stops checking; waits for the round in progress (its fetches are the caller's to abort). Idempotent. */
  close (): Promise<void> {
    this.#closed ??= (async () => {
      this.#states.close()
      if (this.#timer !== null) clearTimeout(this.#timer)
      this.#timer = null
      await this.#round
    })()
    return this.#closed
  }

  #schedule (delayMs: number): void {
    this.#timer = setTimeout(() => {
      this.#timer = null
      const started = this.#now()
      void this.checkNow().then(() => {
        if (this.#closed === null) this.#schedule(Math.max(0, this.#options.intervalMs - (this.#now() - started)))
      })
    }, delayMs)
    this.#timer.unref()
  }

  async #checkAll (): Promise<void> {
    const peers = this.#options.peers.peers()
    await Promise.all(peers.map(async (peer) => {
      const result = await this.#options.fetchSnapshot(peer).catch((err: unknown): PeerSnapshotResult => ({ ok: false, reason: 'unreachable', message: String(err) }))
      this.#record(peer, result)
    }))
    this.#updateDivergentGauge()
  }

  #record (peer: Peer, result: PeerSnapshotResult): void {
    const current = this.#options.peers.get(peer.id)
    // The peer left, or moved, while we were asking: the answer is about someone else.
    if (this.#closed !== null || current === undefined || current.address !== peer.address || current.port !== peer.port) return
    const previous = this.#states.get(peer.id)
    const ours = this.#options.snapshot.current()
    const next = nextPeerState(previous, result, ours.digest, this.#now(), this.#options.graceMs)
    this.#states.set(peer.id, next)
    this.#logTransition(peer, previous, next, ours.digest)
  }

  #logTransition (peer: Peer, previous: PeerCheckState, next: PeerCheckState, ours: string): void {
    const { logger } = this.#options
    if (next.consecutiveErrors > 0) {
      const error = next.lastError
      if (error !== null) {
        this.#options.metrics.peerCheckErrors.labels(error.reason).inc()
        // Once per streak (and when the reason changes), not once per interval.
        if (previous.consecutiveErrors === 0 || previous.lastError?.reason !== error.reason) {
          logger.warn({ peer: peer.id, address: peer.address, port: peer.port, reason: error.reason, detail: error.message }, 'peer snapshot check failed')
        }
      }
      return
    }
    if (previous.consecutiveErrors > 0) logger.info({ peer: peer.id, failedChecks: previous.consecutiveErrors }, 'peer snapshot check succeeds again')
    if (next.divergent && !previous.divergent) {
      logger.warn({ peer: peer.id, address: peer.address, peerDigest: next.digest, peerGeneration: next.generation, ourDigest: ours, differingSince: iso(next.differingSince) },
        'peer advertises a different stargate set for longer than the grace period')
    } else if (!next.divergent && previous.divergent && next.differingSince === null) {
      logger.info({ peer: peer.id, digest: next.digest }, 'peer snapshot agrees with ours again')
    }
  }

  #onPeerChange (): void {
    this.#options.metrics.peers.set(this.#options.peers.size)
    this.#updateDivergentGauge()
  }

  #updateDivergentGauge (): void {
    let divergent = 0
    for (const state of this.#states.values()) if (state.divergent) divergent++
    this.#options.metrics.peerSnapshotDivergent.set(divergent)
  }
}
