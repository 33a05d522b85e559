/**
 * Stargate targets from the EndpointSlices of the target Service (SPEC §3): the watch
 * adapter (list+watch, restarts) feeds slice events to SliceTargets, which stages the
 * resulting target changes in the snapshot store.
 */
import type { KubeConfig } from '@kubernetes/client-node'
import { EndpointSliceWatch } from './endpoint-slice-watch.ts'
import { SliceTargets } from './slice-targets.ts'
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

export class KubernetesTargetSource extends EndpointSliceWatch implements DiscoveryStatus {
  constructor (options: KubernetesTargetSourceOptions) {
    const { metrics, logger } = options
    const consumer = new SliceTargets({
      store: options.store,
      ports: options.ports,
      onSkipped: (slice, reasons) => {
        const counts: Record<string, number> = {}
        for (const reason of reasons) {
          metrics.endpointSliceSkipped.labels(reason).inc()
          counts[reason] = (counts[reason] ?? 0) + 1
        }
        logger.warn({ slice, skipped: counts }, 'endpointslice contributes fewer targets than it lists')
      },
    })
    super({
      kubeConfig: options.kubeConfig,
      namespace: options.namespace,
      serviceName: options.serviceName,
      logger,
      onRestart: () => { metrics.discoveryWatchRestarts.inc() },
      onIgnored: (reason) => {
        metrics.endpointSliceSkipped.labels(reason).inc()
        logger.warn({ reason }, 'endpointslice watch object ignored: not a slice of the target service')
      },
      backoff: options.backoff,
      consumer,
    })
  }
}
