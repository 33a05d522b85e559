// What an API server (or anything answering in its place, such as a broken proxy) can send the
// EndpointSlice list+watch (lib/discovery/endpoint-slice-watch.ts, bounded-list-watch.ts),
// driven by the real client-node ListWatch informer against a raw HTTP server. The failure
// modes: an event or list item without `metadata`, or a null object, made the informer's async
// handler throw, the rejection was unhandled, and the router exited 1; a list answer that never
// ended grew memory without limit; a 410 after every event made the informer relist hundreds of
// times a second (5,203 lists in 12 s); slices of another namespace or Service became targets;
// a consumer that threw on one event restarted the watch about every second for good (the
// restart aborted the live watch and that abort was reported as another failure), and the
// event it missed was never given to it again; an AbortError (DOMException code 20) was logged
// as "HTTP 20". The target and peer sources' counting and logging of an ignored object is
// operator-visible wiring, checked on the real sources here.
import t from 'tap'
import http, { type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { KubeConfig } from '@kubernetes/client-node'
import { Registry } from 'prom-client'
import { EndpointSliceWatch, describeError, ignoredReason, type IgnoredReason } from '../../lib/discovery/endpoint-slice-watch.ts'
import { KubernetesTargetSource } from '../../lib/discovery/kubernetes.ts'
import { KubernetesPeerSource } from '../../lib/discovery/peers-kubernetes.ts'
import { PeerSet } from '../../lib/discovery/peers.ts'
import { createPeerMetrics } from '../../lib/discovery/peer-metrics.ts'
import { SnapshotStore } from '../../lib/discovery/snapshot-store.ts'
import { createMetrics } from '../../lib/metrics/metrics.ts'
import { createLogSink } from '../fixtures/log-sink.ts'
import { waitFor } from '../fixtures/wait.ts'

const IP = '127.0.118.41'
const NS = 'stargate'
const SERVICE = 'stargate-headless'

function slice (name: string, extra: { namespace?: string, service?: string } = {}): Record<string, unknown> {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name, namespace: extra.namespace ?? NS, resourceVersion: '7', labels: { 'kubernetes.io/service-name': extra.service ?? SERVICE } },
    addressType: 'IPv4',
    endpoints: [],
  }
}

interface Api { lists: number, watches: number, url: string }

/** A raw API server: `list` answers each LIST, `watch` each watch request. */
async function rawApi (t: { teardown: (fn: () => void) => void }, list: (res: ServerResponse, n: number) => void, watch: (res: ServerResponse, n: number) => void): Promise<Api> {
  const api: Api = { lists: 0, watches: 0, url: '' }
  const server = http.createServer((req: IncomingMessage, res: ServerResponse) => {
    res.on('error', () => {})
    if ((req.url ?? '').includes('watch=true')) watch(res, ++api.watches)
    else list(res, ++api.lists)
  })
  await new Promise<void>((resolve) => { server.listen(0, IP, resolve) })
  api.url = `http://${IP}:${(server.address() as AddressInfo).port}`
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return api
}

function listOf (items: unknown[]): (res: ServerResponse) => void {
  return (res) => { res.writeHead(200, { 'content-type': 'application/json' }); res.end(JSON.stringify({ kind: 'EndpointSliceList', metadata: { resourceVersion: '7' }, items })) }
}

function events (lines: unknown[], end = false): (res: ServerResponse) => void {
  return (res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    for (const line of lines) res.write(JSON.stringify(line) + '\n')
    if (end) res.end()
  }
}

function kubeConfig (server: string): KubeConfig {
  const kc = new KubeConfig()
  kc.loadFromOptions({ clusters: [{ name: 'c', server, skipTLSVerify: true }], users: [{ name: 'u', token: 't' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' })
  return kc
}

/** `beforeUpsert` runs in the consumer's onUpsert first (a consumer that throws). */
function startWatch (t: { teardown: (fn: () => unknown) => void }, api: Api, backoff = { baseMs: 50, maxMs: 200 }, beforeUpsert?: (name: string) => void): { upserts: string[], lists: string[][], ignored: IgnoredReason[], restarts: () => number, log: ReturnType<typeof createLogSink> } {
  const upserts: string[] = []
  const lists: string[][] = []
  const ignored: IgnoredReason[] = []
  let restarts = 0
  const log = createLogSink({ level: 'warn' })
  const name = (s: unknown): string => String((s as { metadata?: { name?: unknown } }).metadata?.name)
  const watch = new EndpointSliceWatch({
    kubeConfig: kubeConfig(api.url),
    namespace: NS,
    serviceName: SERVICE,
    logger: log.logger,
    consumer: { onList: (items) => { lists.push(items.map(name)) }, onUpsert: (s) => { beforeUpsert?.(name(s)); upserts.push(name(s)) }, onDelete: () => {} },
    onRestart: () => { restarts++ },
    onIgnored: (reason) => { ignored.push(reason) },
    backoff,
  })
  watch.start()
  t.teardown(() => watch.stop())
  return { upserts, lists, ignored, restarts: () => restarts, log }
}

t.test('watch objects that are no slice are dropped and counted; the watch goes on (it used to end the process)', async (t) => {
  const api = await rawApi(t, listOf([slice('a')]), events([
    { type: 'ADDED', object: { kind: 'EndpointSlice' } },
    { type: 'ADDED', object: null },
    { type: 'MODIFIED', object: 'text' },
    { type: 'ERROR', object: null },
    { type: 'ADDED', object: slice('other-ns', { namespace: 'kube-system' }) },
    { type: 'ADDED', object: slice('other-svc', { service: 'not-stargate' }) },
    { type: 'ADDED', object: slice('b') },
  ]))
  const w = startWatch(t, api)
  await waitFor(() => w.upserts.includes('b'), { message: 'the good slice after the bad ones' })
  t.same(w.upserts.filter((n) => n !== 'a'), ['b'], 'only the slice of this Service reached the consumer')
  t.same(w.ignored, ['malformed_slice', 'malformed_slice', 'malformed_slice', 'foreign_slice', 'foreign_slice'], 'each counted by reason (the null ERROR is no Status and is skipped)')
  t.equal(w.restarts(), 0, 'no restart was needed')
})

t.test('list items without metadata or of another Service are dropped before the informer', async (t) => {
  const api = await rawApi(t, listOf([{ kind: 'x' }, null, slice('a'), slice('z', { service: 'other' })]), events([]))
  const w = startWatch(t, api)
  await waitFor(() => w.lists.length === 1, { message: 'the list applied' })
  t.same(w.lists[0], ['a'])
  t.same(w.ignored, ['malformed_slice', 'malformed_slice', 'foreign_slice'])
  await waitFor(() => api.watches >= 1, { message: 'then the watch' })
})

t.test('a DELETED slice that stopped matching the selector is still applied (its label is another Service\'s)', async (t) => {
  t.equal(ignoredReason(slice('a', { service: 'renamed' }), NS, SERVICE, 'DELETED'), null)
  t.equal(ignoredReason(slice('a', { service: 'renamed' }), NS, SERVICE, 'MODIFIED'), 'foreign_slice')
  t.equal(ignoredReason(slice('a', { namespace: 'other' }), NS, SERVICE, 'DELETED'), 'foreign_slice')
  t.equal(ignoredReason({ metadata: { resourceVersion: '9' } }, NS, SERVICE, 'BOOKMARK'), null, 'a bookmark carries only a resourceVersion')
  t.equal(ignoredReason({ metadata: null }, NS, SERVICE, 'BOOKMARK'), 'malformed_slice')
  const noNamespace = slice('a')
  delete (noNamespace.metadata as Record<string, unknown>).namespace
  t.equal(ignoredReason(noNamespace, NS, SERVICE), null, 'a list item may leave out the list\'s namespace')
})

t.test('a 410 after every event: relists are spaced, not hundreds a second, and each wait is logged', async (t) => {
  const api = await rawApi(t, listOf([slice('a')]), events([
    { type: 'MODIFIED', object: slice('a') },
    { type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired', message: 'too old resource version' } },
  ], true))
  // The relist waits are capped by the backoff maximum (30 s by default).
  const w = startWatch(t, api, { baseMs: 50, maxMs: 30_000 })
  await new Promise((resolve) => { setTimeout(resolve, 3000) })
  // Waits of 250, 500, 1000, 2000 ms (±20 %) fit at most 5 lists in 3 s; the informer alone made hundreds.
  t.ok(api.lists <= 6, `${api.lists} lists in 3 s`)
  t.ok(api.lists >= 3, 'it does relist')
  t.ok(w.log.lines().some((l) => l.msg === 'endpointslices relisted again soon after the last list; waiting first'), 'the waits are logged')
})

t.test('a list answer that never ends is cut at the cap and the watch restarts with backoff', async (t) => {
  let streamed = 0
  const api = await rawApi(t, (res, n) => {
    if (n > 1) { listOf([slice('a')])(res); return }
    res.writeHead(200, { 'content-type': 'application/json' })
    res.write('{"kind":"EndpointSliceList","items":[')
    const item = Buffer.from(JSON.stringify(slice('pad')) + ',')
    const pump = (): void => {
      while (!res.destroyed && streamed < 256 * 1024 * 1024) {
        streamed += item.length
        if (!res.write(item)) { res.once('drain', pump); return }
      }
    }
    pump()
  }, events([]))
  const w = startWatch(t, api)
  await waitFor(() => w.lists.length === 1, { timeoutMs: 30_000, message: 'the second list applied' })
  t.same(w.lists[0], ['a'])
  t.equal(w.restarts(), 1, 'one restart')
  t.ok(streamed < 96 * 1024 * 1024, `the first answer was cut soon after 64 MiB (${(streamed / 1024 / 1024).toFixed(0)} MiB streamed)`)
  t.match(w.log.lines().find((l) => l.msg === 'endpointslice watch failed; keeping the last known slices and restarting'), { reason: /list answer over 67108864 bytes/ })
})

t.test('a consumer that throws on one event costs one restart, whose relist gives it the slice it missed; the watch goes on', async (t) => {
  const api = await rawApi(t, (res, n) => { listOf(n === 1 ? [slice('a')] : [slice('a'), slice('bad')])(res) }, (res, n) => {
    if (n === 1) { events([{ type: 'ADDED', object: slice('bad') }])(res); return }
    events([])(res)
    setTimeout(() => { if (!res.destroyed) res.write(JSON.stringify({ type: 'ADDED', object: slice('later') }) + '\n') }, 300)
  })
  let badUpserts = 0
  const w = startWatch(t, api, { baseMs: 50, maxMs: 200 }, (name) => {
    if (name === 'bad' && badUpserts++ === 0) throw new Error('consumer bug')
  })
  await waitFor(() => w.upserts.includes('later'), { message: 'a later slice reaches the consumer' })
  // Long enough for many restarts at this backoff (50-200 ms) if the restart itself failed again.
  await new Promise((resolve) => { setTimeout(resolve, 3000) })
  t.equal(api.watches, 2, 'one watch request before the failure, one after')
  t.equal(w.restarts(), 1, 'one restart')
  t.same(w.lists, [['a'], ['a', 'bad']], 'the restart relisted: the consumer holds the slice whose event it dropped')
  const failures = w.log.lines().filter((l) => l.msg === 'endpointslice event could not be applied; relisting the slices')
  t.equal(failures.length, 1, 'the failure is logged once')
  t.match(failures[0], { reason: 'consumer bug', namespace: NS, service: SERVICE })
  t.notOk(w.log.lines().some((l) => l.msg === 'endpointslice watch failed; keeping the last known slices and restarting'), 'the watch the restart replaced is no failure')
})

t.test('an error is described by its HTTP status only when it carries one (an AbortError\'s code 20 is none)', async (t) => {
  t.equal(describeError(new DOMException('This operation was aborted', 'AbortError')), 'This operation was aborted')
  t.equal(describeError(Object.assign(new Error('Gone'), { code: 410 })), 'HTTP 410: Gone')
  t.equal(describeError(Object.assign(new Error('Forbidden'), { statusCode: 403 })), 'the API server denied access (403): the Role needs get/list/watch on endpointslices in this namespace')
  t.equal(describeError(Object.assign(new Error('fetch failed'), { cause: { code: 'ECONNREFUSED' } })), 'fetch failed (ECONNREFUSED)')
})

const IGNORED_EVENTS = [
  { type: 'ADDED', object: { kind: 'EndpointSlice' } },
  { type: 'ADDED', object: slice('other-svc', { service: 'not-stargate' }) },
]

t.test('the target source counts each ignored object by reason in endpointslice_skipped_total and logs it', async (t) => {
  const api = await rawApi(t, listOf([slice('a')]), events(IGNORED_EVENTS))
  const registry = new Registry()
  const log = createLogSink({ level: 'warn' })
  const source = new KubernetesTargetSource({
    kubeConfig: kubeConfig(api.url),
    namespace: NS,
    serviceName: SERVICE,
    ports: { grpc: 'grpc', quic: 'quic', http: 'http' },
    store: new SnapshotStore(),
    metrics: createMetrics(registry, { defaultMetrics: false }),
    logger: log.logger,
    backoff: { baseMs: 50, maxMs: 200 },
  })
  source.start()
  t.teardown(() => source.stop())
  const ignoredLines = (): Array<Record<string, unknown>> => log.lines().filter((l) => l.msg === 'endpointslice watch object ignored: not a slice of the target service')
  await waitFor(() => ignoredLines().length === 2, { message: 'both objects logged' })
  t.same(ignoredLines().map((l) => [l.level, l.reason]), [[40, 'malformed_slice'], [40, 'foreign_slice']], 'a warn line each, with its reason')
  const text = await registry.metrics()
  t.match(text, /^stargate_k8s_router_endpointslice_skipped_total\{reason="malformed_slice"\} 1$/m)
  t.match(text, /^stargate_k8s_router_endpointslice_skipped_total\{reason="foreign_slice"\} 1$/m)
  t.match(text, /^stargate_k8s_router_discovery_watch_restarts_total 0$/m, 'no restart')
})

t.test('the peer source logs each ignored object with its reason', async (t) => {
  const api = await rawApi(t, listOf([slice('a')]), events(IGNORED_EVENTS))
  const log = createLogSink({ level: 'warn' })
  const source = new KubernetesPeerSource({
    kubeConfig: kubeConfig(api.url),
    namespace: NS,
    serviceName: SERVICE,
    port: { name: 'health', fallback: 8080 },
    peers: new PeerSet({ self: { address: null, id: null } }),
    metrics: createPeerMetrics(new Registry()),
    logger: log.logger,
    backoff: { baseMs: 50, maxMs: 200 },
  })
  source.start()
  t.teardown(() => source.stop())
  const ignoredLines = (): Array<Record<string, unknown>> => log.lines().filter((l) => l.msg === 'peer endpointslice watch object ignored: not a slice of the peer service')
  await waitFor(() => ignoredLines().length === 2, { message: 'both objects logged' })
  t.same(ignoredLines().map((l) => [l.level, l.reason]), [[40, 'malformed_slice'], [40, 'foreign_slice']], 'a warn line each, with its reason')
})
