/**
 * Replica balancing (SPEC §10) for the composition root: the `/debug/load` route, served
 * whatever the flags (it costs a walk over the live connections when asked, nothing else), and
 * with --rebalance the loop that reads the peers' loads and moves connections through the
 * drain registry. Off means no timer, no peer reads and no moves.
 */
import type { Config } from '../lib/config/config.ts'
import type { Logger } from '../lib/log.ts'
import type { PylonLoadSource } from '../lib/rebalance/load.ts'
import type { LoadReport } from '../lib/rebalance/load-report.ts'
import { createPeerLoadFetcher } from '../lib/rebalance/peer-load-fetch.ts'
import { Rebalancer, type ConnectionMover, type RebalanceReport } from '../lib/rebalance/rebalancer.ts'
import type { RebalanceMetrics } from '../lib/rebalance/rebalance-metrics.ts'
import { peerSelfOf, type RunningPeers } from './peers-wiring.ts'

export interface RebalanceContext {
  readonly config: Config
  /** Null when peer discovery is off (then --rebalance is refused at start-up). */
  readonly peers: RunningPeers | null
  readonly load: PylonLoadSource
  /** The connections, oldest first, and how to move one (the drain registry). */
  readonly mover: ConnectionMover
  /** Whether this replica is shutting down (its load is leaving). */
  readonly draining: () => boolean
  readonly metrics: RebalanceMetrics
  readonly logger: Logger
}

export interface RunningRebalance {
  readonly debugRoute: { readonly path: '/debug/load', readonly handler: () => LoadReport & { readonly rebalance: RebalanceReport | null } }
  /** Stops the loop and the peer reads; idempotent. */
  close (): Promise<void>
}

export function startRebalance (context: RebalanceContext): RunningRebalance {
  const { config, peers, load, metrics, logger } = context
  const self = peerSelfOf(config)
  metrics.setLoadSource(() => load.load())
  let rebalancer: Rebalancer | null = null
  let closeFetcher: () => Promise<void> = async () => {}
  if (config.rebalance && peers !== null) {
    const fetcher = createPeerLoadFetcher({ timeoutMs: config.peerCheckTimeoutMs })
    closeFetcher = () => fetcher.close()
    rebalancer = new Rebalancer({
      peers: peers.peers,
      load,
      fetchLoad: fetcher.fetch,
      mover: context.mover,
      tolerance: config.rebalanceTolerance,
      intervalMs: config.rebalanceIntervalMs,
      maxMovesPerInterval: config.rebalanceMaxMovesPerInterval,
      metrics,
      logger,
    })
    rebalancer.start()
    logger.info({ intervalMs: config.rebalanceIntervalMs, tolerance: config.rebalanceTolerance, maxMovesPerInterval: config.rebalanceMaxMovesPerInterval }, 'rebalancing started')
  }
  const running = rebalancer
  let closing: Promise<void> | null = null
  return {
    debugRoute: {
      path: '/debug/load',
      handler: () => ({ self, draining: context.draining(), connections: load.load(), rebalance: running?.report() ?? null }),
    },
    close (): Promise<void> {
      closing ??= (async () => {
        // The loop first, so reads aborted by the fetcher's close are not counted as errors.
        const stopped = running?.close()
        await closeFetcher()
        await stopped
      })()
      return closing
    },
  }
}
