// SPEC §10: the peer source on the real @kubernetes/client-node informer against the
// fake kube-apiserver. A buffering listener on the PeerSet records exactly what a subscriber
// sees, so ordering under churn is asserted on the delivered sequence itself.
import t, { type Test } from 'tap'
import { Registry } from 'prom-client'
import { KubernetesPeerSource } from '../../lib/discovery/peers-kubernetes.ts'
import { PeerSet, type PeerChange, type PeerSelf } from '../../lib/discovery/peers.ts'
import { createPeerMetrics, type PeerMetrics } from '../../lib/discovery/peer-metrics.ts'
import { FakeKubeApiServer } from '../fixtures/kube-apiserver.ts'
import { createLogSink, type LogSink } from '../fixtures/log-sink.ts'
import { waitFor } from '../fixtures/wait.ts'
import { ROUTER_NAMESPACE, ROUTER_SERVICE, routerSlice } from '../fixtures/peer-cluster.ts'

interface Harness {
  readonly fake: FakeKubeApiServer
  readonly peers: PeerSet
  readonly metrics: PeerMetrics
  readonly log: LogSink
  /** Every change delivered, as "add id" / "delete id" / "update id address:port". */
  readonly seen: string[]
}

function describe (change: PeerChange): string {
  return change.type === 'update' ? `update ${change.peer.id} ${change.peer.address}:${change.peer.port}` : `${change.type} ${change.peer.id}`
}

async function startSource (t: Test, self: PeerSelf = { address: null, id: null }, fake?: FakeKubeApiServer): Promise<Harness> {
  const api = fake ?? await FakeKubeApiServer.start({ namespaces: [ROUTER_NAMESPACE] })
  t.teardown(() => api.close())
  const peers = new PeerSet({ self })
  const seen: string[] = []
  peers.subscribe((change) => { seen.push(describe(change)) })
  const metrics = createPeerMetrics(new Registry())
  const log = createLogSink()
  const source = new KubernetesPeerSource({
    kubeConfig: api.kubeConfig(),
    namespace: ROUTER_NAMESPACE,
    serviceName: ROUTER_SERVICE,
    port: { name: 'health', fallback: 8080 },
    peers,
    metrics,
    logger: log.logger,
    backoff: { baseMs: 50, maxMs: 200 },
  })
  source.start()
  t.teardown(() => source.stop())
  return { fake: api, peers, metrics, log, seen }
}

t.test('under rapid churn each add of a peer is followed by its delete, in that order, and the set ends as the slices say', async (t) => {
  const h = await startSource(t)
  h.fake.apply(routerSlice(9090, [{ pod: 'router-0', ip: '10.0.0.1' }]))
  await waitFor(() => h.peers.size === 1, { message: 'the first peer' })
  const rounds = 40
  for (let i = 0; i < rounds; i++) {
    h.fake.apply(routerSlice(9090, [{ pod: 'router-x', ip: '10.0.0.9' }], 'churn'))
    h.fake.remove(ROUTER_NAMESPACE, 'churn')
  }
  h.fake.apply(routerSlice(9090, [{ pod: 'router-last', ip: '10.0.0.10' }], 'last'))
  await waitFor(() => h.peers.get('routers/router-last') !== undefined, { message: 'the last write' })

  const churned = h.seen.filter((s) => s.endsWith(' routers/router-x'))
  t.strictSame(churned, Array.from({ length: rounds }, () => ['add routers/router-x', 'delete routers/router-x']).flat(), 'add, delete, add, delete, ... never reordered or merged')
  t.strictSame(h.peers.peers().map((p) => p.id), ['routers/router-0', 'routers/router-last'])
})

t.test('a peer that moves from one slice to another is updated, never deleted and re-added', async (t) => {
  const h = await startSource(t)
  h.fake.apply(routerSlice(9090, [{ pod: 'router-0', ip: '10.0.0.1' }], 'slice-a'))
  await waitFor(() => h.peers.size === 1, { message: 'the peer' })
  // The controller adds the endpoint to the new slice first, then removes it from the old.
  h.fake.apply(routerSlice(9191, [{ pod: 'router-0', ip: '10.0.0.1' }], 'slice-b'))
  h.fake.apply(routerSlice(9090, [], 'slice-a'))
  await waitFor(() => h.peers.get('routers/router-0')?.port === 9191 && h.seen.length >= 2, { message: 'the move' })
  t.strictSame(h.seen, ['add routers/router-0', 'update routers/router-0 10.0.0.1:9191'])
})

t.test('endpoints without a targetRef are peers named by their address', async (t) => {
  const h = await startSource(t)
  h.fake.apply(routerSlice(9090, [{ ip: '10.0.0.7' }, { pod: 'router-1', ip: '10.0.0.8' }]))
  await waitFor(() => h.peers.size === 2, { message: 'both peers' })
  t.strictSame(h.peers.peers(), [
    { id: 'routers/10.0.0.7', address: '10.0.0.7', port: 9090 },
    { id: 'routers/router-1', address: '10.0.0.8', port: 9090 },
  ])
})

t.test('this replica is not its own peer, by POD_IP or by POD_NAME', async (t) => {
  const byIp = await startSource(t, { address: '10.0.0.1', id: null })
  byIp.fake.apply(routerSlice(9090, [{ pod: 'router-0', ip: '10.0.0.1' }, { pod: 'router-1', ip: '10.0.0.2' }]))
  await waitFor(() => byIp.peers.size === 1, { message: 'one peer' })
  t.strictSame(byIp.peers.peers().map((p) => p.id), ['routers/router-1'])
  const byName = await startSource(t, { address: null, id: 'routers/router-1' })
  byName.fake.apply(routerSlice(9090, [{ pod: 'router-0', ip: '10.0.0.1' }, { pod: 'router-1', ip: '10.0.0.2' }]))
  await waitFor(() => byName.peers.size === 1, { message: 'one peer' })
  t.strictSame(byName.peers.peers().map((p) => p.id), ['routers/router-0'])
})

t.test('a relist after a compaction changes nothing when nothing changed, and applies what did', async (t) => {
  const h = await startSource(t)
  h.fake.apply(routerSlice(9090, [{ pod: 'router-0', ip: '10.0.0.1' }, { pod: 'router-1', ip: '10.0.0.2' }]))
  await waitFor(() => h.peers.size === 2, { message: 'both peers' })
  const lists = h.fake.listRequests
  h.fake.compact()
  h.fake.dropWatches()
  await waitFor(() => h.fake.listRequests > lists && h.fake.openWatches > 0, { message: 'the relist' })
  t.strictSame(h.seen, ['add routers/router-0', 'add routers/router-1'], 'no spurious changes')
  h.fake.apply(routerSlice(9090, [{ pod: 'router-1', ip: '10.0.0.2' }]))
  await waitFor(() => h.peers.size === 1, { message: 'the removal' })
})

t.test('while the API server is unreachable the last peers stay, the watch restarts, and changes made meanwhile arrive after it returns', async (t) => {
  const h = await startSource(t)
  h.fake.apply(routerSlice(9090, [{ pod: 'router-0', ip: '10.0.0.1' }]))
  await waitFor(() => h.peers.size === 1, { message: 'the peer' })
  await h.fake.goDown()
  await waitFor(async () => ((await h.metrics.peerWatchRestarts.get()).values[0]?.value ?? 0) >= 1, { message: 'a restart' })
  t.strictSame(h.peers.peers().map((p) => p.id), ['routers/router-0'], 'last peers kept')
  h.fake.apply(routerSlice(9090, [{ pod: 'router-1', ip: '10.0.0.2' }]))
  await h.fake.comeBack()
  await waitFor(() => h.peers.get('routers/router-1') !== undefined && h.peers.size === 1, { message: 'the new set', timeoutMs: 5000 })
  t.strictSame(h.seen, ['add routers/router-0', 'delete routers/router-0', 'add routers/router-1'])
})

t.test('a slice without the health port is logged and its peers use the fallback port', async (t) => {
  const h = await startSource(t)
  h.fake.apply(routerSlice(null, [{ pod: 'router-0', ip: '10.0.0.1' }]))
  await waitFor(() => h.peers.size === 1, { message: 'the peer' })
  t.equal(h.peers.get('routers/router-0')?.port, 8080)
  const line = h.log.lines().find((l) => l.msg === 'peer endpointslice has no health port by that name; using --peer-health-port')
  t.match(line, { slice: `${ROUTER_NAMESPACE}/${ROUTER_SERVICE}-abcde`, portName: 'health', fallbackPort: 8080 })
})
