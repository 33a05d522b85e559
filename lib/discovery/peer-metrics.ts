/**
 * Peer discovery metrics (SPEC §10). Field names are those RouterMetrics carries
 * (`RouterMetrics extends PeerMetrics`, spread in by createMetrics). They exist, at zero,
 * whether or not the feature is on, so dashboards and alerts need no special case.
 */
import { Counter, Gauge, type Registry } from 'prom-client'

const PREFIX = 'stargate_k8s_router_'

/**
 * Why one read of a peer's /debug/snapshot failed; bounded label values of
 * stargate_k8s_router_peer_check_errors_total. None of these is divergence.
 */
export const PEER_CHECK_ERROR_REASONS = [
  /** Connection refused, reset or closed before a response. */
  'unreachable',
  /** No complete answer within --peer-check-timeout-ms. */
  'timeout',
  /** An answer other than 200. */
  'http_status',
  /** Not JSON, or JSON without a generation and a digest. */
  'invalid_response',
  /** A body over the size limit. */
  'too_large',
] as const
export type PeerCheckErrorReason = typeof PEER_CHECK_ERROR_REASONS[number]

export interface PeerMetrics {
  readonly peers: Gauge
  readonly peerSnapshotDivergent: Gauge
  readonly peerCheckErrors: Counter<'reason'>
  readonly peerWatchRestarts: Counter
}

export function createPeerMetrics (registry: Registry): PeerMetrics {
  const registers = [registry]
  const metrics: PeerMetrics = {
    peers: new Gauge({
      name: PREFIX + 'peers',
      help: 'Other router replicas in the peer set (ready endpoints of --peer-service, or --peers-file), this replica excluded',
      registers,
    }),
    peerSnapshotDivergent: new Gauge({
      name: PREFIX + 'peer_snapshot_divergent',
      help: 'Peers whose Stargate snapshot digest has differed from ours for longer than --peer-divergence-grace-ms',
      registers,
    }),
    peerCheckErrors: new Counter({
      name: PREFIX + 'peer_check_errors_total',
      help: 'Failed reads of a peer\'s /debug/snapshot, by reason (unreachable, timeout, http_status, invalid_response, too_large); errors are not divergence',
      labelNames: ['reason'] as const,
      registers,
    }),
    peerWatchRestarts: new Counter({
      name: PREFIX + 'peer_watch_restarts_total',
      help: 'Restarts of the EndpointSlice list/watch of --peer-service after an error',
      registers,
    }),
  }
  for (const reason of PEER_CHECK_ERROR_REASONS) metrics.peerCheckErrors.labels(reason).inc(0)
  return metrics
}
