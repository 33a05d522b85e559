/**
 * Work relayed to a pod follows the snapshot (SPEC §3 rule 2, §5, §7): when its pod starts
 * terminating or leaves the Service, it ends after --drain-grace-ms unless the pod comes back
 * first; a pod that only turns unready keeps it (a flapping readiness probe must not cut every
 * Pylon at once). Registration streams and the tunnels of all three relays (raw QUIC,
 * WebTransport over HTTP/3 and over HTTP/2) follow their pods here.
 *
 * What a pod's move means depends on what is bound to its address: a registration stream rides
 * the pool's session, which re-dials the pod where it is now ('identity'); a tunnel's pod leg is
 * one connection to one address and quic port, so a pod that moved is gone for it ('address').
 *
 * The snapshot is walked per pod followed, not per stream or tunnel; one timer per item while
 * its pod is away.
 */
import { presentTarget, type PodTarget, type SnapshotReader, type TargetSnapshot } from '../discovery/types.ts'

export interface PodDrainOptions<T> {
  readonly snapshot: SnapshotReader
  /** --drain-grace-ms */
  readonly graceMs: number
  /** 'identity': the pod counts as present wherever it is; 'address': only at the address and quic port it was followed at. */
  readonly bound: 'identity' | 'address'
  /** The grace ran out: end it (it is no longer followed). */
  readonly onDrained: (item: T) => void
}

interface Followed {
  readonly identity: string
  readonly address: string
  readonly quicPort: number
  timer: NodeJS.Timeout | null
}

export class PodDrain<T> {
  readonly #options: PodDrainOptions<T>
  readonly #followed = new Map<T, Followed>()
  /** Followed items by pod identity. */
  readonly #byIdentity = new Map<string, Set<T>>()
  readonly #unsubscribe: () => void

  constructor (options: PodDrainOptions<T>) {
    this.#options = options
    this.#unsubscribe = options.snapshot.subscribe((snapshot) => { this.#onSnapshot(snapshot) })
  }

  /** Items followed now. */
  get size (): number {
    return this.#followed.size
  }

  /** Starts following an item relayed to target (one followed already moves to it). */
  follow (item: T, target: PodTarget): void {
    this.forget(item)
    this.#followed.set(item, { identity: target.identity, address: target.address, quicPort: target.quicPort, timer: null })
    let set = this.#byIdentity.get(target.identity)
    if (set === undefined) {
      set = new Set()
      this.#byIdentity.set(target.identity, set)
    }
    set.add(item)
  }

  /** Stops following an item (it ended); a pending drain is cancelled. */
  forget (item: T): void {
    const followed = this.#followed.get(item)
    if (followed === undefined) return
    if (followed.timer !== null) clearTimeout(followed.timer)
    this.#followed.delete(item)
    const set = this.#byIdentity.get(followed.identity)
    set?.delete(item)
    if (set !== undefined && set.size === 0) this.#byIdentity.delete(followed.identity)
  }

  /** Stops following the snapshot and cancels every pending drain (shutdown). */
  dispose (): void {
    this.#unsubscribe()
    for (const followed of this.#followed.values()) if (followed.timer !== null) clearTimeout(followed.timer)
    this.#followed.clear()
    this.#byIdentity.clear()
  }

  #onSnapshot (snapshot: TargetSnapshot): void {
    if (!snapshot.initialized) return
    const byAddress = this.#options.bound === 'address'
    for (const [identity, set] of this.#byIdentity) {
      // Unready but not terminating keeps its work (presentTarget: a target, or unready).
      const now = presentTarget(snapshot, identity)
      for (const item of set) {
        const followed = this.#followed.get(item) as Followed
        const present = now !== undefined && (!byAddress || (now.address === followed.address && now.quicPort === followed.quicPort))
        if (present && followed.timer !== null) {
          clearTimeout(followed.timer)
          followed.timer = null
        } else if (!present && followed.timer === null) {
          followed.timer = setTimeout(PodDrain.#onGrace<T>, this.#options.graceMs, this, item)
          followed.timer.unref()
        }
      }
    }
  }

  static #onGrace<T> (drain: PodDrain<T>, item: T): void {
    drain.forget(item)
    drain.#options.onDrained(item)
  }
}
