/**
 * Stargate targets from the EndpointSlices of the target Service (SPEC §3): the watch
 * adapter feeds slice events into the slice index (rule 5), whose winners are staged in
 * the snapshot store (rule 6).
 */
import type { KubeConfig } from '@kubernetes/client-node'
import { EndpointSliceWatch } from './endpoint-slice-watch.ts'
import { parseEndpointSlice } from './endpoint-slice.ts'
import { SliceIndex } from './slice-index.ts'
import type { SnapshotStore } from './snapshot-store.ts'
import type { DiscoveryStatus, PortNames } from './types.ts'
import type { RouterMetrics } from '../metrics/metrics.ts'
import type { Logger } from '../log.ts'

export interface KubernetesTargetSourceOptions {
  readonly kubeConfig: KubeConfig
  readonly namespace: string
  readonly serviceName: string
  readonly ports: PortNames
  readonly store: SnapshotStore
  readonly metrics: RouterMetrics
  readonly logger: Logger
  readonly backoff?: { readonly baseMs: number, readonly maxMs: number }
}

function sliceKey (slice: unknown): { key: string, version: string } | null {
  const metadata = (slice as { metadata?: { namespace?: unknown, name?: unknown, resourceVersion?: unknown } } | null)?.metadata
  if (typeof metadata?.name !== 'string') return null
  const namespace = typeof metadata.namespace === 'string' ? metadata.namespace : ''
  return { key: `${namespace}/${metadata.name}`, version: typeof metadata.resourceVersion === 'string' ? metadata.resourceVersion : '' }
}

export class KubernetesTargetSource implements DiscoveryStatus {
  readonly #options: KubernetesTargetSourceOptions
  readonly #index = new SliceIndex()
  readonly #watch: EndpointSliceWatch

  constructor (options: KubernetesTargetSourceOptions) {
    this.#options = options
    this.#watch = new EndpointSliceWatch({
      kubeConfig: options.kubeConfig,
      namespace: options.namespace,
      serviceName: options.serviceName,
      logger: options.logger,
      onRestart: () => { options.metrics.discoveryWatchRestarts.inc() },
      ...(options.backoff === undefined ? {} : { backoff: options.backoff }),
      consumer: {
        onList: (items) => { this.#onList(items) },
        onUpsert: (slice) => { this.#stage(this.#upsert(slice)) },
        onDelete: (slice) => {
          const id = sliceKey(slice)
          if (id !== null) this.#stage(this.#index.delete(id.key))
        },
      },
    })
  }

  start (): void {
    this.#watch.start()
  }

  stop (): Promise<void> {
    return this.#watch.stop()
  }

  stalenessMs (): number {
    return this.#watch.stalenessMs()
  }

  #onList (items: readonly unknown[]): void {
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

  #upsert (slice: unknown): string[] {
    const id = sliceKey(slice)
    if (id === null) {
      this.#options.metrics.endpointSliceSkipped.labels('malformed_slice').inc()
      return []
    }
    if (this.#index.has(id.key, id.version)) return []
    const parsed = parseEndpointSlice(slice, this.#options.ports)
    if (parsed.skipped.length > 0) {
      const counts: Record<string, number> = {}
      for (const reason of parsed.skipped) {
        this.#options.metrics.endpointSliceSkipped.labels(reason).inc()
        counts[reason] = (counts[reason] ?? 0) + 1
      }
      this.#options.logger.warn({ slice: id.key, skipped: counts }, 'endpointslice contributes fewer targets than it lists')
    }
    return this.#index.upsert(id.key, id.version, parsed)
  }

  #stage (identities: readonly string[]): void {
    for (const identity of identities) this.#options.store.stage(identity, this.#index.winner(identity))
  }
}
