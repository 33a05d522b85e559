/**
 * The composition root: config -> discovery -> snapshot -> control plane -> listeners.
 * server/main.ts adds argv/env parsing, signals and exit codes; tests and the demo call
 * startRouter directly with their own logger, registry and Kubernetes configuration.
 */
import type { AddressInfo } from 'node:net'
import type { KubeConfig } from '@kubernetes/client-node'
import type { Config } from '../lib/config/config.ts'
import { compileHostnameTemplate, type HostnameTemplate } from '../lib/routing/hostname-template.ts'
import { SnapshotStore } from '../lib/discovery/snapshot-store.ts'
import { FileTargetSource } from '../lib/discovery/file.ts'
import type { DiscoveryStatus } from '../lib/discovery/types.ts'
import { SHUTDOWN_MESSAGE, WatchStargatesHub } from '../lib/control-plane/watch-stargates.ts'
import { ConnectionRegistry } from '../lib/drain/connection-registry.ts'
import { RegistrationForwarder } from '../lib/control-plane/registration-forwarder.ts'
import { UpstreamPool } from '../lib/control-plane/upstream-pool.ts'
import { startRouterTls } from '../lib/tls/router-tls.ts'
import { startPeers } from './peers-wiring.ts'
import { startRebalance } from './rebalance-wiring.ts'
import { startTunnel, type RunningTunnel } from '../lib/tunnel/tunnel-port.ts'
import { QuicEngine } from '../lib/quic/engine.ts'
import { NativeHeapTrimmer } from '../lib/native-heap-trim.ts'
import type { TlsMaterialManager } from '../lib/tls/manager.ts'
import { registryLoadSource, registryMover } from '../lib/rebalance/registry-adapter.ts'
import { FrontDoor } from '../lib/front-door/front-door.ts'
import { HttpPods } from '../lib/http-forward/pods.ts'
import { clientShareLimit } from '../lib/http-forward/client-address.ts'
import { HttpForwarder } from '../lib/http-forward/forwarder.ts'
import { TrustedProxies } from '../lib/http-forward/trusted-proxies.ts'
import { HealthServer } from '../lib/health/server.ts'
import { Readiness, snapshotReadiness, stalenessReadiness } from '../lib/health/readiness.ts'
import { createMetrics, type RouterMetrics } from '../lib/metrics/metrics.ts'
import type { Logger } from '../lib/log.ts'
import { settleWithin } from './shutdown-steps.ts'
import { CloserStack } from './closer-stack.ts'

/**
 * Of the second the shutdown has past the drain timeout, what is kept for the last log lines
 * and the exit (server/main.ts's watchdog ends the process at the full second).
 */
const SHUTDOWN_EXIT_MARGIN_MS = 200

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
  readonly tunnel: RunningTunnel
  readonly snapshot: SnapshotStore
  readonly metrics: RouterMetrics
  readonly readiness: Readiness
  readonly upstreamPool: UpstreamPool
  readonly registrations: RegistrationForwarder
  /** The live connections by kind (front door, tunnels), to drain or count. */
  readonly connections: ConnectionRegistry
  /** The TLS material every listener and dialer follows (its followers are given back on shutdown). */
  readonly tls: TlsMaterialManager
  /** The tunnels' QUIC engine (closed on shutdown). */
  readonly engine: QuicEngine
  /** Graceful shutdown (SPEC §11), done within the drain timeout + 1 s minus SHUTDOWN_EXIT_MARGIN_MS; idempotent. */
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
    let notServing = 0
    for (const target of snapshot.targets) if (!target.serving) notServing++
    metrics.discoveryTargets.set(snapshot.targets.length)
    metrics.discoveryTargetsNotServing.set(notServing)
    metrics.discoveryUnreadyPods.set(snapshot.unready.size)
    metrics.discoverySnapshotGeneration.set(snapshot.generation)
    if (snapshot.initialized) {
      metrics.discoverySnapshotPublishes.inc()
      logger.info({ generation: snapshot.generation, targets: snapshot.targets.length, notServing, unready: snapshot.unready.size, digest: snapshot.digest }, 'target snapshot published')
    }
  })

  const readiness = new Readiness()
  // What has started, to close in reverse order on a failed start-up and on shutdown.
  const closers = new CloserStack()
  const connections = new ConnectionRegistry({ metrics: metrics.drain })
  try {
    return await startComponents(config, deps, { metrics, template, store, readiness, closers, connections })
  } catch (err) {
    // Nothing may outlive a failed start: no listener, no pod connection, no timer.
    await closers.unwind(Date.now() + FAILED_START_CLOSE_MS)
    throw err
  }
}

/**
 * How long a failed start-up waits for what had started to close (the listeners have nothing
 * to drain; pod connections get this long before they are cut).
 */
const FAILED_START_CLOSE_MS = 1000

/** Pools cut their connections this long before the budget ends, so their close() ends in it. */
const CLOSE_MARGIN_MS = 100

interface Started {
  readonly metrics: RouterMetrics
  readonly template: HostnameTemplate
  readonly store: SnapshotStore
  readonly readiness: Readiness
  readonly closers: CloserStack
  readonly connections: ConnectionRegistry
}

async function startComponents (config: Config, deps: RouterDeps, started: Started): Promise<RunningRouter> {
  const { logger } = deps
  const { metrics, template, store, readiness, closers, connections } = started
  // Before discovery: invalid TLS material fails start-up (no insecure fallback).
  // The self-signed fallback identity covers every advertised host (tunnels need one).
  const tls = await startRouterTls(config, template.render('*'), metrics, logger)
  closers.push('tls', () => tls.close())
  readiness.add(tls.manager.readinessCheck())
  let source: StoppableSource
  const ports = { grpc: config.grpcPortName, quic: config.quicPortName, http: config.httpPortName }
  if (config.discovery === 'kubernetes') {
    if (deps.kubeConfig === undefined) throw new Error('kubernetes discovery needs a KubeConfig')
    // Imported only here: the Kubernetes client is about 0.9 s of CPU to load, which a router
    // reading --targets-file (and every test that starts one) should not pay.
    const { KubernetesTargetSource } = await import('../lib/discovery/kubernetes.ts')
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
    closers.push('discovery', () => k8s.stop())
    source = k8s
    readiness.add(snapshotReadiness(store))
  } else {
    const file = new FileTargetSource({ path: config.targetsFile ?? '', namespace: config.targetNamespace === '' ? 'default' : config.targetNamespace, store, metrics, logger })
    closers.push('discovery', () => file.stop())
    await file.start()
    source = file
    readiness.add(snapshotReadiness(store, () => file.lastError()))
  }
  readiness.add(stalenessReadiness(source, config.maxSnapshotStalenessMs))
  metrics.setSnapshotAgeSource(() => source.stalenessMs() / 1000)

  // Peer discovery (SPEC §10): null when off, so no extra watch, timer or route.
  const peers = await startPeers({ config, snapshot: store, metrics, logger, kubeConfig: deps.kubeConfig, backoff: deps.discoveryBackoff })
  if (peers !== null) closers.push('peers', () => peers.close())

  const upstreamPool = new UpstreamPool({
    snapshot: store,
    connectTimeoutMs: config.connectTimeoutMs,
    tls: tls.registration,
    serverName: (target) => template.render(target.identity),
    logger,
    onSessionCountChange: (count) => { metrics.upstreamSessions.set(count) },
  })
  closers.push('upstream pool', (remainingMs) => upstreamPool.close(Math.max(0, remainingMs - CLOSE_MARGIN_MS)))
  const registrations = new RegistrationForwarder({
    snapshot: store,
    template,
    pool: upstreamPool,
    upstreamScheme: config.upstreamTls ? 'https' : 'http',
    drainGraceMs: config.drainGraceMs,
    maxMessageBytes: config.grpcMaxMessageBytes,
    metrics,
    logger,
  })
  closers.push('registrations', () => { registrations.close() })
  const httpPods = new HttpPods({
    snapshot: store,
    connectTimeoutMs: config.connectTimeoutMs,
    tls: tls.httpForward,
    serverName: (target) => template.render(target.identity),
    closeGraceMs: config.shutdownDrainTimeoutMs,
    maxConnectionsPerPod: config.httpUpstreamMaxConnections,
  })
  closers.push('http pods', (remainingMs) => httpPods.close(Math.max(0, remainingMs - CLOSE_MARGIN_MS)))
  const httpForwarder = new HttpForwarder({
    snapshot: store,
    template,
    pods: httpPods,
    maxBodyBytes: config.httpMaxBodyBytes,
    headersTimeoutMs: config.httpHeadersTimeoutMs,
    idleTimeoutMs: config.httpIdleTimeoutMs,
    requestTimeoutMs: config.httpRequestTimeoutMs,
    maxPendingPerPod: config.httpUpstreamMaxConnections + config.httpUpstreamMaxQueue,
    bodyBufferBytes: config.httpBodyBufferBytes,
    bodyMinBytesPerSecond: config.httpBodyMinBytesPerSecond,
    bodyRateWindowMs: config.httpBodyRateWindowMs,
    bodyDeadlineMs: config.httpBodyDeadlineMs,
    responseStallTimeoutMs: config.httpResponseStallTimeoutMs,
    maxPerClientPerPod: clientShareLimit(config.httpUpstreamMaxConnections, config.httpUpstreamMaxClientSharePercent),
    trustedProxies: new TrustedProxies(config.trustedProxyCidrs),
    metrics,
  })
  metrics.setBufferedBodiesSource(() => httpForwarder.bufferedBodies)
  // Opened once every listener is up; a watch that arrives before is refused (that window is
  // the listen calls themselves).
  const hub = new WatchStargatesHub({
    snapshot: store,
    template,
    advertisedGrpcPort: config.advertisedGrpcPort,
    grpcPylonDialAddr: config.grpcPylonDialAddr,
    remoteStargateUrls: config.remoteStargateUrls,
    heartbeatMs: config.watchHeartbeatMs,
    metrics,
    logger,
  })
  closers.push('watch hub', () => { hub.close(SHUTDOWN_MESSAGE) })
  const frontDoor = new FrontDoor({
    http: httpForwarder,
    grpc: { watchStargates: hub, registerInferenceServer: registrations },
    host: config.listenAddr.host,
    port: config.listenAddr.port,
    logger,
    tls: tls.frontDoor,
    limits: { maxConcurrentStreams: config.http2MaxConcurrentStreams, maxHeaderListSize: config.http2MaxHeaderListBytes },
    onRapidReset: () => { metrics.http2RapidResetCloses.inc() },
    onTlsError: () => { metrics.tlsHandshakeFailures.labels('front_door').inc() },
    connections: {
      maxConnections: config.frontDoorMaxConnections,
      headersTimeoutMs: config.httpHeadersTimeoutMs,
      keepAliveTimeoutMs: config.httpKeepAliveTimeoutMs,
      http2IdleTimeoutMs: config.http2SessionIdleTimeoutMs,
      tlsHandshakeTimeoutMs: config.tlsHandshakeTimeoutMs,
    },
    onRefused: (reason) => { metrics.limits.connectionsRefused.labels('front_door', reason).inc() },
    onTimedOut: (reason) => { metrics.limits.connectionsTimedOut.labels(reason).inc() },
    onConnectionCount: (count) => { metrics.limits.frontDoorConnections.set(count) },
    registry: connections,
    onDrainRefused: () => { metrics.drain.streamsRefused.labels('registration', 'pylon').inc() },
    // As the forwarder counts a waiting request whose connection went (nextOnLine).
    onH1RequestDropped: () => { metrics.httpRequests.labels('client_aborted', '4xx').inc() },
  })
  tls.attach(frontDoor.listener, upstreamPool, httpPods)
  // Replica balancing (SPEC §10): /debug/load always; the loop only with --rebalance. The load
  // and the moves go through the connection registry.
  const rebalance = startRebalance({
    config,
    peers,
    load: registryLoadSource(connections),
    // A moved connection gets the time a shutdown gives its open work, then it is closed.
    mover: registryMover(connections, { deadlineMs: config.shutdownDrainTimeoutMs }),
    draining: () => readiness.draining,
    metrics,
    logger,
  })
  closers.push('rebalance', () => rebalance.close())
  const health = new HealthServer({
    host: config.healthListenAddr.host,
    port: config.healthListenAddr.port,
    readiness,
    registry: metrics.registry,
    snapshot: store,
    discovery: source,
    debugRoutes: peers === null ? [rebalance.debugRoute] : [peers.debugRoute, rebalance.debugRoute],
    logger,
    onRefused: (reason) => { metrics.limits.connectionsRefused.labels('health', reason).inc() },
    onEvicted: (state) => { metrics.limits.healthConnectionsEvicted.labels(state).inc() },
    onPipelining: () => { metrics.limits.healthPipeliningCloses.inc() },
  })
  closers.push('health', () => health.close())
  const healthAddress = await health.listen()
  // On shutdown the drain has begun the front door's close already; this call waits for it.
  closers.push('front door', () => frontDoor.close(0))
  const frontDoorAddress = await frontDoor.listen()
  // The router's one QUIC engine (the addon loads here): the tunnels' endpoints and dials.
  const engine = new QuicEngine({
    onHandlerError: (err) => { logger.error({ err }, 'quic: an event handler failed; its connection was closed') },
  })
  closers.push('quic engine', () => { engine.close() })
  const heapTrimmer = new NativeHeapTrimmer({
    heap: engine.native,
    thresholdBytes: config.nativeHeapTrimThresholdBytes,
    intervalMs: config.nativeHeapCheckIntervalMs,
    metrics: metrics.nativeHeap,
    logger,
  })
  heapTrimmer.start()
  closers.push('native heap trimmer', () => { heapTrimmer.stop() })
  const runningTunnel = await startTunnel({ config, engine, snapshot: store, template, tls: tls.manager, metrics, logger, connections })
  closers.push('tunnels', () => runningTunnel.close())
  hub.open()
  logger.info({ frontDoor: frontDoorAddress, health: healthAddress, discovery: config.discovery, template: template.source, frontDoorTls: tls.frontDoor !== null, clientCertificates: tls.frontDoor?.requireClientCert ?? false, upstreamTls: tls.registration !== null }, 'stargate router listening')

  let stopping: Promise<void> | null = null
  const shutdown = (): Promise<void> => {
    stopping ??= (async () => {
      // SPEC §11: gone within the drain timeout + 1 s whatever is open; the last lines and the
      // exit itself get SHUTDOWN_EXIT_MARGIN_MS of that second.
      const startedAt = Date.now()
      const drainMs = config.shutdownDrainTimeoutMs
      const endBy = startedAt + drainMs + 1000 - SHUTDOWN_EXIT_MARGIN_MS
      readiness.startDraining()
      logger.info({ drainMs, connections: connections.counts() }, 'shutting down: draining connections')
      // Pylons move first (SPEC §11): every connection stops taking new work now (Watch and
      // registration streams end with UNAVAILABLE, then GOAWAY; tunnels refuse new streams),
      // lets its open work finish and closes; the process goes as soon as none is left.
      runningTunnel.stopAccepting()
      const drained = connections.drainAll('shutdown')
      hub.close(SHUTDOWN_MESSAGE)
      // The front door stops listening and cuts what is still open at the deadline (gone 500 ms
      // later at most); what else is open then is closed, and the closers share what is left.
      const frontDoorClosed = frontDoor.close(drainMs)
      const open = await settleWithin({ connections: drained, frontDoor: frontDoorClosed }, drainMs)
      if (open.length > 0) {
        logger.warn({ connections: connections.counts() }, 'shutdown: connections still open at the drain deadline are closed')
        connections.abortAll('shutdown')
      }
      logger.info({ elapsedMs: Date.now() - startedAt }, 'shutdown: connections drained')
      const late = await closers.unwind(endBy)
      if (late.length > 0) logger.warn({ steps: late }, 'shutdown: steps still running at the deadline were left behind')
      logger.info({ elapsedMs: Date.now() - startedAt }, 'shutdown complete')
    })()
    return stopping
  }
  return { frontDoor: frontDoorAddress, health: healthAddress, tunnel: runningTunnel, snapshot: store, metrics, readiness, upstreamPool, registrations, connections, tls: tls.manager, engine, shutdown }
}
