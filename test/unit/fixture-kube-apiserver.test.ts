// The fake kube-apiserver of test/fixtures, checked with plain HTTP requests, so a bug in
// the fixture is never mistaken for a bug in the router's discovery.
import t from 'tap'
import { FakeKubeApiServer, parseLabelSelector, matchesSelector, type Json } from '../fixtures/kube-apiserver.ts'
import { endpointSlice } from '../fixtures/endpoint-slices.ts'

const SLICES = '/apis/discovery.k8s.io/v1/namespaces/stargate/endpointslices'

async function startFake (t: { teardown: (fn: () => unknown) => void }): Promise<FakeKubeApiServer> {
  const fake = await FakeKubeApiServer.start({ token: 'unit-token' })
  t.teardown(() => fake.close())
  return fake
}

function get (fake: FakeKubeApiServer, path: string, token: string | null = 'unit-token'): Promise<Response> {
  return fetch(fake.url + path, { headers: token === null ? {} : { authorization: `Bearer ${token}` } })
}

/** Reads newline-delimited watch events until `count` arrived or the stream ended. */
async function readEvents (res: Response, count: number): Promise<Json[]> {
  if (res.body === null) throw new Error('no body')
  const reader = res.body.getReader()
  const decoder = new TextDecoder()
  const events: Json[] = []
  let buffered = ''
  while (events.length < count) {
    const { value, done } = await reader.read()
    if (done) break
    buffered += decoder.decode(value, { stream: true })
    let newline: number
    while ((newline = buffered.indexOf('\n')) >= 0) {
      events.push(JSON.parse(buffered.slice(0, newline)) as Json)
      buffered = buffered.slice(newline + 1)
    }
  }
  await reader.cancel()
  return events
}

function slice (name: string, service = 'stargate-headless', namespace = 'stargate'): Json {
  return endpointSlice({ name, namespace, service, endpoints: [{ pod: `${name}-pod`, ip: '127.0.1.1' }] })
}

function names (list: Json): string[] {
  return (list.items as Json[]).map((item) => (item.metadata as Json).name as string)
}

t.test('a list returns an EndpointSliceList sorted by name with the current resourceVersion', async (t) => {
  const fake = await startFake(t)
  fake.apply(slice('b'))
  fake.apply(slice('a'))
  const res = await get(fake, SLICES)
  t.equal(res.status, 200)
  t.match(res.headers.get('content-type'), /application\/json/)
  const list = await res.json() as Json
  t.equal(list.kind, 'EndpointSliceList')
  t.equal(list.apiVersion, 'discovery.k8s.io/v1')
  t.equal((list.metadata as Json).resourceVersion, fake.resourceVersion)
  t.same(names(list), ['a', 'b'])
  const first = (list.items as Json[])[0] as Json
  t.equal(first.kind, undefined, 'list items carry no kind, as from a real apiserver')
  t.type((first.metadata as Json).resourceVersion, 'string')
  t.equal(fake.listRequests, 1)
})

t.test('label selectors support =, ==, !=, existence and absence, comma meaning AND', async (t) => {
  const fake = await startFake(t)
  fake.apply(slice('one', 'stargate-headless'))
  fake.apply(slice('two', 'other'))
  const other = slice('three', 'stargate-headless')
  ;((other.metadata as Json).labels as Json).extra = 'x'
  fake.apply(other)
  const cases: Array<[string, string[]]> = [
    ['kubernetes.io/service-name=stargate-headless', ['one', 'three']],
    ['kubernetes.io/service-name==other', ['two']],
    ['kubernetes.io/service-name!=other', ['one', 'three']],
    ['extra', ['three']],
    ['!extra', ['one', 'two']],
    ['kubernetes.io/service-name=stargate-headless,!extra', ['one']],
    ['kubernetes.io/service-name=stargate-headless, extra=x', ['three']],
    ['missing!=x', ['one', 'three', 'two']],
    ['', ['one', 'three', 'two']],
  ]
  for (const [selector, want] of cases) {
    const res = await get(fake, `${SLICES}?labelSelector=${encodeURIComponent(selector)}`)
    t.same(names(await res.json() as Json), want, `selector '${selector}'`)
  }
  const bad = await get(fake, `${SLICES}?labelSelector=${encodeURIComponent('a,,b')}`)
  t.equal(bad.status, 400)
})

t.test('selector parsing is table-driven pure logic', async (t) => {
  const object = { metadata: { labels: { app: 'stargate', tier: 'edge' } } }
  const cases: Array<[string, boolean | null]> = [
    ['app=stargate', true],
    ['app==stargate', true],
    ['app!=stargate', false],
    ['app', true],
    ['!app', false],
    ['!nope', true],
    ['app=stargate,tier=core', false],
    ['app=', false],
    ['=x', null],
    ['a b', null],
  ]
  for (const [selector, want] of cases) {
    const parsed = parseLabelSelector(selector)
    t.equal(parsed === null ? null : matchesSelector(object, parsed), want, selector)
  }
})

t.test('a watch replays events after its resourceVersion, then streams live ones', async (t) => {
  const fake = await startFake(t)
  fake.apply(slice('a'))
  const from = fake.resourceVersion
  fake.apply(slice('b'))
  fake.remove('stargate', 'a')
  const res = await get(fake, `${SLICES}?watch=true&resourceVersion=${from}&labelSelector=${encodeURIComponent('kubernetes.io/service-name=stargate-headless')}`)
  t.equal(res.status, 200)
  t.equal(res.headers.get('transfer-encoding'), 'chunked')
  const events = readEvents(res, 3)
  // Live: written after the watch is open.
  fake.apply(slice('c'))
  const got = await events
  t.same(got.map((e) => [e.type, ((e.object as Json).metadata as Json).name]), [['ADDED', 'b'], ['DELETED', 'a'], ['ADDED', 'c']])
  const deleted = got[1]?.object as Json
  t.equal((deleted.metadata as Json).resourceVersion, String(Number(from) + 2), 'a DELETED object carries the version of the deletion')
  t.equal(fake.watchRequests, 1)
})

t.test('an object that stops matching the selector is sent as DELETED to a selecting watch', async (t) => {
  const fake = await startFake(t)
  fake.apply(slice('a'))
  const res = await get(fake, `${SLICES}?watch=true&resourceVersion=${fake.resourceVersion}&labelSelector=${encodeURIComponent('kubernetes.io/service-name=stargate-headless')}`)
  const events = readEvents(res, 2)
  fake.apply(slice('a', 'moved-away'))
  fake.apply(slice('a'))
  t.same((await events).map((e) => e.type), ['DELETED', 'ADDED'])
})

t.test('a watch from a compacted resourceVersion gets 200 then an ERROR event with a 410 Expired Status', async (t) => {
  const fake = await startFake(t)
  fake.apply(slice('a'))
  const old = fake.resourceVersion
  fake.compact()
  const res = await get(fake, `${SLICES}?watch=true&resourceVersion=${old}`)
  t.equal(res.status, 200, 'a real apiserver answers 200 and reports the 410 in the stream')
  const events = await readEvents(res, 5)
  t.equal(events.length, 1, 'the stream ends after the ERROR event')
  t.equal(events[0]?.type, 'ERROR')
  t.match(events[0]?.object, { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'Expired', code: 410, message: /^too old resource version: / })

  const list = await (await get(fake, SLICES)).json() as Json
  const fresh = (list.metadata as Json).resourceVersion as string
  const ok = await get(fake, `${SLICES}?watch=true&resourceVersion=${fresh}`)
  const live = readEvents(ok, 1)
  fake.apply(slice('b'))
  t.equal((await live)[0]?.type, 'ADDED', 'a watch from the version of a list after compaction works')
})

t.test('a missing or wrong bearer token gets 401 with a Status body', async (t) => {
  const fake = await startFake(t)
  for (const token of [null, 'wrong']) {
    const res = await get(fake, SLICES, token)
    t.equal(res.status, 401)
    t.match(await res.json(), { kind: 'Status', status: 'Failure', reason: 'Unauthorized', code: 401 })
  }
  fake.setToken('rotated')
  t.equal((await get(fake, SLICES)).status, 401, 'the old token stops working after setToken')
  t.equal((await get(fake, SLICES, 'rotated')).status, 200)
})

t.test('the cluster-scope list and a namespace outside the Role answer 403 like RBAC does', async (t) => {
  const fake = await startFake(t)
  const cluster = await get(fake, '/apis/discovery.k8s.io/v1/endpointslices')
  t.equal(cluster.status, 403)
  t.match(await cluster.json(), {
    kind: 'Status',
    reason: 'Forbidden',
    code: 403,
    message: /^endpointslices\.discovery\.k8s\.io is forbidden: User ".+" cannot list resource "endpointslices" in API group "discovery\.k8s\.io" at the cluster scope$/,
  })
  const other = await get(fake, '/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices?watch=true')
  t.equal(other.status, 403)
  t.match(await other.json(), { code: 403, message: /cannot watch resource "endpointslices" .* in the namespace "kube-system"$/ })
  const unauthenticated = await get(fake, '/apis/discovery.k8s.io/v1/endpointslices', null)
  t.equal(unauthenticated.status, 401, 'authentication is checked before authorization')
})

t.test('failNext fails exactly the next n requests with that status', async (t) => {
  const fake = await startFake(t)
  fake.failNext(2, 500)
  const statuses = []
  for (let i = 0; i < 3; i++) statuses.push((await get(fake, SLICES)).status)
  t.same(statuses, [500, 500, 200])
  t.equal(fake.listRequests, 3)
})

t.test('dropWatches ends open watches cleanly and goDown refuses connections until comeBack', async (t) => {
  const fake = await startFake(t)
  const res = await get(fake, `${SLICES}?watch=true&resourceVersion=${fake.resourceVersion}`)
  t.equal(fake.openWatches, 1)
  const events = readEvents(res, 1)
  fake.dropWatches()
  t.same(await events, [], 'the stream ended without an event or an error')
  t.equal(fake.openWatches, 0)

  const port = fake.port
  await fake.goDown()
  await t.rejects(get(fake, SLICES), 'connection refused while down')
  await fake.comeBack()
  t.equal(fake.port, port, 'same port after coming back')
  t.equal((await get(fake, SLICES)).status, 200)
})

t.test('kubeConfig points the real client at the fake with the token', async (t) => {
  const fake = await startFake(t)
  const kubeConfig = fake.kubeConfig()
  t.equal(kubeConfig.getCurrentCluster()?.server, fake.url)
  t.equal(kubeConfig.getCurrentUser()?.token, 'unit-token')
  const dir = t.testdir()
  const path = await fake.writeKubeconfig(dir)
  const { KubeConfig } = await import('@kubernetes/client-node')
  const loaded = new KubeConfig()
  loaded.loadFromFile(path)
  t.equal(loaded.getCurrentCluster()?.server, fake.url)
  t.equal(loaded.getCurrentUser()?.token, 'unit-token')
})
