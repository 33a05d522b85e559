/**
 * The composition root: config -> discovery -> snapshot -> control plane -> listeners.
 * server/main.ts adds argv/env parsing, signals and exit codes; tests and the demo call
 * startRouter directly with their own logger, registry and Kubernetes configuration.
 */
import type { AddressInfo } from 'node:net'
import type { KubeConfig } from '@kubernetes/client-node'
import type { Config } from '../lib/config/config.ts'
import { compileHostnameTemplate } from '../lib/routing/hostname-template.ts'
import { SnapshotStore } from '../lib/discovery/snapshot-store.ts'
import { KubernetesTargetSource } from '../lib/discovery/kubernetes.ts'
import { FileTargetSource } from '../lib/discovery/file.ts'
import type { DiscoveryStatus } from '../lib/discovery/types.ts'
import { WatchStargatesHub } from '../lib/control-plane/watch-stargates.ts'
import { createGrpcDispatch } from '../lib/control-plane/grpc-dispatch.ts'
import { FrontDoor } from '../lib/front-door/listener.ts'
import { createHttpApp } from '../lib/front-door/http-app.ts'
import { HealthServer } from '../lib/health/server.ts'
import { Readiness, snapshotReadiness, stalenessReadiness } from '../lib/health/readiness.ts'
import { createMetrics, type RouterMetrics } from '../lib/metrics/metrics.ts'
import type { Logger } from '../lib/log.ts'

export interface RouterDeps {
  readonly logger: Logger
  readonly metrics?: RouterMetrics
  /** Required with --discovery kubernetes. */
  readonly kubeConfig?: KubeConfig
  /** Discovery restart backoff; tests shorten it. */
  readonly discoveryBackoff?: { readonly baseMs: number, readonly maxMs: number }
}

export interface RunningRouter {
  readonly frontDoor: AddressInfo
  readonly health: AddressInfo
  readonly snapshot: SnapshotStore
  readonly metrics: RouterMetrics
  readonly readiness: Readiness
  /** Graceful shutdown (SPEC §11); idempotent. */
  shutdown (): Promise<void>
}

interface StoppableSource extends DiscoveryStatus {
  stop (): Promise<void>
}

export async function startRouter (config: Config, deps: RouterDeps): Promise<RunningRouter> {
  const { logger } = deps
  const metrics = deps.metrics ?? createMetrics()
  const compiled = compileHostnameTemplate(config.advertisedHostnameTemplate, config.targetNamespace === '' ? 'default' : config.targetNamespace)
  if (!compiled.ok) throw new Error(compiled.message)
  const template = compiled.template

  const store = new SnapshotStore({ onListenerError: (err) => { logger.error({ err }, 'snapshot subscriber failed') } })
  store.subscribe((snapshot) => {
    metrics.discoveryTargets.set(snapshot.targets.length)
    metrics.discoverySnapshotGeneration.set(snapshot.generation)
    if (snapshot.initialized) {
      metrics.discoverySnapshotPublishes.inc()
      logger.info({ generation: snapshot.generation, targets: snapshot.targets.length, digest: snapshot.digest }, 'target snapshot published')
    }
  })

  const readiness = new Readiness()
  let source: StoppableSource
  const ports = { grpc: config.grpcPortName, quic: config.quicPortName, http: config.httpPortName }
  if (config.discovery === 'kubernetes') {
    if (deps.kubeConfig === undefined) throw new Error('kubernetes discovery needs a KubeConfig')
    const k8s = new KubernetesTargetSource({
      kubeConfig: deps.kubeConfig,
      namespace: config.targetNamespace,
      serviceName: config.targetServiceName,
      ports,
      store,
      metrics,
      logger,
      ...(deps.discoveryBackoff === undefined ? {} : { backoff: deps.discoveryBackoff }),
    })
    k8s.start()
    source = k8s
    readiness.add(snapshotReadiness(store))
  } else {
    const file = new FileTargetSource({ path: config.targetsFile ?? '', namespace: config.targetNamespace === '' ? 'default' : config.targetNamespace, store, metrics, logger })
    await file.start()
    source = file
    readiness.add(snapshotReadiness(store, () => file.lastError()))
  }
  readiness.add(stalenessReadiness(source, config.maxSnapshotStalenessMs))
  metrics.setSnapshotAgeSource(() => source.stalenessMs() / 1000)

  const hub = new WatchStargatesHub({
    snapshot: store,
    template,
    advertisedGrpcPort: config.advertisedGrpcPort,
    pylonGrpcDialAddr: config.pylonGrpcDialAddr,
    remoteWatchUrls: config.remoteWatchUrls,
    heartbeatMs: config.watchHeartbeatMs,
    metrics,
    logger,
  })
  const httpApp = await createHttpApp(null)
  const frontDoor = new FrontDoor({
    host: config.listenAddr.host,
    port: config.listenAddr.port,
    logger,
    onGrpcStream: createGrpcDispatch({ watchStargates: (stream) => { hub.handle(stream) }, registerInferenceServer: null }),
    onHttpRequest: httpApp.handler,
  })
  const health = new HealthServer({
    host: config.healthListenAddr.host,
    port: config.healthListenAddr.port,
    readiness,
    registry: metrics.registry,
    snapshot: store,
    discovery: source,
  })
  let healthAddress: AddressInfo
  let frontDoorAddress: AddressInfo
  try {
    healthAddress = await health.listen()
    frontDoorAddress = await frontDoor.listen()
  } catch (err) {
    await Promise.allSettled([health.close(), frontDoor.close(0), source.stop()])
    hub.close()
    throw err
  }
  logger.info({ frontDoor: frontDoorAddress, health: healthAddress, discovery: config.discovery, template: template.source }, 'stargate router listening')

  let stopping: Promise<void> | null = null
  const shutdown = (): Promise<void> => {
    stopping ??= (async () => {
      readiness.startDraining()
      logger.info({ drainMs: config.shutdownDrainMs }, 'shutting down: draining connections')
      hub.close('router shutting down')
      await frontDoor.close(config.shutdownDrainMs)
      await source.stop()
      await httpApp.app.close()
      await health.close()
      logger.info('shutdown complete')
    })()
    return stopping
  }
  return { frontDoor: frontDoorAddress, health: healthAddress, snapshot: store, metrics, readiness, shutdown }
}
