// SPEC §3 rule 7, the API server down for 10 s then back: while the API server is
// unreachable the router keeps serving the last snapshot over WatchStargates (to watchers
// already connected and to new ones), counts its restarts and reports the snapshot's age;
// once the API server is back, changes flow again.
import t from 'tap'
import { FakeKubeApiServer } from '../fixtures/kube-apiserver.ts'
import { NAMESPACE, pod, startKubeRouter, stargateSlice } from '../fixtures/kube-router.ts'
import { idsOf } from '../fixtures/stargate-watch-client.ts'
import { sleep, waitFor } from '../fixtures/wait.ts'

const OUTAGE_MS = 10_000
const RESTARTS = 'stargate_k8s_router_discovery_watch_restarts_total'
const AGE = 'stargate_k8s_router_discovery_snapshot_age_seconds'

t.test('during a 10 s API server outage the last set is still served, restarts are counted and the snapshot ages; after it, changes arrive', async (t) => {
  const fake = await FakeKubeApiServer.start({ namespaces: [NAMESPACE] })
  fake.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.1.1'), pod('stargate-1', '127.0.1.2')]))
  const kr = await startKubeRouter(t, { fake, args: ['--watch-heartbeat-ms', '500'] })
  const set = ['stargate-0', 'stargate-1']
  const early = kr.watch()
  await early.nextWithIds(set)
  await waitFor(() => fake.openWatches === 1, { message: 'the router watching' })
  t.equal(await kr.metric(AGE), 0, 'age 0 while the watch is up')
  const restartsBefore = await kr.metric(RESTARTS) ?? 0

  const downAt = Date.now()
  await fake.goDown()

  await waitFor(async () => (await kr.metric(RESTARTS) ?? 0) >= restartsBefore + 2, { message: 'restarts counted during the outage' })
  const age = await waitFor(async () => {
    const value = await kr.metric(AGE) ?? 0
    return value > 0 ? value : null
  }, { message: 'the snapshot age growing' })
  t.ok(age > 0, `snapshot age ${age}s during the outage`)
  t.ok((await kr.snapshot()).ageSeconds > 0, '/debug/snapshot reports the age too')

  // A watcher connecting in the middle of the outage gets the last set at once.
  await sleep(OUTAGE_MS / 2 - (Date.now() - downAt))
  const received = early.messages.length
  const late = kr.watch()
  t.same(idsOf(await late.next()), set, 'a new watcher gets the last set during the outage')
  await early.next(() => true, { from: received, message: 'a heartbeat during the outage' })
  t.same(await kr.readyz(), { status: 200, body: 'ready\n' }, 'still ready: staleness is not limited by default')

  await sleep(OUTAGE_MS - (Date.now() - downAt))
  t.same(early.messages.filter((m) => idsOf(m).join(',') !== set.join(',')), [], 'every message during the outage is the last set')
  const restartsDuring = await kr.metric(RESTARTS) ?? 0
  t.ok(restartsDuring >= restartsBefore + 5, `restarted ${restartsDuring - restartsBefore} times in ${OUTAGE_MS / 1000} s (backoff capped at 500 ms)`)
  t.ok((await kr.metric(AGE) ?? 0) >= 5, 'the age covers the outage')
  t.equal(early.ended, false, 'the watch stream survived the outage')

  await fake.comeBack()
  await waitFor(() => fake.openWatches === 1, { timeoutMs: 5000, message: 'the router watching again' })
  await waitFor(async () => await kr.metric(AGE) === 0, { message: 'the age back to 0' })
  fake.apply(stargateSlice('stargate-headless-b', [pod('stargate-2', '127.0.1.3')]))
  const after = [...set, 'stargate-2']
  await early.nextWithIds(after)
  await late.nextWithIds(after)
})
