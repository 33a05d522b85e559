/**
 * The EndpointSlice consumer of lib/discovery/kubernetes.ts (KubernetesTargetSource's
 * onList/onUpsert/onDelete) without the network: the same chain parseEndpointSlice ->
 * SliceIndex -> SnapshotStore.stage -> flush at end of tick. KubernetesTargetSource builds its
 * EndpointSliceWatch in its constructor, so its consumer cannot be driven without an API
 * server; this copy keeps the order of calls and drops only the metric and log of skipped
 * endpoints (the benchmark's slices have none). Keep it in step with kubernetes.ts.
 */
import { parseEndpointSlice } from '../../lib/discovery/endpoint-slice.ts'
import { SliceIndex } from '../../lib/discovery/slice-index.ts'
import type { SnapshotStore } from '../../lib/discovery/snapshot-store.ts'
import type { PortNames } from '../../lib/discovery/types.ts'

function sliceKey (slice: unknown): { key: string, version: string } | null {
  const metadata = (slice as { metadata?: { namespace?: unknown, name?: unknown, resourceVersion?: unknown } } | null)?.metadata
  if (typeof metadata?.name !== 'string') return null
  const namespace = typeof metadata.namespace === 'string' ? metadata.namespace : ''
  return { key: `${namespace}/${metadata.name}`, version: typeof metadata.resourceVersion === 'string' ? metadata.resourceVersion : '' }
}

export class SliceTargetSource {
  readonly #index = new SliceIndex()
  readonly #store: SnapshotStore
  readonly #ports: PortNames
  skipped = 0

  constructor (store: SnapshotStore, ports: PortNames) {
    this.#store = store
    this.#ports = ports
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
    this.#store.markInitialized()
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
    if (id === null) { this.skipped++; return [] }
    if (this.#index.has(id.key, id.version)) return []
    const parsed = parseEndpointSlice(slice, this.#ports)
    this.skipped += parsed.skipped.length
    return this.#index.upsert(id.key, id.version, parsed)
  }

  #stage (identities: readonly string[]): void {
    for (const identity of identities) this.#store.stage(identity, this.#index.winner(identity))
  }
}
