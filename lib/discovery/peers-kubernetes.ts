/**
 * Router peers from the EndpointSlices of the router's own Service (SPEC §10), on the same
 * machinery as the Stargate targets: EndpointSliceWatch (list+watch, restart with backoff)
 * feeds slice events to SlicePeers, which parses them (peers.ts), merges duplicates with the
 * slice index (§3 rule 5: the most recently observed slice wins) and applies the winners to
 * the PeerSet. A list is applied as one batch, so a relist never shows a half-listed set.
 */
import type { KubeConfig } from '@kubernetes/client-node'
import { EndpointSliceWatch, type EndpointSliceConsumer } from './endpoint-slice-watch.ts'
import { SliceIndex } from './slice-index.ts'
import { sliceKey } from './slice-targets.ts'
import { parsePeerSlice, type Peer, type PeerPortOptions, type PeerSet, type PeerSkipReason } from './peers.ts'
import type { DiscoveryStatus } from './types.ts'
import type { PeerMetrics } from './peer-metrics.ts'
import type { Logger } from '../log.ts'

export interface SlicePeersOptions {
  readonly peers: PeerSet
  readonly port: PeerPortOptions
  /** Once per slice event that skipped endpoints. */
  readonly onSkipped?: (slice: string, reasons: readonly PeerSkipReason[]) => void
  /** Once per slice event whose slice lacks the named health port. */
  readonly onFallbackPort?: (slice: string) => void
}

/** Slice events -> peer set changes. No I/O. */
export class SlicePeers implements EndpointSliceConsumer {
  readonly #index = new SliceIndex<Peer>()
  readonly #options: SlicePeersOptions

  constructor (options: SlicePeersOptions) {
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
    this.#apply(affected.sort())
  }

  onUpsert (slice: unknown): void {
    this.#apply(this.#upsert(slice))
  }

  onDelete (slice: unknown): void {
    const id = sliceKey(slice)
    if (id !== null) this.#apply(this.#index.delete(id.key))
  }

  #upsert (slice: unknown): string[] {
    const id = sliceKey(slice)
    if (id === null) {
      this.#options.onSkipped?.('(unnamed)', ['malformed_slice'])
      return []
    }
    if (this.#index.has(id.key, id.version)) return []
    const parsed = parsePeerSlice(slice, this.#options.port)
    if (parsed.skipped.length > 0) this.#options.onSkipped?.(id.key, parsed.skipped)
    if (parsed.usedFallbackPort) this.#options.onFallbackPort?.(id.key)
    return this.#index.upsert(id.key, id.version, parsed)
  }

  #apply (ids: readonly string[]): void {
    if (ids.length === 0) return
    const seen = new Set<string>()
    const winners: Array<readonly [string, Peer | null]> = []
    for (const id of ids) {
      if (seen.has(id)) continue
      seen.add(id)
      winners.push([id, this.#index.winner(id)])
    }
    this.#options.peers.apply(winners)
  }
}

export interface KubernetesPeerSourceOptions {
  readonly kubeConfig: KubeConfig
  /** The router's own namespace. */
  readonly namespace: string
  /** --peer-service */
  readonly serviceName: string
  readonly port: PeerPortOptions
  readonly peers: PeerSet
  readonly metrics: PeerMetrics
  readonly logger: Logger
  readonly backoff?: { readonly baseMs: number, readonly maxMs: number }
}

export class KubernetesPeerSource implements DiscoveryStatus {
  readonly #watch: EndpointSliceWatch

  constructor (options: KubernetesPeerSourceOptions) {
    const { metrics, logger, port } = options
    const consumer = new SlicePeers({
      peers: options.peers,
      port,
      onSkipped: (slice, reasons) => {
        logger.warn({ slice, skipped: reasons }, 'peer endpointslice lists endpoints that cannot be peers')
      },
      onFallbackPort: (slice) => {
        logger.warn({ slice, portName: port.name, fallbackPort: port.fallback }, 'peer endpointslice has no health port by that name; using --peer-health-port')
      },
    })
    this.#watch = new EndpointSliceWatch({
      kubeConfig: options.kubeConfig,
      namespace: options.namespace,
      serviceName: options.serviceName,
      logger,
      onRestart: () => { metrics.peerWatchRestarts.inc() },
      ...(options.backoff === undefined ? {} : { backoff: options.backoff }),
      consumer,
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
}
