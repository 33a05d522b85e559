/**
 * Peer discovery (SPEC §10, opt-in) for the composition root: the peer source (EndpointSlices
 * of --peer-service, or --peers-file), the peer set, and the divergence checker, plus the
 * /debug/peers route for the health listener. Off means nothing at all: no watch, no timer,
 * no route (startPeers returns null).
 */
import type { KubeConfig } from '@kubernetes/client-node'
import type { Config } from '../lib/config/config.ts'
import type { SnapshotReader } from '../lib/discovery/types.ts'
import { PeerSet, type PeerSelf } from '../lib/discovery/peers.ts'
import { FilePeerSource } from '../lib/discovery/peers-file.ts'
import { createPeerSnapshotFetcher } from '../lib/discovery/peer-snapshot-fetch.ts'
import { PeerDivergenceChecker } from '../lib/discovery/peer-divergence.ts'
import type { PeerMetrics } from '../lib/discovery/peer-metrics.ts'
import type { Logger } from '../lib/log.ts'

export interface PeersContext {
  readonly config: Config
  readonly snapshot: SnapshotReader
  readonly metrics: PeerMetrics
  readonly logger: Logger
  /** Required with --peer-service. */
  readonly kubeConfig?: KubeConfig | undefined
  /** Watch restart backoff; tests shorten it. */
  readonly backoff?: { readonly baseMs: number, readonly maxMs: number } | undefined
}

export interface DebugRoute {
  readonly path: '/debug/peers'
  readonly handler: () => unknown
}

export interface RunningPeers {
  readonly debugRoute: DebugRoute
  readonly peers: PeerSet
  readonly checker: PeerDivergenceChecker
  /** Stops the checks and the source; idempotent. */
  close (): Promise<void>
}

/** Source status as /debug/peers shows it. */
type SourceReport =
  | { readonly kind: 'kubernetes', readonly namespace: string, readonly service: string, readonly stalenessSeconds: number }
  | { readonly kind: 'file', readonly path: string, readonly lastError: string | null }

interface PeerSource {
  report (): SourceReport
  stop (): Promise<void>
}

/** How this replica names itself to its peers (POD_IP, namespace/POD_NAME), as /debug/peers and /debug/load show it. */
export function peerSelfOf (config: Config): PeerSelf {
  return {
    address: config.podIp,
    id: config.podName === null ? null : `${config.peerNamespace}/${config.podName}`,
  }
}

export async function startPeers (context: PeersContext): Promise<RunningPeers | null> {
  const { config, logger, metrics } = context
  if (!config.enablePeerDiscovery) return null
  const self = peerSelfOf(config)
  const peers = new PeerSet({ self, onListenerError: (err) => { logger.error({ err }, 'peer set subscriber failed') } })
  peers.subscribe((change) => {
    const { id, address, port } = change.peer
    logger.info({ peer: id, address, port, change: change.type }, change.type === 'add' ? 'peer joined' : change.type === 'delete' ? 'peer left' : 'peer moved')
  })
  const fetcher = createPeerSnapshotFetcher({ timeoutMs: config.peerCheckTimeoutMs })
  const checker = new PeerDivergenceChecker({
    peers,
    snapshot: context.snapshot,
    fetchSnapshot: fetcher.fetch,
    intervalMs: config.peerCheckIntervalMs,
    graceMs: config.peerDivergenceGraceMs,
    metrics,
    logger,
  })

  let source: PeerSource
  if (config.peerService !== null) {
    if (context.kubeConfig === undefined) throw new Error('peer discovery through --peer-service needs Kubernetes client configuration')
    const namespace = config.peerNamespace
    const service = config.peerService
    // Imported only when peers come from the API server (the client is slow to load).
    const { KubernetesPeerSource } = await import('../lib/discovery/peers-kubernetes.ts')
    const k8s = new KubernetesPeerSource({
      kubeConfig: context.kubeConfig,
      namespace,
      serviceName: service,
      port: { name: config.peerHealthPortName, fallback: config.peerHealthPort },
      peers,
      metrics,
      logger,
      backoff: context.backoff,
    })
    k8s.start()
    source = { report: () => ({ kind: 'kubernetes', namespace, service, stalenessSeconds: k8s.stalenessMs() / 1000 }), stop: () => k8s.stop() }
  } else {
    const path = config.peersFile ?? ''
    const file = new FilePeerSource({ path, namespace: config.peerNamespace, defaultPort: config.peerHealthPort, peers, logger })
    await file.start()
    source = { report: () => ({ kind: 'file', path, lastError: file.lastError() }), stop: () => file.stop() }
  }
  checker.start()
  logger.info({ source: source.report().kind, self, intervalMs: config.peerCheckIntervalMs, graceMs: config.peerDivergenceGraceMs }, 'peer discovery started')

  let closing: Promise<void> | null = null
  return {
    debugRoute: {
      path: '/debug/peers',
      handler: () => ({ source: source.report(), self, ...checker.report() }),
    },
    peers,
    checker,
    close (): Promise<void> {
      closing ??= (async () => {
        // The checker first, so answers aborted by the fetcher's close are not counted as errors.
        const stopped = checker.close()
        await fetcher.close()
        await stopped
        await source.stop()
      })()
      return closing
    },
  }
}
