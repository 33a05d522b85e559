// SPEC §3 rule 6 and §5: the first WatchStargates message is the complete ready set of the
// first EndpointSlice list, and nothing is sent (and /readyz fails) before that list.
// Fake kube-apiserver + the real informer + the real router + an independent gRPC client.
import t from 'tap'
import { FakeKubeApiServer } from '../fixtures/kube-apiserver.ts'
import { NAMESPACE, pod, startKubeRouter, stargateSlice } from '../fixtures/kube-router.ts'
import { sleep, waitFor } from '../fixtures/wait.ts'

t.test('the first message lists every ready pod of the slice, sorted, with the configured dial address and watch urls', async (t) => {
  const fake = await FakeKubeApiServer.start({ namespaces: [NAMESPACE] })
  // One slice with an http port, one without: http_advertise_addr is empty for both, as the
  // Rust router sends it.
  fake.apply(stargateSlice('stargate-headless-x1', [
    pod('stargate-2', '127.0.1.3'),
    pod('stargate-0', '127.0.1.1'),
    pod('stargate-1', '127.0.1.2'),
  ], { ports: { grpc: 50051, quic: 50052, http: 8000 } }))
  fake.apply(stargateSlice('stargate-headless-x2', [pod('stargate-3', '127.0.1.4')]))
  const kr = await startKubeRouter(t, {
    fake,
    args: [
      '--grpc-pylon-dial-addr', 'https://router.example:443',
      '--remote-stargate-url', 'https://router-b.example:50071',
      '--remote-stargate-url', 'https://router-a.example:50071',
      '--remote-stargate-url', 'https://router-b.example:50071',
    ],
  })
  const watcher = kr.watch()
  const first = await watcher.next()
  t.same(first.stargates, [
    { stargate_id: 'stargate-0', advertise_addr: 'stargate-0.stargate.external:50071', http_advertise_addr: '', grpc_pylon_dial_addr: 'https://router.example:443' },
    { stargate_id: 'stargate-1', advertise_addr: 'stargate-1.stargate.external:50071', http_advertise_addr: '', grpc_pylon_dial_addr: 'https://router.example:443' },
    { stargate_id: 'stargate-2', advertise_addr: 'stargate-2.stargate.external:50071', http_advertise_addr: '', grpc_pylon_dial_addr: 'https://router.example:443' },
    { stargate_id: 'stargate-3', advertise_addr: 'stargate-3.stargate.external:50071', http_advertise_addr: '', grpc_pylon_dial_addr: 'https://router.example:443' },
  ])
  t.same(first.watch_stargate_urls, ['https://router-a.example:50071', 'https://router-b.example:50071'], 'sorted and deduplicated')

  const snapshot = await kr.snapshot()
  t.equal(snapshot.initialized, true)
  t.same(snapshot.targets.map((x) => [x.identity, x.address, x.grpcPort, x.quicPort, x.httpPort]), [
    ['stargate-0', '127.0.1.1', 50051, 50052, 8000],
    ['stargate-1', '127.0.1.2', 50051, 50052, 8000],
    ['stargate-2', '127.0.1.3', 50051, 50052, 8000],
    ['stargate-3', '127.0.1.4', 50051, 50052, null],
  ])
  t.equal(await kr.metric('stargate_k8s_router_discovery_targets'), 4)
})

t.test('a watcher gets nothing and /readyz says why until the first list completes, then both follow', async (t) => {
  const fake = await FakeKubeApiServer.start({ namespaces: [NAMESPACE] })
  fake.apply(stargateSlice('stargate-headless-x1', [pod('stargate-0', '127.0.1.1')]))
  // Every list fails until cleared, as with an overloaded apiserver.
  fake.failNext(1_000_000, 503)
  const kr = await startKubeRouter(t, { fake })
  const watcher = kr.watch()
  await waitFor(() => fake.listRequests >= 3, { message: 'the router retrying its list' })
  const notReady = await kr.readyz()
  t.equal(notReady.status, 503)
  t.equal(notReady.body, 'not ready: target snapshot not initialized yet\n')
  // A message would be sent as soon as the stream opens if the snapshot were initialized.
  await sleep(200)
  t.same(watcher.messages, [], 'no message while the snapshot is uninitialized')
  t.equal(watcher.ended, false, 'the stream stays open')
  t.equal((await kr.snapshot()).initialized, false)
  t.ok(((await kr.metric('stargate_k8s_router_discovery_watch_restarts_total')) ?? 0) >= 2, 'failed lists restart discovery')

  fake.failNext(0)
  await watcher.nextWithIds(['stargate-0'])
  t.equal(watcher.messages.length, 1)
  t.same(await kr.readyz(), { status: 200, body: 'ready\n' })
})

t.test('an empty Service initializes the snapshot: an empty message and /readyz names the missing targets', async (t) => {
  const kr = await startKubeRouter(t)
  const watcher = kr.watch()
  const first = await watcher.next()
  t.same(first.stargates, [])
  t.same(await kr.readyz(), { status: 503, body: 'not ready: no ready stargate targets\n' })
})
