/**
 * Replica balancing metrics (SPEC §10). Field names are those RouterMetrics carries
 * (`RouterMetrics extends RebalanceMetrics`). They exist, at zero, whether or not balancing is
 * on; rebalance_load reads this replica's load at scrape time (also with balancing off, as
 * /debug/load does). Labels are bounded tables: the kinds, the move reasons, the round results
 * and the peer read error reasons.
 */
import type { Counter, Gauge, Registry } from 'prom-client'
import { defineMetrics } from '../metrics/define.ts'
import { PEER_CHECK_ERROR_REASONS } from '../discovery/peer-metrics.ts'
import { MOVE_REASONS, ROUND_RESULTS } from './decide.ts'
import { PYLON_LOAD_KINDS, type PylonLoad } from './load.ts'

export interface RebalanceMetrics {
  readonly rebalanceMoves: Counter<'kind' | 'reason'>
  readonly rebalanceRounds: Counter<'result'>
  readonly rebalanceLoad: Gauge<'kind'>
  readonly rebalancePeerMean: Gauge<'kind'>
  readonly rebalancePeerLoadErrors: Counter<'reason'>
  /** Where rebalance_load reads this replica's load at scrape time. */
  setLoadSource (source: () => PylonLoad): void
}

export function createRebalanceMetrics (registry: Registry): RebalanceMetrics {
  const define = defineMetrics(registry)
  let source: (() => PylonLoad) | null = null
  return {
    rebalanceMoves: define.counter('rebalance_moves_total', 'Pylon connections this replica moved to even out the replicas (each drained: registrations get UNAVAILABLE then GOAWAY, tunnels finish their open streams then close), by kind (registration, raw_quic, webtransport) and reason (above_band: some replica was above the band; below_band: none above, some below)', { kind: PYLON_LOAD_KINDS, reason: MOVE_REASONS }),
    rebalanceRounds: define.counter('rebalance_rounds_total', 'Rebalancing intervals by result: settling (first after start or a peer set change), peer_load_unknown (a peer\'s load unknown, stale or draining: nothing moves), moving, others_move, waiting (outside the band, not yet two intervals), balanced', { result: ROUND_RESULTS }),
    rebalanceLoad: define.gauge('rebalance_load', 'This replica\'s Pylon-facing connections by kind, as GET /debug/load reports them (connections being moved excluded)', { kind: PYLON_LOAD_KINDS }, function () {
      if (source === null) return
      const load = source()
      for (const kind of PYLON_LOAD_KINDS) this.set({ kind }, load[kind])
    }),
    rebalancePeerMean: define.gauge('rebalance_peer_mean', 'Mean Pylon-facing connections by kind over this replica and the peers whose load was read in the last rebalancing interval', { kind: PYLON_LOAD_KINDS }),
    rebalancePeerLoadErrors: define.counter('rebalance_peer_load_errors_total', 'Failed reads of a peer\'s /debug/load, by reason (unreachable, timeout, http_status, invalid_response, too_large); while any read fails nothing moves', { reason: PEER_CHECK_ERROR_REASONS }),
    setLoadSource (read) { source = read },
  }
}
