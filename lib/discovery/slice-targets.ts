/**
 * EndpointSlice events -> target changes (SPEC §3): each slice is parsed with rules 1–4,
 * merged by the slice index (rule 5), and the winner of every affected identity is staged in
 * the snapshot store (rule 6). A list replaces everything at once, so a relist is never seen
 * half-applied. No I/O: the Kubernetes adapter feeds it, and so does the snapshot benchmark.
 */
import type { EndpointSliceConsumer } from './endpoint-slice-watch.ts'
import { parseEndpointSlice, type SkipReason } from './endpoint-slice.ts'
import { SliceIndex } from './slice-index.ts'
import type { SnapshotStore } from './snapshot-store.ts'
import type { PortNames } from './types.ts'

/** namespace/name and resourceVersion of an EndpointSlice, or null when it has no name. */
export function sliceKey (slice: unknown): { key: string, version: string } | null {
  const metadata = (slice as { metadata?: { namespace?: unknown, name?: unknown, resourceVersion?: unknown } } | null)?.metadata
  if (typeof metadata?.name !== 'string') return null
  const namespace = typeof metadata.namespace === 'string' ? metadata.namespace : ''
  return { key: `${namespace}/${metadata.name}`, version: typeof metadata.resourceVersion === 'string' ? metadata.resourceVersion : '' }
}

export interface SliceTargetsOptions {
  readonly store: SnapshotStore
  readonly ports: PortNames
  /** Reported once per slice event that skipped something (metrics and a log line). */
  readonly onSkipped?: (slice: string, reasons: readonly SkipReason[]) => void
}

export class SliceTargets implements EndpointSliceConsumer {
  readonly #index = new SliceIndex()
  readonly #options: SliceTargetsOptions

  constructor (options: SliceTargetsOptions) {
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
    this.#stage(affected)
    this.#options.store.markInitialized()
  }

  onUpsert (slice: unknown): void {
    this.#stage(this.#upsert(slice))
  }

  onDelete (slice: unknown): void {
    const id = sliceKey(slice)
    if (id !== null) this.#stage(this.#index.delete(id.key))
  }

  #upsert (slice: unknown): string[] {
    const id = sliceKey(slice)
    if (id === null) {
      this.#options.onSkipped?.('(unnamed)', ['malformed_slice'])
      return []
    }
    if (this.#index.has(id.key, id.version)) return []
    const parsed = parseEndpointSlice(slice, this.#options.ports)
    if (parsed.skipped.length > 0) this.#options.onSkipped?.(id.key, parsed.skipped)
    return this.#index.upsert(id.key, id.version, parsed)
  }

  #stage (identities: readonly string[]): void {
    for (const identity of identities) this.#options.store.stage(identity, this.#index.winner(identity))
  }
}
