// SPEC §5: thousands of watchers share one encoded message per snapshot generation; here
// 50 independent grpc-js clients, each on its own HTTP/2 connection, all get the same
// message after one EndpointSlice change.
import t from 'tap'
import { FakeKubeApiServer } from '../fixtures/kube-apiserver.ts'
import { NAMESPACE, pod, startKubeRouter, stargateSlice } from '../fixtures/kube-router.ts'
import { idsOf } from '../fixtures/stargate-watch-client.ts'
import { waitFor } from '../fixtures/wait.ts'

const WATCHERS = 50

t.test('50 watchers all get the same new message after one change', async (t) => {
  const fake = await FakeKubeApiServer.start({ namespaces: [NAMESPACE] })
  fake.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.1.1')]))
  const kr = await startKubeRouter(t, { fake, args: ['--watch-heartbeat-ms', '3600000'] })
  const watchers = Array.from({ length: WATCHERS }, () => kr.watch())
  await Promise.all(watchers.map((w) => w.nextWithIds(['stargate-0'], { timeoutMs: 10_000 })))
  await waitFor(async () => await kr.metric('stargate_k8s_router_watch_streams_active') === WATCHERS, { message: `${WATCHERS} open streams` })

  fake.apply(stargateSlice('stargate-headless-b', [pod('stargate-1', '127.0.1.2')]))
  const got = await Promise.all(watchers.map((w) => w.nextWithIds(['stargate-0', 'stargate-1'], { from: 1, timeoutMs: 10_000 })))
  const reference = got[0]
  t.ok(got.every((m) => JSON.stringify(m) === JSON.stringify(reference)), 'every watcher got the identical message')
  t.ok(watchers.every((w) => w.messages.length === 2), 'exactly one message per watcher for the change')
  t.same(idsOf(reference), ['stargate-0', 'stargate-1'])
  t.equal(await kr.metric('stargate_k8s_router_watch_messages_sent_total', { reason: 'change' }), WATCHERS)
})
