// SPEC §5: the router re-sends the unchanged set --watch-heartbeat-ms after the last message so
// idle watch streams survive load balancers and proxies; 0 is refused at start-up.
import t from 'tap'
import http2 from 'node:http2'
import type { AddressInfo } from 'node:net'
import { Registry } from 'prom-client'
import { FakeKubeApiServer } from '../fixtures/kube-apiserver.ts'
import { NAMESPACE, pod, startKubeRouter, stargateSlice } from '../fixtures/kube-router.ts'
import { sleep, waitFor } from '../fixtures/wait.ts'
import { ManualTimers } from '../fixtures/manual-timers.ts'
import { StargateWatchClient, idsOf } from '../fixtures/stargate-watch-client.ts'
import { createLogSink } from '../fixtures/log-sink.ts'
import { WatchStargatesHub } from '../../lib/control-plane/watch-stargates.ts'
import { SnapshotStore } from '../../lib/discovery/snapshot-store.ts'
import { podTarget, type PodTarget } from '../../lib/discovery/types.ts'
import { compileHostnameTemplate } from '../../lib/routing/hostname-template.ts'
import { createMetrics, type RouterMetrics } from '../../lib/metrics/metrics.ts'

function target (identity: string, address: string): PodTarget {
  return podTarget({ identity, namespace: NAMESPACE, address, grpcPort: 50051, quicPort: 50052, httpPort: null, nodeName: null, zone: null, serving: true })
}

/** Router metrics and a reader of watch_messages_sent_total by reason. */
function countingMetrics (): { metrics: RouterMetrics, sent: (reason: string) => Promise<number> } {
  const metrics = createMetrics(new Registry(), { defaultMetrics: false })
  return {
    metrics,
    sent: async (reason) => (await metrics.watchMessagesSent.get()).values.find((v) => v.labels.reason === reason)?.value ?? 0,
  }
}

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
  // 0 does not disable heartbeats: it is refused at start-up, as in the Rust router.
  const kr = await startKubeRouter(t, { fake: await fakeWithOneSlice(), args: ['--watch-heartbeat-ms', '3600000'] })
  const watcher = kr.watch()
  await watcher.nextWithIds(['stargate-0', 'stargate-1'])
  // A negative claim needs a fixed wait: five periods of the 200 ms heartbeat above.
  await sleep(1000)
  t.equal(watcher.messages.length, 1)
  t.equal(await kr.metric('stargate_k8s_router_watch_messages_sent_total', { reason: 'heartbeat' }), 0)
})

// Upstream sends the unchanged set exactly --watch-heartbeat-ms after the last
// message on a stream. A shared interval that skipped watchers "sent to recently" let a gap
// reach 1.5 heartbeats (a change just after a tick: the next tick skipped, the one after
// sent), and shrank the gap after a change to as little as half a heartbeat. Here the hub's
// timers run on a clock the test moves (test/fixtures/manual-timers.ts) and a grpc-js client
// reads the stream: every heartbeat falls exactly one period after the message before it.
t.test('each heartbeat is sent exactly --watch-heartbeat-ms after the last message to that watcher', async (t) => {
  const H = 1000
  const clock = new ManualTimers()
  const store = new SnapshotStore()
  store.stage('stargate-0', target('stargate-0', '127.0.1.1'))
  store.markInitialized()
  store.flush()
  const { metrics, sent } = countingMetrics()
  const compiled = compileHostnameTemplate('{pod_name}.stargate.external', NAMESPACE)
  if (!compiled.ok) throw new Error(compiled.message)
  const hub = new WatchStargatesHub({ snapshot: store, template: compiled.template, advertisedGrpcPort: 50071, grpcPylonDialAddr: 'https://gw.example.com', remoteStargateUrls: [], heartbeatMs: H, metrics, logger: createLogSink().logger, timers: clock })
  hub.open()
  const server = http2.createServer()
  server.on('stream', (stream) => { hub.handle(stream) })
  await new Promise<void>((resolve) => { server.listen(0, '127.0.0.1', resolve) })
  const first = new StargateWatchClient(`127.0.0.1:${(server.address() as AddressInfo).port}`)
  t.teardown(async () => {
    first.close()
    hub.close()
    await new Promise<void>((resolve) => { server.close(() => { resolve() }) })
  })
  await first.nextWithIds(['stargate-0'])
  t.equal(await sent('initial'), 1)

  // The first message went out at 0: nothing before H, a heartbeat at H.
  clock.advance(H - 1)
  t.equal(await sent('heartbeat'), 0, 'nothing 1 ms before the period')
  clock.advance(1)
  t.equal(await sent('heartbeat'), 1, 'a heartbeat exactly one period after the first message')
  await waitFor(() => first.messages.length === 2, { message: 'the heartbeat at the client' })

  // A change a third of a period later restarts the period from the change.
  clock.advance(H / 4)
  const second = new StargateWatchClient(`127.0.0.1:${(server.address() as AddressInfo).port}`)
  t.teardown(() => { second.close() })
  await second.nextWithIds(['stargate-0'])
  clock.advance(H / 12)
  store.stage('stargate-1', target('stargate-1', '127.0.1.2'))
  store.flush()
  const changedAt = clock.now
  await first.nextWithIds(['stargate-0', 'stargate-1'], { from: 2 })
  t.equal(await sent('change'), 2, 'the change went to both watchers')
  clock.advance(changedAt + H - 1 - clock.now)
  t.equal(await sent('heartbeat'), 1, 'no heartbeat before a full period after the change (the old tick at 2H fell here)')
  clock.advance(1)
  t.equal(await sent('heartbeat'), 3, 'both watchers get theirs one period after the change')
  await waitFor(() => first.messages.length === 4 && second.messages.length === 3, { message: 'the heartbeats at the clients' })
  t.same(idsOf(first.messages[3]), ['stargate-0', 'stargate-1'], 'a heartbeat is the full current set')

  // From there each goes on one period at a time.
  clock.advance(H)
  t.equal(await sent('heartbeat'), 5)
  t.equal(clock.armed, 2, 'one timer per watcher')
  second.close()
  await waitFor(() => hub.size === 1, { message: 'the second watcher gone' })
  t.equal(clock.armed, 1, 'a closed watch stream leaves no timer')
  hub.close()
  t.equal(clock.armed, 0, 'closing the hub leaves no timer')
})

t.test('with a real clock and a grpc-js client, heartbeat gaps stay one period, also right after a change', async (t) => {
  const H = 1000
  const kr = await startKubeRouter(t, { fake: await fakeWithOneSlice(), args: ['--watch-heartbeat-ms', String(H)] })
  const watcher = kr.watch()
  await watcher.nextWithIds(['stargate-0', 'stargate-1'])
  await waitFor(() => watcher.messages.length >= 2, { timeoutMs: 5000, message: 'a first heartbeat' })
  // A change a third of a period after a heartbeat: the old tick would follow it 2H/3 later.
  await sleep(Math.max(0, watcher.arrivals[1] as number + H / 3 - performance.now()))
  kr.fake.apply(stargateSlice('stargate-headless-b', [pod('stargate-2', '127.0.1.3')]))
  const change = watcher.messages.indexOf(await watcher.nextWithIds(['stargate-0', 'stargate-1', 'stargate-2'], { from: 2 }))
  await waitFor(() => watcher.messages.length >= change + 3, { timeoutMs: 10_000, message: 'two heartbeats after the change' })
  const gaps = watcher.arrivals.slice(1).map((at, i) => ({ at: i + 1, ms: at - (watcher.arrivals[i] as number) }))
  for (const { at, ms } of gaps) {
    if (at === change) continue // the change itself comes when the test makes it
    // What must not happen: a gap of 1.5 periods, or a tick 2H/3 after a change. Timers never fire
    // early, so a gap under H is the client reading a message late; 0.75 H and 1.4 H leave 250 and
    // 400 ms of such jitter on a loaded machine and still tell both apart (the manual-clock test
    // above pins the exact schedule).
    t.ok(ms >= H * 0.75 && ms <= H * 1.4, `message ${at} came ${ms.toFixed(0)} ms after the one before (period ${H} ms)`)
  }
})
