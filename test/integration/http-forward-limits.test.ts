// SPEC §6: HTTP forwarding that never replays a delivered request, handles
// `Expect: 100-continue`, bounds what it queues per pod, believes forwarding headers only from
// trusted proxies, refuses requests naming two hosts, and closes rather than drains after 413.
import t from 'tap'
import net from 'node:net'
import http2 from 'node:http2'
import { execFile } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { StubPods } from '../fixtures/stub-pods.ts'
import { stargateSlice } from '../fixtures/kube-router.ts'
import { waitFor } from '../fixtures/wait.ts'
import { request } from '../fixtures/http-client.ts'
import { RawHttpPod, resetAfterRequest } from '../fixtures/raw-http-pod.ts'

const run = promisify(execFile)
const NO_CURL = await run('curl', ['--version']).then(() => false, () => 'curl is not installed')

interface Echo { url: string, headers: Record<string, string>, body: string }

t.test('a pod that reads the request and resets is 502, and the request reached exactly one pod', async (t) => {
  const pods = await StubPods.start(t, { pods: [] })
  const resetters: RawHttpPod[] = []
  for (const [i, ip] of ['127.0.9.31', '127.0.9.32'].entries()) {
    const pod = await RawHttpPod.start(ip, resetAfterRequest)
    t.teardown(() => { pod.close() })
    resetters.push(pod)
    pods.kube.fake.apply(stargateSlice(`stargate-x${i}`, [{ pod: `stargate-x${i}`, ip }], { ports: { grpc: 1, quic: 2, http: pod.port } }))
  }
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 2)
  const seen = (): number => resetters.reduce((n, pod) => n + pod.heads.length, 0)
  for (const method of ['DELETE', 'GET', 'POST']) {
    const before = seen()
    // GET without a body; DELETE and POST with an empty one.
    const reply = await request(pods.kube.frontDoorPort, { host: 'llm.example.com', method, path: '/v1/things/1', ...(method === 'GET' ? {} : { body: '' }) })
    t.equal(reply.status, 502, `${method}: 502`)
    t.equal(JSON.parse(reply.body).error.code, 'upstream_error', `${method}: upstream_error`)
    t.equal(seen() - before, 1, `${method} reached exactly one pod`)
  }
})

t.test('Expect: 100-continue from curl with a large body is answered 100 and forwarded whole', { skip: NO_CURL }, async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true })
  const dir = await mkdtemp(join(tmpdir(), 'stargate-expect-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const file = join(dir, 'body.json')
  const body = JSON.stringify({ text: 'x'.repeat(3 * 1024 * 1024) })
  await writeFile(file, body)
  const { stdout, stderr } = await run('curl', [
    '-sS', '-v', '--http1.1', '-H', 'host: stargate-0.stargate.external', '-H', 'expect: 100-continue', '-H', 'content-type: application/json',
    '--data-binary', `@${file}`, `http://127.0.0.1:${pods.kube.frontDoorPort}/echo`,
  ], { maxBuffer: 64 * 1024 * 1024 })
  t.match(stderr, /< HTTP\/1\.1 100 Continue/, 'curl was told to continue')
  const echo = JSON.parse(stdout) as Echo
  t.equal(echo.body.length, body.length, 'the pod received the whole body')
  t.equal(echo.headers.expect, undefined, 'the expectation is not forwarded: the router met it')
})

t.test('Expect: 100-continue with a body over the limit gets 413 before curl uploads anything', { skip: NO_CURL }, async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http-max-body-bytes', '1000'] })
  const dir = await mkdtemp(join(tmpdir(), 'stargate-expect-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const file = join(dir, 'body.json')
  await writeFile(file, 'x'.repeat(2 * 1024 * 1024))
  const { stdout } = await run('curl', [
    '-sS', '-o', '/dev/null', '-w', '%{http_code} %{size_upload}', '--http1.1', '-H', 'host: stargate-0.stargate.external', '-H', 'expect: 100-continue',
    '--data-binary', `@${file}`, `http://127.0.0.1:${pods.kube.frontDoorPort}/echo`,
  ])
  t.equal(stdout, '413 0', '413, and not one body byte uploaded')
  t.equal(pods.llms.get('stargate-0')?.requests.length, 0)
})

t.test('beyond the per-pod connections and queue, requests get 503 upstream_busy', async (t) => {
  // One client fills the pod: its per-client share is lifted (that limit has its own tests).
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http-upstream-max-connections', '1', '--http-upstream-max-queue', '1', '--http-upstream-max-client-share-percent', '0'] })
  const port = pods.kube.frontDoorPort
  const llm = pods.llms.get('stargate-0')
  // One request holds the only connection, one waits in the queue.
  const holding = request(port, { host: 'stargate-0.stargate.external', path: '/slow?ms=1500', method: 'GET' })
  await waitFor(() => llm?.requests.length === 1, { message: 'the first request at the pod' })
  const queued = request(port, { host: 'stargate-0.stargate.external', path: '/slow?ms=10', method: 'GET' })
  await waitFor(async () => await pods.kube.metric('stargate_k8s_router_http_requests_in_flight') === 2, { message: 'two requests in flight' })
  const busy = await request(port, { host: 'stargate-0.stargate.external', path: '/slow?ms=10', method: 'GET' })
  t.equal(busy.status, 503)
  t.equal(busy.headers['x-stargate-error-code'], 'upstream_busy')
  t.equal((await holding).status, 200, 'the holding request completes')
  t.equal((await queued).status, 200, 'the queued request is served once the connection is free')
  t.equal(llm?.requests.length, 2, 'the refused request never reached the pod')
  t.equal(await pods.kube.metric('stargate_k8s_router_http_requests_total', { outcome: 'upstream_busy' }), 1)
})

const spoofed = { 'x-forwarded-for': '6.6.6.6', forwarded: 'for=6.6.6.6;proto=https', 'x-real-ip': '6.6.6.6', 'x-forwarded-proto': 'https', 'x-forwarded-host': 'evil.example' }

t.test('forwarding headers from a peer outside --trusted-proxy-cidrs are replaced', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--trusted-proxy-cidrs', '10.0.0.0/8'] })
  const reply = await request(pods.kube.frontDoorPort, { host: 'stargate-0.stargate.external', path: '/echo', headers: spoofed })
  const echo = JSON.parse(reply.body) as Echo
  t.equal(echo.headers['x-forwarded-for'], '127.0.0.1', 'x-forwarded-for is the peer address only')
  t.equal(echo.headers.forwarded, undefined, 'forwarded is dropped')
  t.equal(echo.headers['x-real-ip'], undefined, 'x-real-ip is dropped')
  t.equal(echo.headers['x-forwarded-proto'], 'http')
  t.equal(echo.headers['x-forwarded-host'], 'stargate-0.stargate.external')
})

t.test('forwarding headers from a trusted proxy are kept, x-forwarded-for appended to', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--trusted-proxy-cidrs', '10.0.0.0/8,127.0.0.0/8'] })
  const reply = await request(pods.kube.frontDoorPort, { host: 'stargate-0.stargate.external', path: '/echo', headers: spoofed })
  const echo = JSON.parse(reply.body) as Echo
  t.equal(echo.headers['x-forwarded-for'], '6.6.6.6, 127.0.0.1')
  t.equal(echo.headers.forwarded, 'for=6.6.6.6;proto=https')
  t.equal(echo.headers['x-real-ip'], '6.6.6.6')
  t.equal(echo.headers['x-forwarded-proto'], 'https', 'the proxy terminated TLS: its proto stands')
  t.equal(echo.headers['x-forwarded-host'], 'evil.example')
})

/** Raw bytes on one connection; resolves with everything read until the router closed it. */
function rawExchange (port: number, bytes: string, keepWriting = false): Promise<{ text: string, closedByRouter: boolean }> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1', () => {
      socket.write(bytes)
      if (keepWriting) {
        // A client still uploading: the router must close rather than read it all.
        const pump = (): void => { while (!socket.destroyed && socket.write(Buffer.alloc(16 * 1024, 0x78))); }
        socket.on('drain', pump)
        pump()
      }
    })
    let text = ''
    socket.on('data', (chunk: Buffer) => { text += chunk.toString('latin1') })
    const timer = setTimeout(() => { socket.destroy(); resolve({ text, closedByRouter: false }) }, 15_000)
    socket.on('close', () => { clearTimeout(timer); resolve({ text, closedByRouter: true }) })
    socket.on('error', () => {})
  })
}

t.test('an absolute-form request naming another host than Host is 400 host_mismatch', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true })
  const port = pods.kube.frontDoorPort
  const mismatch = await rawExchange(port, 'GET http://stargate-0.stargate.external/echo HTTP/1.1\r\nHost: llm.example.com\r\nConnection: close\r\n\r\n')
  t.match(mismatch.text, /^HTTP\/1\.1 400 /)
  t.match(mismatch.text, /x-stargate-error-code: host_mismatch/)
  const agreeing = await rawExchange(port, 'GET http://stargate-0.stargate.external/echo?q=1 HTTP/1.1\r\nHost: stargate-0.stargate.external\r\nConnection: close\r\n\r\n')
  t.match(agreeing.text, /^HTTP\/1\.1 200 /)
  const echo = JSON.parse(agreeing.text.slice(agreeing.text.indexOf('\r\n\r\n') + 4)) as Echo
  t.equal(echo.url, '/echo?q=1', 'the pod gets the origin-form target')
  t.equal(pods.llms.get('stargate-0')?.requests.length, 1, 'the mismatched request never reached a pod')
})

t.test('an HTTP/2 request whose host header disagrees with :authority is 400 host_mismatch', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true })
  const session = http2.connect(`http://127.0.0.1:${pods.kube.frontDoorPort}`)
  t.teardown(() => { session.destroy() })
  const reply = await new Promise<{ status: number, code: unknown }>((resolve, reject) => {
    const stream = session.request({ ':method': 'GET', ':path': '/echo', ':authority': 'stargate-0.stargate.external', host: 'llm.example.com' })
    stream.on('response', (headers) => { resolve({ status: Number(headers[':status']), code: headers['x-stargate-error-code'] }) })
    stream.on('error', reject)
    stream.resume()
  })
  t.same(reply, { status: 400, code: 'host_mismatch' })
  t.equal(pods.llms.get('stargate-0')?.requests.length, 0)
})

t.test('after 413 the connection is closed, not read to the end of the body', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http-max-body-bytes', '1000'] })
  const port = pods.kube.frontDoorPort
  const declared = await rawExchange(port, `POST /echo HTTP/1.1\r\nHost: stargate-0.stargate.external\r\nContent-Length: ${1024 * 1024 * 1024}\r\n\r\n`, true)
  t.match(declared.text, /^HTTP\/1\.1 413 /, 'a declared oversize body: 413')
  t.match(declared.text, /connection: close/i)
  t.ok(declared.closedByRouter, 'and the router closed the connection while the client was still sending')
  const chunked = await rawExchange(port, 'POST /echo HTTP/1.1\r\nHost: stargate-0.stargate.external\r\nTransfer-Encoding: chunked\r\n\r\n' + `800\r\n${'y'.repeat(0x800)}\r\n`.repeat(4))
  t.match(chunked.text, /^HTTP\/1\.1 413 /, 'a chunked body passing the limit: 413')
  t.ok(chunked.closedByRouter, 'and the connection is closed')
})

t.test('a request body that stops arriving is 408 request_timeout after --http-idle-timeout-ms, and the pod sees the request end', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http-idle-timeout-ms', '400'] })
  const stalled = await rawExchange(pods.kube.frontDoorPort, 'POST /echo HTTP/1.1\r\nHost: stargate-0.stargate.external\r\nContent-Length: 1000\r\n\r\n{"partial":')
  t.match(stalled.text, /^HTTP\/1\.1 408 /)
  t.match(stalled.text, /x-stargate-error-code: request_timeout/)
  t.ok(stalled.closedByRouter, 'and the connection is closed')
  const llm = pods.llms.get('stargate-0')
  await waitFor(() => llm?.requests[0]?.aborted === true || llm?.openResponses === 0, { message: 'the pod saw the request end' })
  t.equal(await pods.kube.metric('stargate_k8s_router_http_requests_total', { outcome: 'request_timeout' }), 1)
})

t.test('a body held back by a slow pod is not a client timeout', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http-idle-timeout-ms', '1500'] })
  // 8 MiB, more than the socket buffers hold, to a pod that reads it as it comes.
  const reply = await request(pods.kube.frontDoorPort, { host: 'stargate-0.stargate.external', path: '/echo', body: JSON.stringify({ text: 'z'.repeat(8 * 1024 * 1024) }) })
  t.equal(reply.status, 200)
})
