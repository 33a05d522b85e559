/**
 * Peer discovery metrics (SPEC §10). Field names are those RouterMetrics carries
 * (`RouterMetrics extends PeerMetrics`, spread in by createMetrics). They exist, at zero,
 * whether or not the feature is on, so dashboards and alerts need no special case.
 */
import { counter, gauge, metricGroup } from '../metrics/define.ts'

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

export const createPeerMetrics = metricGroup({
  peers: gauge('peers', 'Other router replicas in the peer set (ready endpoints of --peer-service, or --peers-file), this replica excluded'),
  peerSnapshotDivergent: gauge('peer_snapshot_divergent', 'Peers whose Stargate snapshot digest has differed from ours for longer than --peer-divergence-grace-ms'),
  peerCheckErrors: counter('peer_check_errors_total', 'Failed reads of a peer\'s /debug/snapshot, by reason (unreachable, timeout, http_status, invalid_response, too_large); errors are not divergence', { reason: PEER_CHECK_ERROR_REASONS }),
  peerWatchRestarts: counter('peer_watch_restarts_total', 'Restarts of the EndpointSlice list/watch of --peer-service after an error'),
})

export type PeerMetrics = ReturnType<typeof createPeerMetrics>
