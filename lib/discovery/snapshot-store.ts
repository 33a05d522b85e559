/**
 * The publisher between discovery sources and everything that reads the snapshot. Sources
 * stage target changes (any number, any order) and the store publishes them as one new
 * snapshot at the end of the current tick, so a relist whose events arrive synchronously is
 * never seen half-applied. Only discovery sources call stage/markInitialized/flush; readers
 * use the SnapshotReader side.
 */
import { SnapshotBuilder, UNINITIALIZED_SNAPSHOT } from './snapshot.ts'
import type { PodEndpoint, PodTarget, SnapshotListener, SnapshotReader, TargetSnapshot } from './types.ts'

export class SnapshotStore implements SnapshotReader {
  #current: TargetSnapshot = UNINITIALIZED_SNAPSHOT
  readonly #listeners = new Set<SnapshotListener>()
  readonly #builder = new SnapshotBuilder()
  #pending = new Map<string, PodEndpoint | null>()
  #initialize = false
  #scheduled = false
  readonly #onListenerError: (err: unknown) => void

  constructor (options: { onListenerError?: (err: unknown) => void } = {}) {
    this.#onListenerError = options.onListenerError ?? ((err) => { queueMicrotask(() => { throw err }) })
  }

  current (): TargetSnapshot {
    return this.#current
  }

  subscribe (listener: SnapshotListener): () => void {
    this.#listeners.add(listener)
    this.#call(listener, this.#current)
    return () => { this.#listeners.delete(listener) }
  }

  /**
   * Records that identity now has this target (null: the pod is gone or terminating), ready
   * or present but not ready (SPEC §3 rule 2). Published at the end of the tick.
   */
  stage (identity: string, target: PodTarget | null, state: 'ready' | 'unready' = 'ready'): void {
    this.stageEndpoint(identity, target === null ? null : { target, ready: state === 'ready' })
  }

  /** stage() for a source that already holds the endpoint (the EndpointSlice parser's). */
  stageEndpoint (identity: string, endpoint: PodEndpoint | null): void {
    this.#pending.set(identity, endpoint)
    this.#schedule()
  }

  /** The source has delivered a complete view; publish even if it is empty. */
  markInitialized (): void {
    if (this.#current.initialized) return
    this.#initialize = true
    this.#schedule()
  }

  /** Publishes staged changes now; returns whether a new snapshot was published. */
  flush (): boolean {
    this.#scheduled = false
    if (!this.#initialize && !this.#current.initialized) return false // keep staging until complete
    const changes = this.#pending
    this.#pending = new Map()
    this.#initialize = false
    const next = this.#builder.next(this.#current, changes)
    if (next === null) return false
    this.#current = next
    for (const listener of this.#listeners) this.#call(listener, next)
    return true
  }

  #schedule (): void {
    if (this.#scheduled) return
    this.#scheduled = true
    queueMicrotask(() => { if (this.#scheduled) this.flush() })
  }

  #call (listener: SnapshotListener, snapshot: TargetSnapshot): void {
    try {
      listener(snapshot)
    } catch (err) {
      this.#onListenerError(err)
    }
  }
}
