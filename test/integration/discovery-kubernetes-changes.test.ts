// SPEC §3 rules 2 and 6, §5: EndpointSlice adds, updates and deletes reach WatchStargates
// watchers as one new full message per change of the advertised set; a change that
// advertises nothing new (an IP) updates the snapshot without a message.
// Heartbeats are off so every message a watcher gets is a change.
import t from 'tap'
import { FakeKubeApiServer } from '../fixtures/kube-apiserver.ts'
import { NAMESPACE, pod, startKubeRouter, stargateSlice } from '../fixtures/kube-router.ts'
import { idsOf } from '../fixtures/stargate-watch-client.ts'
import { waitFor } from '../fixtures/wait.ts'

const NO_HEARTBEAT = ['--watch-heartbeat-ms', '3600000']

t.test('adding, updating and deleting slices each send one new full message', async (t) => {
  const fake = await FakeKubeApiServer.start({ namespaces: [NAMESPACE] })
  fake.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.1.1'), pod('stargate-1', '127.0.1.2')]))
  const kr = await startKubeRouter(t, { fake, args: NO_HEARTBEAT })
  const watcher = kr.watch()
  await watcher.nextWithIds(['stargate-0', 'stargate-1'])

  // add: a second slice
  fake.apply(stargateSlice('stargate-headless-b', [pod('stargate-2', '127.0.1.3')]))
  await watcher.nextWithIds(['stargate-0', 'stargate-1', 'stargate-2'], { from: 1 })

  // update: readiness flips to not ready (the controller writes ready=false, serving=false)
  fake.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.1.1'), pod('stargate-1', '127.0.1.2', { ready: false })]))
  await watcher.nextWithIds(['stargate-0', 'stargate-2'], { from: 2 })

  // update: back to ready, and stargate-0 starts terminating (ready absent, so terminating alone removes it)
  fake.apply(stargateSlice('stargate-headless-a', [
    pod('stargate-0', '127.0.1.1', { ready: null, serving: true, terminating: true }),
    pod('stargate-1', '127.0.1.2'),
  ]))
  await watcher.nextWithIds(['stargate-1', 'stargate-2'], { from: 3 })

  // delete: the second slice goes away
  fake.remove(NAMESPACE, 'stargate-headless-b')
  await watcher.nextWithIds(['stargate-1'], { from: 4 })

  t.same(watcher.messages.map(idsOf), [
    ['stargate-0', 'stargate-1'],
    ['stargate-0', 'stargate-1', 'stargate-2'],
    ['stargate-0', 'stargate-2'],
    ['stargate-1', 'stargate-2'],
    ['stargate-1'],
  ], 'exactly one message per change, each a full set')
})

// Upstream's rule since stargate v0.14.2 (NVIDIA/nvcf#1271): ready and not
// terminating, whatever serving says, so a warming Stargate behind a publishNotReadyAddresses
// Service (ready=true, serving=false) is advertised and gets its Pylons before gateway traffic.
t.test('endpoints that are ready and not terminating are advertised, whatever serving says (Kubernetes defaults for absent conditions)', async (t) => {
  const kr = await startKubeRouter(t, { args: NO_HEARTBEAT })
  const watcher = kr.watch()
  await watcher.nextWithIds([])
  // [ready, serving, terminating, advertised]; null = condition absent from the slice
  const cases: Array<[boolean | null, boolean | null, boolean | null, boolean]> = [
    [true, true, false, true],
    [null, null, null, true], // all absent: ready defaults to true, serving to ready
    [null, true, null, true],
    [true, null, null, true],
    [false, true, false, false], // serving but not ready: not a target
    [false, null, null, false], // serving defaults to ready = false
    [null, false, null, true], // not serving, ready by default: warming
    [true, false, false, true], // warming behind a publishNotReadyAddresses Service
    [null, null, true, false], // terminating
    [true, true, true, false],
    [true, false, true, false], // terminating behind a publishNotReadyAddresses Service (ready stays true)
    [false, true, true, false], // a terminating pod that still serves (graceful shutdown)
  ]
  const endpoints = cases.map(([ready, serving, terminating], i) =>
    pod(`pod-${String(i).padStart(2, '0')}`, `127.0.2.${i + 1}`, { ready, serving, terminating }))
  kr.fake.apply(stargateSlice('stargate-headless-conditions', endpoints))
  const want = cases.flatMap(([, , , advertised], i) => advertised ? [`pod-${String(i).padStart(2, '0')}`] : [])
  const message = await watcher.next((m) => m.stargates.length > 0)
  t.same(idsOf(message), want)
  const snapshot = await kr.snapshot()
  t.same(snapshot.targets.map((x) => [x.identity, x.serving]), [['pod-00', true], ['pod-01', true], ['pod-02', true], ['pod-03', true], ['pod-06', false], ['pod-07', false]], '/debug/snapshot says which targets are not serving')
  t.same(snapshot.unready.map((x) => x.identity), ['pod-04', 'pod-05'], '/debug/snapshot lists the pods that are present but not ready')
  t.equal(await kr.metric('stargate_k8s_router_discovery_targets_not_serving'), 2)
  t.equal(await kr.metric('stargate_k8s_router_discovery_unready_pods'), 2)
})

t.test('an address change alone sends no new message but /debug/snapshot shows the new address and generation', async (t) => {
  const fake = await FakeKubeApiServer.start({ namespaces: [NAMESPACE] })
  fake.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.1.1')]))
  const kr = await startKubeRouter(t, { fake, args: NO_HEARTBEAT })
  const watcher = kr.watch()
  await watcher.nextWithIds(['stargate-0'])
  const before = await kr.snapshot()
  t.equal(before.targets[0]?.address, '127.0.1.1')

  fake.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.1.9')]))
  const after = await waitFor(async () => {
    const s = await kr.snapshot()
    return s.targets[0]?.address === '127.0.1.9' ? s : null
  }, { message: 'the new address in /debug/snapshot' })
  t.equal(after.generation, before.generation + 1, 'a new generation')
  t.not(after.digest, before.digest, 'a new digest')

  // A later change that does advertise something must be the very next message.
  fake.apply(stargateSlice('stargate-headless-b', [pod('stargate-1', '127.0.1.2')]))
  await watcher.nextWithIds(['stargate-0', 'stargate-1'], { from: 1 })
  t.same(watcher.messages.map(idsOf), [['stargate-0'], ['stargate-0', 'stargate-1']], 'no message for the address change')
})

t.test('/readyz turns 503 with "no ready stargate targets" when every pod becomes not ready, and 200 again after', async (t) => {
  const fake = await FakeKubeApiServer.start({ namespaces: [NAMESPACE] })
  const slice = (ready: boolean): ReturnType<typeof stargateSlice> =>
    stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.1.1', { ready }), pod('stargate-1', '127.0.1.2', { ready })])
  fake.apply(slice(true))
  const kr = await startKubeRouter(t, { fake, args: NO_HEARTBEAT })
  const watcher = kr.watch()
  await watcher.nextWithIds(['stargate-0', 'stargate-1'])
  t.same(await kr.readyz(), { status: 200, body: 'ready\n' })

  fake.apply(slice(false))
  await watcher.nextWithIds([], { from: 1 })
  t.same(await kr.readyz(), { status: 503, body: 'not ready: no ready stargate targets\n' })
  t.equal(await kr.metric('stargate_k8s_router_discovery_targets'), 0)

  fake.apply(slice(true))
  await watcher.nextWithIds(['stargate-0', 'stargate-1'], { from: 2 })
  t.same(await kr.readyz(), { status: 200, body: 'ready\n' })
})
