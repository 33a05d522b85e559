/**
 * Router peers from the EndpointSlices of the router's own Service (SPEC §10), on the same
 * machinery as the Stargate targets: EndpointSliceWatch (list+watch, restart with backoff)
 * feeds slice events to SlicePeers, which parses them (peers.ts), merges duplicates with the
 * slice index (§3 rule 5: the most recently observed slice wins) and applies the winners to
 * the PeerSet. A list is applied as one batch, so a relist never shows a half-listed set.
 */
import type { KubeConfig } from '@kubernetes/client-node'
import { EndpointSliceWatch } from './endpoint-slice-watch.ts'
import { IndexedSliceEvents } from './slice-events.ts'
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
export class SlicePeers extends IndexedSliceEvents<Peer> {
  constructor (options: SlicePeersOptions) {
    const { peers, port, onSkipped, onFallbackPort } = options
    super({
      parse: (slice, key) => {
        const parsed = parsePeerSlice(slice, port)
        if (parsed.skipped.length > 0) onSkipped?.(key, parsed.skipped)
        if (parsed.usedFallbackPort) onFallbackPort?.(key)
        return parsed
      },
      onUnnamed: () => { onSkipped?.('(unnamed)', ['malformed_slice']) },
      onChanged: (ids, index, listed) => {
        if (ids.length === 0) return
        // One notification per peer, in id order for a list (the PeerSet applies them in order).
        const seen = new Set<string>()
        const winners: Array<readonly [string, Peer | null]> = []
        for (const id of listed ? [...ids].sort() : ids) {
          if (seen.has(id)) continue
          seen.add(id)
          winners.push([id, index.winner(id)])
        }
        peers.apply(winners)
      },
    })
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

export class KubernetesPeerSource extends EndpointSliceWatch implements DiscoveryStatus {
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
    super({
      kubeConfig: options.kubeConfig,
      namespace: options.namespace,
      serviceName: options.serviceName,
      logger,
      onRestart: () => { metrics.peerWatchRestarts.inc() },
      onIgnored: (reason) => { logger.warn({ reason }, 'peer endpointslice watch object ignored: not a slice of the peer service') },
      backoff: options.backoff,
      consumer,
    })
  }
}
