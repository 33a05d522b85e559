// SPEC §5: the router re-sends the unchanged set every --watch-heartbeat-ms so idle watch
// streams survive load balancers and proxies; 0 turns heartbeats off.
import t from 'tap'
import { FakeKubeApiServer } from '../fixtures/kube-apiserver.ts'
import { NAMESPACE, pod, startKubeRouter, stargateSlice } from '../fixtures/kube-router.ts'
import { sleep, waitFor } from '../fixtures/wait.ts'

async function fakeWithOneSlice (): Promise<FakeKubeApiServer> {
  const fake = await FakeKubeApiServer.start({ namespaces: [NAMESPACE] })
  fake.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.1.1'), pod('stargate-1', '127.0.1.2')]))
  return fake
}

t.test('an unchanged set is re-sent every --watch-heartbeat-ms', async (t) => {
  const kr = await startKubeRouter(t, { fake: await fakeWithOneSlice(), args: ['--watch-heartbeat-ms', '200'] })
  const watcher = kr.watch()
  const first = await watcher.nextWithIds(['stargate-0', 'stargate-1'])
  const started = Date.now()
  // Three heartbeats are due within ~0.8 s; the bound leaves room for a busy machine.
  await waitFor(() => watcher.messages.length >= 4, { timeoutMs: 2000, message: 'three heartbeats' })
  t.ok(Date.now() - started < 2000, `three heartbeats after ${Date.now() - started} ms`)
  for (const message of watcher.messages) t.same(message, first, 'a heartbeat is the same full message')
  t.ok((await kr.metric('stargate_k8s_router_watch_messages_sent_total', { reason: 'heartbeat' }) ?? 0) >= 3)
})

t.test('with an hour-long --watch-heartbeat-ms nothing follows the first message while the set is unchanged', async (t) => {
  // 0 no longer disables heartbeats: it is refused at start-up, as in the Rust router (issue 13).
  const kr = await startKubeRouter(t, { fake: await fakeWithOneSlice(), args: ['--watch-heartbeat-ms', '3600000'] })
  const watcher = kr.watch()
  await watcher.nextWithIds(['stargate-0', 'stargate-1'])
  // A negative claim needs a fixed wait: five periods of the 200 ms heartbeat above.
  await sleep(1000)
  t.equal(watcher.messages.length, 1)
  t.equal(await kr.metric('stargate_k8s_router_watch_messages_sent_total', { reason: 'heartbeat' }), 0)
})
