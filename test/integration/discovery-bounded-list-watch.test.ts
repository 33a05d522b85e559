// The Kubernetes watch request (lib/discovery/bounded-list-watch.ts) against an HTTPS server that
// answers as the API server does, authenticated as in a cluster (the cluster CA, a bearer
// token) through the real KubeConfig. The failure mode: the library's reader buffered a line
// until its newline, so a watch answer streaming bytes without one grew the router's memory at
// the stream's rate (about 70 MiB/s here) until V8's string limit ended the process. Here the
// events arrive as before, and a line over the bound ends the watch with an error the informer
// restarts from. A JSON line that was no object (`null`) ended the watch, a restart per line; a
// watch its owner aborted was done with an AbortError, which the informer reported as a failure.
import t from 'tap'
import https from 'node:https'
import type { ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { KubeConfig } from '@kubernetes/client-node'
import { BoundedWatch, LineSplitter, WatchLineTooLongError, boundedList } from '../../lib/discovery/bounded-list-watch.ts'
import { createCa, createLeaf } from '../fixtures/certs.ts'
import { waitFor } from '../fixtures/wait.ts'

const IP = '127.0.118.40'
const TOKEN = 'watch-token'

interface Server { url: string, requests: Array<{ url: string, authorization: string | undefined }>, close: () => void }

async function apiServer (t: { teardown: (fn: () => void) => void }, answer: (res: ServerResponse) => void): Promise<Server & { caPem: string }> {
  const ca = await createCa({ name: 'cluster-ca' })
  const leaf = await createLeaf(ca, { dnsNames: ['kubernetes'], ipAddresses: [IP] })
  const requests: Server['requests'] = []
  const server = https.createServer({ cert: leaf.chainPem, key: leaf.keyPem }, (req, res) => {
    requests.push({ url: req.url ?? '', authorization: req.headers.authorization })
    answer(res)
  })
  await new Promise<void>((resolve) => { server.listen(0, IP, resolve) })
  const url = `https://${IP}:${(server.address() as AddressInfo).port}`
  const close = (): void => { server.closeAllConnections(); server.close() }
  t.teardown(close)
  return { url, requests, close, caPem: ca.certPem }
}

function kubeConfig (server: string, caPem: string): KubeConfig {
  const kc = new KubeConfig()
  kc.loadFromOptions({
    clusters: [{ name: 'c', server, caData: Buffer.from(caPem).toString('base64') }],
    users: [{ name: 'u', token: TOKEN }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  })
  return kc
}

t.test('events arrive over TLS with the cluster CA and token, the query is sent, and done is called once at the end', async (t) => {
  const server = await apiServer(t, (res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.write('{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"5"}}}\n{"type":"MODI')
    setTimeout(() => { res.end('FIED","object":{"metadata":{"name":"a"}}}\nnot json\n{"type":"DELETED","object":{}}\n') }, 50)
  })
  const events: string[] = []
  const ended = new Promise<unknown>((resolve) => {
    void new BoundedWatch(kubeConfig(server.url, server.caPem)).watch('/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices', { resourceVersion: '4', labelSelector: 'a=b', fieldSelector: undefined }, (phase, obj) => {
      events.push(`${phase} ${JSON.stringify(obj)}`)
    }, resolve)
  })
  t.equal(await ended, null, 'a stream the server ends is done without an error')
  t.same(events, ['ADDED {"metadata":{"name":"a","resourceVersion":"5"}}', 'MODIFIED {"metadata":{"name":"a"}}', 'DELETED {}'], 'a line split over two writes is one event; a line that is not JSON is ignored')
  t.equal(server.requests.length, 1)
  t.equal(server.requests[0]?.url, '/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices?watch=true&resourceVersion=4&labelSelector=a%3Db')
  t.equal(server.requests[0]?.authorization, `Bearer ${TOKEN}`)
})

t.test('a line that never ends is cut at the bound: the watch ends with an error, not with the memory', async (t) => {
  let written = 0
  const server = await apiServer(t, (res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    const chunk = Buffer.alloc(64 * 1024, 0x78)
    const pump = (): void => {
      while (!res.destroyed && written < 64 * 1024 * 1024) {
        written += chunk.length
        if (!res.write(chunk)) { res.once('drain', pump); return }
      }
    }
    pump()
  })
  const err = await new Promise<unknown>((resolve) => {
    void new BoundedWatch(kubeConfig(server.url, server.caPem), { maxLineBytes: 1024 * 1024 }).watch('/w', {}, () => { t.fail('no event') }, resolve)
  })
  t.type(err, WatchLineTooLongError)
  t.match((err as Error).message, 'watch event line over 1048576 bytes without a newline; the watch is ended')
  t.ok(written < 16 * 1024 * 1024, `the request was ended soon after the bound (${(written / 1024 / 1024).toFixed(1)} MiB written of 64)`)
})

t.test('a non-200 answer is done with its status code (what the informer reads for 410 and restarts on)', async (t) => {
  const server = await apiServer(t, (res) => { res.writeHead(403); res.end('{"kind":"Status"}') })
  const err = await new Promise<unknown>((resolve) => {
    void new BoundedWatch(kubeConfig(server.url, server.caPem)).watch('/w', {}, () => {}, resolve)
  })
  t.match(err, { statusCode: 403, message: 'Forbidden' })
})

t.test('a watch silent for the inactivity time is done with a TimeoutError (the informer re-watches at once)', async (t) => {
  const server = await apiServer(t, (res) => { res.writeHead(200); res.write('{"type":"ADDED","object":{}}\n') })
  const events: string[] = []
  const err = await new Promise<unknown>((resolve) => {
    void new BoundedWatch(kubeConfig(server.url, server.caPem), { inactivityMs: 300 }).watch('/w', {}, (phase) => { events.push(phase) }, resolve)
  })
  t.same(events, ['ADDED'])
  t.match(err, { name: 'TimeoutError' })
})

t.test('a watch its owner aborts ends without done and delivers nothing more', async (t) => {
  let closed = false
  const server = await apiServer(t, (res) => {
    res.writeHead(200)
    const timer = setInterval(() => { res.write('{"type":"ADDED","object":{}}\n') }, 20)
    res.on('close', () => { clearInterval(timer); closed = true })
  })
  let dones = 0
  const events: string[] = []
  let resolveFirst: () => void = () => {}
  const first = new Promise<void>((resolve) => { resolveFirst = resolve })
  const controller = await new BoundedWatch(kubeConfig(server.url, server.caPem)).watch('/w', {}, (phase) => { events.push(phase); resolveFirst() }, () => { dones++ })
  await first
  controller.abort()
  const seen = events.length
  await waitFor(() => closed, { message: 'the request is ended' })
  await new Promise((resolve) => { setTimeout(resolve, 150) })
  t.equal(events.length, seen, 'nothing after the abort')
  // ListWatch aborts only a request it replaces or stops: a done would start a second list+watch (null) or report an error.
  t.equal(dones, 0, 'not done: the abort is no end of the stream nor a failure')
})

t.test('watch lines that are JSON but no event object are ignored; the watch goes on', async (t) => {
  const server = await apiServer(t, (res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.write('null\n42\n"x"\n[]\n{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n')
  })
  const events: string[] = []
  let dones = 0
  const controller = await new BoundedWatch(kubeConfig(server.url, server.caPem)).watch('/w', {}, (phase, obj) => { events.push(`${phase} ${JSON.stringify(obj)}`) }, () => { dones++ })
  t.teardown(() => { controller.abort() })
  await waitFor(() => events.length >= 1, { message: 'the event after the other lines' })
  await new Promise((resolve) => { setTimeout(resolve, 150) })
  t.same(events, ['ADDED {"metadata":{"name":"a"}}'], 'only the event')
  t.equal(dones, 0, 'the watch is not ended')
})

t.test('LineSplitter: lines across chunks, the bound on a line in one chunk and across chunks', async (t) => {
  const s = new LineSplitter(8)
  t.same(s.push(Buffer.from('ab\ncd')), ['ab'])
  t.same(s.push(Buffer.from('ef\n\ngh')), ['cdef', ''])
  t.same(s.push(Buffer.from('\n')), ['gh'])
  t.throws(() => new LineSplitter(4).push(Buffer.from('12345\n')), WatchLineTooLongError, 'a whole line over the bound')
  const across = new LineSplitter(4)
  t.same(across.push(Buffer.from('123')), [])
  t.throws(() => across.push(Buffer.from('45')), WatchLineTooLongError, 'a partial line over the bound')
  t.same(new LineSplitter(4).push(Buffer.from('1234\n')), ['1234'], 'a line at the bound is kept')
})

t.test('a list: items and resourceVersion over TLS with the token; a slow, oversized, non-JSON or item-less answer is an error', async (t) => {
  let mode = 'ok'
  const server = await apiServer(t, (res) => {
    res.writeHead(mode === 'forbidden' ? 403 : 200, { 'content-type': 'application/json' })
    if (mode === 'ok') res.end('{"kind":"EndpointSliceList","metadata":{"resourceVersion":"42"},"items":[{"metadata":{"name":"a"}}]}')
    else if (mode === 'slow') res.write('{"items":[')
    else if (mode === 'large') res.end(`{"items":[${'{},'.repeat(400)}{}]}`)
    else if (mode === 'text') res.end('<html>')
    else if (mode === 'no-items') res.end('{"kind":"Status"}')
    else res.end('{}')
  })
  const kc = kubeConfig(server.url, server.caPem)
  t.same(await boundedList(kc, '/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices', { labelSelector: 'a=b' }), { items: [{ metadata: { name: 'a' } }], metadata: { resourceVersion: '42' } })
  t.equal(server.requests[0]?.url, '/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices?labelSelector=a%3Db')
  t.equal(server.requests[0]?.authorization, `Bearer ${TOKEN}`)
  mode = 'slow'
  await t.rejects(boundedList(kc, '/l', {}, { timeoutMs: 300 }), /list answer not complete within 300 ms/)
  mode = 'large'
  await t.rejects(boundedList(kc, '/l', {}, { maxBytes: 1000 }), /list answer over 1000 bytes; not read further/)
  mode = 'text'
  await t.rejects(boundedList(kc, '/l', {}), /list answer is not JSON/)
  mode = 'no-items'
  await t.rejects(boundedList(kc, '/l', {}), /list answer has no items list/)
  mode = 'forbidden'
  await t.rejects(boundedList(kc, '/l', {}), { statusCode: 403, message: 'Forbidden' })
})
