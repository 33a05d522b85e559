/**
 * Every router metric, created on a registry passed in (tests use their own). Names keep
 * the Rust router's prefix; label sets are bounded (no identities or addresses).
 * docs/metrics.md lists each one; test/unit/metrics-docs.test.ts keeps the two in step.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import { SKIP_REASONS } from '../discovery/endpoint-slice.ts'

export const PREFIX = 'stargate_k8s_router_'

export interface RouterMetrics {
  readonly registry: Registry
  readonly discoveryWatchRestarts: Counter
  readonly discoverySnapshotAge: Gauge
  readonly discoveryTargets: Gauge
  readonly discoverySnapshotGeneration: Gauge
  readonly discoverySnapshotPublishes: Counter
  readonly endpointSliceSkipped: Counter<'reason'>
  readonly targetsFileReloads: Counter<'result'>
  readonly watchStreamsActive: Gauge
  readonly watchMessagesSent: Counter<'reason'>
  readonly watchEncodeDuration: Histogram
  /** Where discovery_snapshot_age_seconds reads its value at scrape time. */
  setSnapshotAgeSource (source: () => number): void
}

export function createMetrics (registry: Registry = new Registry(), options: { defaultMetrics?: boolean } = {}): RouterMetrics {
  if (options.defaultMetrics !== false) collectDefaultMetrics({ register: registry })
  const registers = [registry]
  let ageSource: (() => number) | null = null
  const metrics: RouterMetrics = {
    registry,
    discoveryWatchRestarts: new Counter({
      name: PREFIX + 'discovery_watch_restarts_total',
      help: 'EndpointSlice list/watch restarts after an error (the informer stops on any non-410 error)',
      registers,
    }),
    discoverySnapshotAge: new Gauge({
      name: PREFIX + 'discovery_snapshot_age_seconds',
      help: 'Seconds since the target snapshot was last known to be current; 0 while the watch is connected',
      registers,
      collect () { if (ageSource !== null) this.set(ageSource()) },
    }),
    discoveryTargets: new Gauge({
      name: PREFIX + 'discovery_targets',
      help: 'Ready Stargate targets in the current snapshot',
      registers,
    }),
    discoverySnapshotGeneration: new Gauge({
      name: PREFIX + 'discovery_snapshot_generation',
      help: 'Generation of the current target snapshot (0 while uninitialized)',
      registers,
    }),
    discoverySnapshotPublishes: new Counter({
      name: PREFIX + 'discovery_snapshot_publishes_total',
      help: 'Target snapshots published (each one changed the target set)',
      registers,
    }),
    endpointSliceSkipped: new Counter({
      name: PREFIX + 'endpointslice_skipped_total',
      help: 'EndpointSlices or endpoints that contributed no target, by reason',
      labelNames: ['reason'] as const,
      registers,
    }),
    targetsFileReloads: new Counter({
      name: PREFIX + 'targets_file_reloads_total',
      help: 'Reads of the --targets-file, by result (a rejected file keeps the last good snapshot)',
      labelNames: ['result'] as const,
      registers,
    }),
    watchStreamsActive: new Gauge({
      name: PREFIX + 'watch_streams_active',
      help: 'Open WatchStargates streams',
      registers,
    }),
    watchMessagesSent: new Counter({
      name: PREFIX + 'watch_messages_sent_total',
      help: 'WatchStargates messages written to streams, by reason (initial, change, heartbeat)',
      labelNames: ['reason'] as const,
      registers,
    }),
    watchEncodeDuration: new Histogram({
      name: PREFIX + 'watch_encode_duration_seconds',
      help: 'Time to encode the WatchStargates message of one snapshot generation (shared by all watchers)',
      buckets: [0.00001, 0.0001, 0.001, 0.01, 0.1],
      registers,
    }),
    setSnapshotAgeSource (source) { ageSource = source },
  }
  for (const reason of SKIP_REASONS) metrics.endpointSliceSkipped.labels(reason).inc(0)
  for (const result of ['success', 'rejected']) metrics.targetsFileReloads.labels(result).inc(0)
  for (const reason of ['initial', 'change', 'heartbeat']) metrics.watchMessagesSent.labels(reason).inc(0)
  return metrics
}
