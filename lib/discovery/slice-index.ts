/**
 * SPEC §3 rule 5: one pod can sit in two EndpointSlices while the EndpointSlice controller
 * moves it; the copy from the most recently observed slice event wins. Each slice event gets
 * a sequence number from this index (slice names carry no order). Pure state, no I/O: the
 * adapter feeds slice events in, and gets back the identities whose winner may have changed.
 * Generic in what a ready endpoint becomes: Stargate targets, or router peers (peers.ts).
 */
import type { PodEndpoint } from './types.ts'

/** What one slice says about one identity: a value, or null when it takes no part (not ready, terminating). */
export interface SliceObservation<T> {
  readonly identity: string
  readonly target: T | null
}

interface SliceEntry<T> {
  readonly seq: number
  readonly version: string
  readonly observations: ReadonlyMap<string, SliceObservation<T>>
}

export class SliceIndex<T = PodEndpoint> {
  #seq = 0
  readonly #slices = new Map<string, SliceEntry<T>>()
  /** identity -> keys of the slices that mention it (almost always one). */
  readonly #holders = new Map<string, string[]>()

  get size (): number {
    return this.#slices.size
  }

  /** True when this exact version of the slice is already applied (relists repeat them). */
  has (key: string, version: string): boolean {
    const entry = this.#slices.get(key)
    return entry !== undefined && version !== '' && entry.version === version
  }

  keys (): IterableIterator<string> {
    return this.#slices.keys()
  }

  /** Applies a slice observation; returns the identities whose winner must be re-read. */
  upsert (key: string, version: string, parsed: { readonly observations: readonly SliceObservation<T>[] }): string[] {
    const observations = new Map<string, SliceObservation<T>>()
    for (const observation of parsed.observations) observations.set(observation.identity, observation)
    const previous = this.#slices.get(key)
    this.#slices.set(key, { seq: ++this.#seq, version, observations })
    const affected: string[] = []
    if (previous !== undefined) {
      for (const identity of previous.observations.keys()) {
        if (!observations.has(identity)) {
          this.#removeHolder(identity, key)
          affected.push(identity)
        }
      }
    }
    for (const identity of observations.keys()) {
      if (previous === undefined || !previous.observations.has(identity)) this.#addHolder(identity, key)
      affected.push(identity)
    }
    return affected
  }

  delete (key: string): string[] {
    const previous = this.#slices.get(key)
    if (previous === undefined) return []
    this.#slices.delete(key)
    const affected: string[] = []
    for (const identity of previous.observations.keys()) {
      this.#removeHolder(identity, key)
      affected.push(identity)
    }
    return affected
  }

  /** The ready target of the most recently observed slice mentioning identity, if ready. */
  winner (identity: string): T | null {
    const holders = this.#holders.get(identity)
    if (holders === undefined) return null
    let best: SliceEntry<T> | undefined
    for (const key of holders) {
      const entry = this.#slices.get(key)
      if (entry !== undefined && (best === undefined || entry.seq > best.seq)) best = entry
    }
    return best?.observations.get(identity)?.target ?? null
  }

  #addHolder (identity: string, key: string): void {
    const holders = this.#holders.get(identity)
    if (holders === undefined) this.#holders.set(identity, [key])
    else holders.push(key)
  }

  #removeHolder (identity: string, key: string): void {
    const holders = this.#holders.get(identity)
    if (holders === undefined) return
    const at = holders.indexOf(key)
    if (at >= 0) holders.splice(at, 1)
    if (holders.length === 0) this.#holders.delete(identity)
  }
}
