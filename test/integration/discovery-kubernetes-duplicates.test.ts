// SPEC §3 rule 5: while the EndpointSlice controller moves a pod between slices, one pod can
// be listed in two slices with different addresses. The copy from the most recently
// observed slice event wins, whatever the slice names; one identity is one target, always.
import t from 'tap'
import { NAMESPACE, pod, startKubeRouter, stargateSlice, type KubeRouter } from '../fixtures/kube-router.ts'
import { idsOf } from '../fixtures/stargate-watch-client.ts'
import { waitFor } from '../fixtures/wait.ts'

async function addressOf (kr: KubeRouter, identity: string, want: string): Promise<string> {
  return waitFor(async () => {
    const snapshot = await kr.snapshot()
    const target = snapshot.targets.find((x) => x.identity === identity)
    return target?.address === want ? target.address : null
  }, { message: `${identity} at ${want} in /debug/snapshot` })
}

// Slice names sort the other way round in the second case, so neither order of names nor
// order of creation can explain a pass: only the order of observation.
const orders: Array<[string, string, string]> = [
  ['the slice named first is observed last', 'stargate-headless-b', 'stargate-headless-a'],
  ['the slice named last is observed last', 'stargate-headless-a', 'stargate-headless-b'],
]

for (const [why, first, second] of orders) {
  t.test(`a pod in two slices takes the address of the later observation (${why})`, async (t) => {
    const kr = await startKubeRouter(t, { args: ['--watch-heartbeat-ms', '3600000'] })
    const watcher = kr.watch()
    await watcher.nextWithIds([])

    kr.fake.apply(stargateSlice(first, [pod('stargate-7d9f8b6c4-x2x7q', '127.0.3.1')]))
    await addressOf(kr, 'stargate-7d9f8b6c4-x2x7q', '127.0.3.1')
    kr.fake.apply(stargateSlice(second, [pod('stargate-7d9f8b6c4-x2x7q', '127.0.3.2')]))
    t.equal(await addressOf(kr, 'stargate-7d9f8b6c4-x2x7q', '127.0.3.2'), '127.0.3.2', 'the later slice wins')

    // The first slice is observed again (e.g. its other endpoints changed): now it is the later one.
    kr.fake.apply(stargateSlice(first, [pod('stargate-7d9f8b6c4-x2x7q', '127.0.3.1'), pod('stargate-other', '127.0.3.9')]))
    t.equal(await addressOf(kr, 'stargate-7d9f8b6c4-x2x7q', '127.0.3.1'), '127.0.3.1', 're-observing the first slice makes it win')

    // The controller finishes the move: the pod leaves the first slice; the second slice's copy remains.
    kr.fake.apply(stargateSlice(first, [pod('stargate-other', '127.0.3.9')]))
    t.equal(await addressOf(kr, 'stargate-7d9f8b6c4-x2x7q', '127.0.3.2'), '127.0.3.2', 'the remaining copy takes over')

    const snapshot = await kr.snapshot()
    t.same(snapshot.targets.map((x) => x.identity), ['stargate-7d9f8b6c4-x2x7q', 'stargate-other'], 'one target per identity')
    for (const message of watcher.messages) {
      const ids = idsOf(message)
      t.equal(new Set(ids).size, ids.length, `no identity advertised twice in [${ids.join(', ')}]`)
    }
    t.same(idsOf(watcher.last), ['stargate-7d9f8b6c4-x2x7q', 'stargate-other'])
  })
}

t.test('a pod not ready in the later slice is not advertised even though the earlier slice lists it ready', async (t) => {
  const kr = await startKubeRouter(t, { args: ['--watch-heartbeat-ms', '3600000'] })
  const watcher = kr.watch()
  await watcher.nextWithIds([])
  kr.fake.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.3.1')]))
  await watcher.nextWithIds(['stargate-0'], { from: 1 })
  kr.fake.apply(stargateSlice('stargate-headless-b', [pod('stargate-0', '127.0.3.2', { ready: false })]))
  await watcher.nextWithIds([], { from: 2 })
  kr.fake.remove(NAMESPACE, 'stargate-headless-b')
  const back = await watcher.nextWithIds(['stargate-0'], { from: 3 })
  t.ok(back, 'deleting the later slice brings back the earlier ready copy')
  t.equal((await kr.snapshot()).targets[0]?.address, '127.0.3.1')
})
