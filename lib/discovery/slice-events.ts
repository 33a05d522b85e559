/**
 * EndpointSlice events folded into a SliceIndex (SPEC §3 rule 5): the list / upsert / delete
 * bookkeeping shared by the Stargate targets (slice-targets.ts) and the router peers
 * (peers-kubernetes.ts). Each supplies how a slice is parsed and what becomes of the
 * identities whose winner may have changed; a list is handed over as one batch, so a relist
 * is never seen half-applied. No I/O.
 */
import type { EndpointSliceConsumer } from './endpoint-slice-watch.ts'
import { SliceIndex, type SliceObservation } from './slice-index.ts'

/** namespace/name and resourceVersion of an EndpointSlice, or null when it has no name. */
function sliceKey (slice: unknown): { key: string, version: string } | null {
  const metadata = (slice as { metadata?: { namespace?: unknown, name?: unknown, resourceVersion?: unknown } } | null)?.metadata
  if (typeof metadata?.name !== 'string') return null
  const namespace = typeof metadata.namespace === 'string' ? metadata.namespace : ''
  return { key: `${namespace}/${metadata.name}`, version: typeof metadata.resourceVersion === 'string' ? metadata.resourceVersion : '' }
}

export interface IndexedSliceEventsOptions<T> {
  /** Parses one named slice (key: namespace/name) and reports what it skipped. */
  readonly parse: (slice: unknown, key: string) => { readonly observations: readonly SliceObservation<T>[] }
  /** A slice without a name: it cannot be indexed. */
  readonly onUnnamed: () => void
  /**
   * After every event: the identities whose winner may have changed (read each with
   * index.winner; the list may be empty or repeat one), and whether the event was a full list.
   */
  readonly onChanged: (identities: readonly string[], index: SliceIndex<T>, listed: boolean) => void
}

export class IndexedSliceEvents<T> implements EndpointSliceConsumer {
  readonly #index = new SliceIndex<T>()
  readonly #options: IndexedSliceEventsOptions<T>

  constructor (options: IndexedSliceEventsOptions<T>) {
    this.#options = options
  }

  onList (items: readonly unknown[]): void {
    const seen = new Set<string>()
    const affected: string[] = []
    for (const slice of items) {
      const id = sliceKey(slice)
      if (id !== null) seen.add(id.key)
      for (const identity of this.#upsert(slice)) affected.push(identity)
    }
    for (const key of [...this.#index.keys()]) {
      if (!seen.has(key)) for (const identity of this.#index.delete(key)) affected.push(identity)
    }
    this.#options.onChanged(affected, this.#index, true)
  }

  onUpsert (slice: unknown): void {
    this.#options.onChanged(this.#upsert(slice), this.#index, false)
  }

  onDelete (slice: unknown): void {
    const id = sliceKey(slice)
    if (id !== null) this.#options.onChanged(this.#index.delete(id.key), this.#index, false)
  }

  #upsert (slice: unknown): string[] {
    const id = sliceKey(slice)
    if (id === null) {
      this.#options.onUnnamed()
      return []
    }
    if (this.#index.has(id.key, id.version)) return []
    return this.#index.upsert(id.key, id.version, this.#options.parse(slice, id.key))
  }
}
