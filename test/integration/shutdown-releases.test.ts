/**
 * A stopped router gives back everything its tunnel port made, in each tunnel mode: no
 * consumer or change listener left in the TLS manager, no endpoint or connection left in its
 * QUIC engine, and no credential left in the addon (the native count back to what it was
 * before the router started, after identity, client-trust and upstream-trust reloads replaced
 * some on the way).
 * Failure mode guarded: the WebTransport mode never released its HTTP/2 leg's trust follower
 * nor its HTTP/3 server credentials, no tunnel follower ever left the manager, and the engine
 * was a process singleton nobody closed: a router started and stopped in one process (tests,
 * the demo) left engine credentials and manager consumers behind each time.
 */
import t, { type Test } from 'tap'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { Registry } from 'prom-client'
import { parseConfig } from '../../lib/config/config.ts'
import { createMetrics } from '../../lib/metrics/metrics.ts'
import { loadNative } from '../../lib/quic/native.ts'
import { startRouter, type RunningRouter } from '../../server/router.ts'
import { createCa, createLeaf } from '../fixtures/certs.ts'
import { createLogSink } from '../fixtures/log-sink.ts'
import { GRPC_PYLON_DIAL_ADDR, tempDir } from '../fixtures/router-process.ts'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { H3Cluster } from '../fixtures/h3-cluster.ts'
import { waitFor } from '../fixtures/wait.ts'

const HOSTS = ['*.stargate.external']

interface Held {
  readonly credentials: number
  readonly endpoints: number
  readonly connections: number
}

function held (): Held {
  const { credentials, endpoints, connections } = loadNative().counters()
  return { credentials, endpoints, connections }
}

/** What the router's tunnel port must have given back once it stopped. */
function assertReleased (t: Test, router: RunningRouter): void {
  t.same(router.tls.followers, { consumers: 0, listeners: 0 }, 'no consumer or change listener left in the TLS manager')
  t.ok(router.engine.closed, 'the engine is closed')
  t.equal(router.engine.endpointCount, 0, 'no endpoint left in the engine')
  t.equal(router.engine.connectionCount, 0, 'no connection left in the engine')
}

for (const protocol of ['raw-quic', 'webtransport'] as const) {
  t.test(`${protocol}: started, reloaded and stopped, the router leaves no follower, engine handle or credential`, async (t) => {
    const dir = await tempDir(t, 'stargate-release-')
    const ca = await createCa({ name: 'release test ca' })
    const clientCa = await createCa({ name: 'release test client ca' })
    const paths = { cert: join(dir, 'tls.crt'), key: join(dir, 'tls.key'), upstream: join(dir, 'ca.crt'), client: join(dir, 'client-ca.crt'), targets: join(dir, 'targets.yaml') }
    const identity = await createLeaf(ca, { dnsNames: HOSTS })
    await writeFile(paths.cert, identity.chainPem)
    await writeFile(paths.key, identity.keyPem)
    await writeFile(paths.upstream, ca.certPem)
    await writeFile(paths.client, clientCa.certPem)
    await writeFile(paths.targets, 'targets:\n  - {identity: stargate-0, address: 127.0.156.10, grpcPort: 50051, quicPort: 50052}\n')
    const parsed = parseConfig([
      '--discovery', 'file', '--targets-file', paths.targets,
      '--grpc-pylon-dial-addr', GRPC_PYLON_DIAL_ADDR,
      '--listen-addr', '127.0.0.1:0', '--health-listen-addr', '127.0.0.1:0',
      '--reverse-tunnel-listen-addr', '127.0.0.1:0', '--tunnel-protocol', protocol,
      '--tls-cert-path', paths.cert, '--tls-key-path', paths.key,
      '--upstream-tls-cert-path', paths.upstream, '--client-ca-path', paths.client,
      '--shutdown-drain-timeout-ms', '1000',
    ], {})
    if (parsed.kind !== 'config') throw new Error('unexpected --help')

    const before = held()
    const router = await startRouter(parsed.config, { logger: createLogSink().logger, metrics: createMetrics(new Registry(), { defaultMetrics: false }) })
    let stopped = false
    t.teardown(async () => { if (!stopped) await router.shutdown() })
    const started = held()
    t.equal(started.credentials - before.credentials, 2, 'the tunnel port holds two engine credentials: the server side and the upstream leg')
    t.ok(started.endpoints > before.endpoints, 'and a UDP endpoint')
    t.ok(router.tls.followers.consumers > 0 && router.tls.followers.listeners > 0, 'followers are registered with the TLS manager')

    // Each reload replaces what follows that material; the replaced one is released.
    const renewed = await createLeaf(ca, { dnsNames: HOSTS })
    await writeFile(paths.cert, renewed.chainPem)
    await writeFile(paths.key, renewed.keyPem)
    const nextCa = await createCa({ name: 'release test ca 2' })
    await writeFile(paths.upstream, ca.certPem + nextCa.certPem)
    await writeFile(paths.client, clientCa.certPem + nextCa.certPem)
    await router.tls.reloadNow()
    t.equal(router.tls.state().generations.server_identity, 2, 'the identity was reloaded')
    t.equal(router.tls.state().generations.upstream_trust, 2, 'the upstream trust was reloaded')
    t.equal(router.tls.state().generations.client_trust, 2, 'the client trust was reloaded')
    await waitFor(() => held().credentials === started.credentials, { timeoutMs: 10_000, message: 'the replaced credentials freed' })

    await router.shutdown()
    stopped = true
    assertReleased(t, router)
    await waitFor(() => {
      const now = held()
      return now.credentials === before.credentials && now.endpoints === before.endpoints && now.connections === before.connections
    }, { timeoutMs: 15_000, message: 'the addon back to what it held before the router started' })
    t.same(held(), before, 'no credential, endpoint or connection of the router left in the addon')
  })
}

t.test('raw-quic: stopped with a tunnel open, the router leaves no follower or engine handle', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.157' })
  const pylon = await cluster.dial('stargate-0')
  await pylon.ready()
  const tunnel = await cluster.stubs.get('stargate-0')?.tunnel()
  if (tunnel === undefined) throw new Error('no tunnel')
  t.equal(cluster.kube.router.engine.connectionCount, 2, 'the tunnel\'s two legs are the engine\'s')
  await cluster.kube.router.shutdown()
  t.match(await pylon.closedWith(), { reason: 'router shutdown' }, 'the Pylon was told')
  assertReleased(t, cluster.kube.router)
})

t.test('webtransport: stopped with an HTTP/3 session open, the router leaves no follower or engine handle', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'] })
  const result = await cluster.open('stargate-0')
  if (result.session === null) throw new Error(`no session: ${JSON.stringify(result.status)}`)
  t.equal(cluster.kube.router.engine.connectionCount, 2, 'the session\'s two connections are the engine\'s')
  await cluster.kube.router.shutdown()
  t.match(await result.session.ended, { how: 'closed', reason: 'router shutdown' }, 'the Pylon was told')
  assertReleased(t, cluster.kube.router)
})
