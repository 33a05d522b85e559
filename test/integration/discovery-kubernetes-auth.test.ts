// SPEC §3 rule 7 and §12, a wrong token: API server rejections (401 for the
// credentials, 403 for RBAC) stop the informer; the router restarts it with backoff, counts
// the restarts, logs a line that names the cause and the fix (never the token itself), and
// recovers once the API server accepts it again.
import t from 'tap'
import { FakeKubeApiServer } from '../fixtures/kube-apiserver.ts'
import { NAMESPACE, pod, startKubeRouter, stargateSlice, type KubeRouter } from '../fixtures/kube-router.ts'
import { waitFor } from '../fixtures/wait.ts'

const RESTARTS = 'stargate_k8s_router_discovery_watch_restarts_total'
const WATCH_FAILED = 'endpointslice watch failed; keeping the last known slices and restarting'
const ROUTER_TOKEN = 'sa-token-0123456789abcdef-never-log-me'

function failureLines (kr: KubeRouter): Array<Record<string, unknown>> {
  return kr.logs.lines().filter((l) => l.msg === WATCH_FAILED)
}

async function fakeWithOneSlice (token: string): Promise<FakeKubeApiServer> {
  const fake = await FakeKubeApiServer.start({ namespaces: [NAMESPACE], token })
  fake.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.1.1')]))
  return fake
}

t.test('a rejected token (401) is retried, logged without the token, and discovery recovers once the token is accepted', async (t) => {
  const fake = await fakeWithOneSlice('the-token-the-server-wants')
  const kr = await startKubeRouter(t, { fake, token: ROUTER_TOKEN })
  const watcher = kr.watch()

  await waitFor(async () => (await kr.metric(RESTARTS) ?? 0) >= 2, { message: 'restarts after 401' })
  const line = failureLines(kr)[0]
  t.match(line, { level: 40, reason: /401/, namespace: NAMESPACE, service: 'stargate-headless' }, 'a warning naming the 401')
  t.match(line?.reason, /credentials|token/, 'and what to check')
  t.notMatch(kr.logs.text(), ROUTER_TOKEN, 'the token is in no log line')
  t.same(await kr.readyz(), { status: 503, body: 'not ready: target snapshot not initialized yet\n' })
  t.same(watcher.messages, [])

  // The API server starts accepting the router's token (e.g. the service account was fixed).
  fake.setToken(ROUTER_TOKEN)
  await watcher.nextWithIds(['stargate-0'])
  t.same(await kr.readyz(), { status: 200, body: 'ready\n' })
  t.notMatch(kr.logs.text(), ROUTER_TOKEN, 'still no token in the logs')
})

t.test('a token revoked while watching keeps the last set served until the API server accepts it again', async (t) => {
  const fake = await fakeWithOneSlice(ROUTER_TOKEN)
  const kr = await startKubeRouter(t, { fake, args: ['--watch-heartbeat-ms', '3600000'] })
  const watcher = kr.watch()
  await watcher.nextWithIds(['stargate-0'])
  await waitFor(() => fake.openWatches === 1, { message: 'the router watching' })

  fake.setToken('a-different-token')
  fake.dropWatches()
  await waitFor(async () => (await kr.metric(RESTARTS) ?? 0) >= 2, { message: 'restarts after 401' })
  t.match(failureLines(kr)[0], { reason: /401/ })
  t.same(await kr.readyz(), { status: 200, body: 'ready\n' }, 'the last snapshot is still served')
  const late = kr.watch()
  await late.nextWithIds(['stargate-0'])

  fake.setToken(ROUTER_TOKEN)
  await waitFor(() => fake.openWatches === 1, { message: 'the router watching again' })
  fake.apply(stargateSlice('stargate-headless-b', [pod('stargate-1', '127.0.1.2')]))
  await watcher.nextWithIds(['stargate-0', 'stargate-1'])
  await late.nextWithIds(['stargate-0', 'stargate-1'])
  t.notMatch(kr.logs.text(), ROUTER_TOKEN)
})

t.test('a namespace the Role does not cover (403) is logged with the RBAC fix and retried', async (t) => {
  const fake = await fakeWithOneSlice(ROUTER_TOKEN)
  const kr = await startKubeRouter(t, { fake, args: ['--target-namespace', 'payments'] })
  await waitFor(async () => (await kr.metric(RESTARTS) ?? 0) >= 2, { message: 'restarts after 403' })
  const line = failureLines(kr)[0]
  t.match(line, { level: 40, namespace: 'payments', reason: /403/ }, 'a warning naming the 403 and the namespace')
  t.match(line?.reason, /Role needs get\/list\/watch on endpointslices/, 'with the RBAC hint')
  t.same(await kr.readyz(), { status: 503, body: 'not ready: target snapshot not initialized yet\n' })

  // Granting the Role (the fake now allows the namespace) lets discovery start.
  fake.setNamespaces([NAMESPACE, 'payments'])
  const watcher = kr.watch()
  await watcher.nextWithIds([])
  t.ok(fake.listRequests >= 3)
})
