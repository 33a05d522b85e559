// SPEC §6 and §12: a bad response from a pod is a 502 for that request, never the
// end of the process. The pod is a raw TCP server (test/fixtures/raw-http-pod.ts) writing what
// no HTTP library would; the clients are Node's HTTP/1.1 and HTTP/2 clients. The failure mode:
// two content-type fields to an HTTP/2 client make writeHead throw
// ERR_HTTP2_HEADER_SINGLE_VALUE inside undici's callback.
import t from 'tap'
import net from 'node:net'
import http2 from 'node:http2'
import { StubPods } from '../fixtures/stub-pods.ts'
import { stargateSlice } from '../fixtures/kube-router.ts'
import { waitFor } from '../fixtures/wait.ts'
import { request } from '../fixtures/http-client.ts'
import { RawHttpPod, answerWith, type PodBehaviour } from '../fixtures/raw-http-pod.ts'

const HOST = 'stargate-bad.stargate.external'

function h2Get (port: number, path: string): Promise<{ status: number, code: unknown }> {
  const session = http2.connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':method': 'GET', ':path': path, ':authority': HOST })
    stream.on('response', (headers) => { resolve({ status: Number(headers[':status']), code: headers['x-stargate-error-code'] }) })
    stream.on('error', reject)
    stream.on('close', () => { session.close() })
    stream.resume()
  })
}

const INVALID: Array<{ what: string, behaviour: PodBehaviour, h2Only?: boolean }> = [
  { what: 'two content-type fields (to an HTTP/2 client)', h2Only: true, behaviour: answerWith('HTTP/1.1 200 OK\r\nContent-Type: a/b\r\nContent-Type: c/d\r\nContent-Length: 2\r\n\r\nok') },
  { what: 'bytes that are not HTTP', behaviour: answerWith('HELLO THERE\r\n\r\n') },
  { what: 'a control byte in a header value', behaviour: answerWith('HTTP/1.1 200 OK\r\nX-Evil: a\u0001b\r\nContent-Length: 2\r\n\r\nok') },
  { what: 'two different content-length fields', behaviour: answerWith('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok') },
  { what: 'a 64 KiB response head', behaviour: answerWith(`HTTP/1.1 200 OK\r\nX-Pad: ${'p'.repeat(64 * 1024)}\r\nContent-Length: 2\r\n\r\nok`) },
  { what: 'a status under 100', behaviour: answerWith('HTTP/1.1 099 Odd\r\nContent-Length: 2\r\n\r\nok') },
  { what: 'a 101 Switching Protocols nobody asked for', behaviour: answerWith('HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n') },
]

/** A router with one pod, stargate-bad, answered by a raw socket doing `behaviour`. */
async function routerWithRawPod (t: Parameters<typeof StubPods.start>[0], ip: string, behaviour: PodBehaviour, args: string[] = []): Promise<StubPods> {
  const pods = await StubPods.start(t, { pods: [], args })
  const pod = await RawHttpPod.start(ip, behaviour)
  t.teardown(() => { pod.close() })
  pods.kube.fake.apply(stargateSlice('stargate-bad', [{ pod: 'stargate-bad', ip }], { ports: { grpc: 1, quic: 2, http: pod.port } }))
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1)
  return pods
}

t.test('a pod answering what cannot be forwarded is 502 upstream_invalid_response, counted, and the router stays up', async (t) => {
  let behaviour: PodBehaviour = () => {}
  const pods = await routerWithRawPod(t, '127.0.9.51', (socket, head) => { behaviour(socket, head) })
  const port = pods.kube.frontDoorPort
  const health = `http://127.0.0.1:${pods.kube.router.health.port}`
  let expected = 0
  for (const scenario of INVALID) {
    behaviour = scenario.behaviour
    t.same(await h2Get(port, '/x'), { status: 502, code: 'upstream_invalid_response' }, `${scenario.what}: HTTP/2 client`)
    expected++
    if (scenario.h2Only !== true) {
      const reply = await request(port, { host: HOST, method: 'GET', path: '/x' })
      t.same([reply.status, reply.headers['x-stargate-error-code']], [502, 'upstream_invalid_response'], `${scenario.what}: HTTP/1.1 client`)
      expected++
    }
    t.equal((await fetch(`${health}/livez`)).status, 200, `${scenario.what}: the router is alive`)
  }
  t.equal(await pods.kube.metric('stargate_k8s_router_http_requests_total', { outcome: 'upstream_invalid_response' }), expected, 'each one is counted')
})

t.test('a pod that dies in the middle of its body cuts the client connection and nothing else', async (t) => {
  const pods = await routerWithRawPod(t, '127.0.9.52', answerWith('HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b'))
  const received = await new Promise<string>((resolve) => {
    const socket = net.connect(pods.kube.frontDoorPort, '127.0.0.1', () => { socket.write(`GET /x HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`) })
    let text = ''
    socket.on('data', (chunk: Buffer) => { text += chunk.toString('latin1') })
    socket.on('close', () => { resolve(text) })
    socket.on('error', () => {})
  })
  t.match(received, /^HTTP\/1\.1 200 /, 'the response had started')
  t.ok(received.endsWith('\r\n\r\nonly ten b'), 'the connection is closed after what the pod sent, so the client sees it cut short')
  t.equal(await pods.kube.metric('stargate_k8s_router_http_requests_total', { outcome: 'upstream_error' }), 1)
  t.equal((await fetch(`http://127.0.0.1:${pods.kube.router.health.port}/livez`)).status, 200)
})

/** Writes `103 Early Hints` heads every intervalMs and never a final response; counts its open connections. */
function trickleInterim (intervalMs: number): { behaviour: PodBehaviour, open: () => number } {
  let open = 0
  const behaviour: PodBehaviour = (socket) => {
    open++
    const timer = setInterval(() => { if (!socket.destroyed) socket.write('HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n') }, intervalMs)
    socket.on('close', () => { open--; clearInterval(timer) })
    socket.on('error', () => {})
  }
  return { behaviour, open: () => open }
}

// undici restarts its headers timer on every 1xx head: a pod sending one every 500 ms held the
// request and its connection until the pod closed (12 s, 40 s: as long as it liked), where the
// client should get 504 at --http-headers-timeout-ms.
t.test('a pod trickling 1xx heads gets 504 upstream_timeout at the headers timeout, counted from the first', async (t) => {
  const trickle = trickleInterim(150)
  const pods = await routerWithRawPod(t, '127.0.9.53', trickle.behaviour, ['--http-headers-timeout-ms', '600'])
  const started = performance.now()
  const reply = await request(pods.kube.frontDoorPort, { host: HOST, method: 'GET', path: '/x' })
  const ms = performance.now() - started
  t.same([reply.status, reply.headers['x-stargate-error-code']], [504, 'upstream_timeout'], 'HTTP/1.1 client')
  t.ok(ms < 3000, `answered after ${ms.toFixed(0)} ms (headers timeout 600 ms; the pod never stops)`)
  t.same(await h2Get(pods.kube.frontDoorPort, '/x'), { status: 504, code: 'upstream_timeout' }, 'HTTP/2 client')
  await waitFor(() => trickle.open() === 0, { message: 'the pod\'s connections closed' })
})

t.test('one or two 1xx heads before the final response are fine; more than 16 is no response (502)', async (t) => {
  let behaviour: PodBehaviour = () => {}
  const pods = await routerWithRawPod(t, '127.0.9.54', (socket, head) => { behaviour(socket, head) })
  const final = 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok'
  behaviour = answerWith('HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n' + final)
  const two = await request(pods.kube.frontDoorPort, { host: HOST, method: 'GET', path: '/x' })
  t.same([two.status, two.body], [200, 'ok'], 'two interim heads, then the answer')
  behaviour = answerWith('HTTP/1.1 102 Processing\r\n\r\n'.repeat(16) + final)
  const sixteen = await request(pods.kube.frontDoorPort, { host: HOST, method: 'GET', path: '/x' })
  t.same([sixteen.status, sixteen.body], [200, 'ok'], 'sixteen, then the answer')
  behaviour = answerWith('HTTP/1.1 102 Processing\r\n\r\n'.repeat(17) + final)
  const seventeen = await request(pods.kube.frontDoorPort, { host: HOST, method: 'GET', path: '/x' })
  t.same([seventeen.status, seventeen.headers['x-stargate-error-code']], [502, 'upstream_invalid_response'], 'seventeen: refused')
  t.equal((await fetch(`http://127.0.0.1:${pods.kube.router.health.port}/livez`)).status, 200)
})

// A pod's 204 with content-length reached HTTP/2 clients as declared, and they reset the
// stream (curl: PROTOCOL_ERROR, exit 92), losing the answer.
t.test('a pod\'s 204 with a content-length reaches the client as a 204 without one', async (t) => {
  const pods = await routerWithRawPod(t, '127.0.9.55', answerWith('HTTP/1.1 204 No Content\r\nContent-Length: 5\r\nX-Kept: yes\r\n\r\n'))
  const session = http2.connect(`http://127.0.0.1:${pods.kube.frontDoorPort}`)
  t.teardown(() => { session.destroy() })
  const answer = await new Promise<{ headers: http2.IncomingHttpHeaders, error: string | null }>((resolve) => {
    const stream = session.request({ ':method': 'GET', ':path': '/x', ':authority': HOST })
    let headers: http2.IncomingHttpHeaders = {}
    let error: string | null = null
    stream.on('response', (h) => { headers = h })
    stream.on('error', (err: NodeJS.ErrnoException) => { error = err.code ?? err.message })
    stream.on('close', () => { resolve({ headers, error }) })
    stream.resume()
  })
  t.equal(answer.error, null, 'the stream ends cleanly')
  t.equal(answer.headers[':status'], 204)
  t.equal(answer.headers['content-length'], undefined, 'no content-length')
  t.equal(answer.headers['x-kept'], 'yes', 'the other fields are kept')
  const h1 = await request(pods.kube.frontDoorPort, { host: HOST, method: 'GET', path: '/x' })
  t.same([h1.status, h1.headers['content-length'], h1.headers['x-kept']], [204, undefined, 'yes'], 'HTTP/1.1 client: the same')
})
