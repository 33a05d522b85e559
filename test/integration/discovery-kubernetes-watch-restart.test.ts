// SPEC §3 rules 6 and 7: a watch that ends is re-established from the last resourceVersion
// (no relist); a watch answered with 410 Expired (an ERROR event with a Status of code 410,
// as a real apiserver sends after compaction) makes the informer relist, and the relist is
// applied as one change: watchers never see a half-listed set.
import t from 'tap'
import { FakeKubeApiServer } from '../fixtures/kube-apiserver.ts'
import { NAMESPACE, pod, startKubeRouter, stargateSlice } from '../fixtures/kube-router.ts'
import { idsOf } from '../fixtures/stargate-watch-client.ts'
import { waitFor } from '../fixtures/wait.ts'

const NO_HEARTBEAT = ['--watch-heartbeat-ms', '3600000']

async function fakeWithSlices (names: ReadonlyArray<[string, string, string]>): Promise<FakeKubeApiServer> {
  const fake = await FakeKubeApiServer.start({ namespaces: [NAMESPACE] })
  for (const [slice, podName, ip] of names) fake.apply(stargateSlice(slice, [pod(podName, ip)]))
  return fake
}

t.test('a dropped watch is re-established and changes made meanwhile still arrive, without a relist', async (t) => {
  const fake = await fakeWithSlices([['stargate-headless-a', 'stargate-0', '127.0.1.1']])
  const kr = await startKubeRouter(t, { fake, args: NO_HEARTBEAT })
  const watcher = kr.watch()
  await watcher.nextWithIds(['stargate-0'])
  await waitFor(() => fake.openWatches === 1, { message: 'the router watching' })
  const lists = fake.listRequests
  const watches = fake.watchRequests

  fake.dropWatches()
  // Written before the router can re-watch: it must come from the replay after its resourceVersion.
  fake.apply(stargateSlice('stargate-headless-b', [pod('stargate-1', '127.0.1.2')]))
  await watcher.nextWithIds(['stargate-0', 'stargate-1'], { from: 1 })
  await waitFor(() => fake.openWatches === 1 && fake.watchRequests === watches + 1, { message: 'one new watch' })

  fake.apply(stargateSlice('stargate-headless-c', [pod('stargate-2', '127.0.1.3')]))
  await watcher.nextWithIds(['stargate-0', 'stargate-1', 'stargate-2'], { from: 2 })
  t.equal(fake.listRequests, lists, 'no relist after a clean watch end')
  t.same(watcher.messages.map(idsOf), [['stargate-0'], ['stargate-0', 'stargate-1'], ['stargate-0', 'stargate-1', 'stargate-2']])
})

t.test('a 410 on re-watch makes the router relist, and changes made meanwhile, deletions included, arrive as one message', async (t) => {
  const fake = await fakeWithSlices([
    ['stargate-headless-a', 'stargate-0', '127.0.1.1'],
    ['stargate-headless-b', 'stargate-1', '127.0.1.2'],
  ])
  const kr = await startKubeRouter(t, { fake, args: NO_HEARTBEAT })
  const watcher = kr.watch()
  await watcher.nextWithIds(['stargate-0', 'stargate-1'])
  await waitFor(() => fake.openWatches === 1, { message: 'the router watching' })
  const lists = fake.listRequests

  // All before the router can reconnect: its resourceVersion is compacted away, so the next
  // watch gets the 410 ERROR event and the deletion is only visible through a relist.
  fake.compact()
  fake.dropWatches()
  fake.remove(NAMESPACE, 'stargate-headless-b')
  fake.apply(stargateSlice('stargate-headless-c', [pod('stargate-2', '127.0.1.3')]))

  await watcher.nextWithIds(['stargate-0', 'stargate-2'], { from: 1 })
  t.equal(fake.listRequests, lists + 1, 'exactly one relist')
  t.same(watcher.messages.map(idsOf), [['stargate-0', 'stargate-1'], ['stargate-0', 'stargate-2']],
    'the relist is published as one change, never half-applied')

  // The watch that follows the relist delivers later changes.
  await waitFor(() => fake.openWatches === 1, { message: 'the router watching again' })
  fake.remove(NAMESPACE, 'stargate-headless-a')
  await watcher.nextWithIds(['stargate-2'], { from: 2 })
  t.equal(fake.listRequests, lists + 1)
})

t.test('a relist after an outage with compaction never shows watchers a partial set', async (t) => {
  // Several slices, several watchers, heartbeats on: many chances to observe a half-listed set.
  const fake = await fakeWithSlices([
    ['stargate-headless-a', 'stargate-0', '127.0.1.1'],
    ['stargate-headless-b', 'stargate-1', '127.0.1.2'],
    ['stargate-headless-c', 'stargate-2', '127.0.1.3'],
  ])
  const kr = await startKubeRouter(t, { fake, args: ['--watch-heartbeat-ms', '50'] })
  const watchers = [kr.watch(), kr.watch(), kr.watch()]
  const before = ['stargate-0', 'stargate-1', 'stargate-2']
  for (const w of watchers) await w.nextWithIds(before)

  await fake.goDown()
  fake.remove(NAMESPACE, 'stargate-headless-b')
  fake.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.1.1'), pod('stargate-3', '127.0.1.4')]))
  fake.apply(stargateSlice('stargate-headless-d', [pod('stargate-4', '127.0.1.5')]))
  fake.compact()
  const lists = fake.listRequests
  await waitFor(async () => (await kr.metric('stargate_k8s_router_discovery_watch_restarts_total') ?? 0) >= 1, { message: 'the router noticing the outage' })
  await fake.comeBack()

  const after = ['stargate-0', 'stargate-2', 'stargate-3', 'stargate-4']
  for (const w of watchers) await w.nextWithIds(after)
  t.ok(fake.listRequests > lists, 'the router relisted')
  const allowed = new Set([before.join(','), after.join(',')])
  for (const [i, w] of watchers.entries()) {
    const seen = new Set(w.messages.map((m) => idsOf(m).join(',')))
    t.same([...seen].filter((ids) => !allowed.has(ids)), [], `watcher ${i} saw only the full sets before and after`)
  }
})
