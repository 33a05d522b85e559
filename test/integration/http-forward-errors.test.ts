// SPEC §6 error table: each failure reaches the LLM client as JSON
// `{ error: { code, message } }` with x-stargate-error-code and the documented status.
import t from 'tap'
import net from 'node:net'
import { StubPods } from '../fixtures/stub-pods.ts'
import { stargateSlice } from '../fixtures/kube-router.ts'
import { waitFor } from '../fixtures/wait.ts'
import { rawExchange, request } from '../fixtures/http-client.ts'

function errorOf (reply: { status: number, headers: Record<string, unknown>, body: string }): { status: number, code: unknown, header: unknown, message: unknown } {
  const body = JSON.parse(reply.body) as { error: { code: string, message: string } }
  return { status: reply.status, code: body.error.code, header: reply.headers['x-stargate-error-code'], message: body.error.message }
}

async function closedPort (ip: string): Promise<number> {
  const server = net.createServer()
  await new Promise<void>((resolve) => { server.listen(0, ip, resolve) })
  const port = (server.address() as net.AddressInfo).port
  await new Promise<void>((resolve) => { server.close(() => { resolve() }) })
  return port
}

t.test('a Host for the template domain naming no ready pod is 404 unknown_target', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1)
  const reply = await request(pods.kube.frontDoorPort, { host: 'stargate-9.stargate.external' })
  t.same(errorOf(reply), { status: 404, code: 'unknown_target', header: 'unknown_target', message: 'the host names no ready stargate' })
  t.match(reply.headers['content-type'], /^application\/json/)
  t.ok(typeof reply.headers['x-request-id'] === 'string', 'errors carry a request id too')
})

t.test('no ready pod with an http port is 503 no_ready_targets', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'] })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1)
  const reply = await request(pods.kube.frontDoorPort, { host: 'llm.example.com' })
  t.same(errorOf(reply), { status: 503, code: 'no_ready_targets', header: 'no_ready_targets', message: 'no ready stargate has an http port' })
})

t.test('a Host naming a ready pod without an http port is 503 target_unavailable', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'] })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1)
  const reply = await request(pods.kube.frontDoorPort, { host: 'stargate-0.stargate.external:50071' })
  t.same(errorOf(reply), { status: 503, code: 'target_unavailable', header: 'target_unavailable', message: 'the named stargate has no http port' })
})

t.test('a refused connection is retried once on another pod', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, logLevel: 'debug' })
  const port = await closedPort('127.0.9.20')
  pods.kube.fake.apply(stargateSlice('stargate-refuser', [{ pod: 'stargate-refuser', ip: '127.0.9.20' }], { ports: { grpc: 1, quic: 2, http: port } }))
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 2)
  for (let i = 0; i < 20; i++) {
    const reply = await request(pods.kube.frontDoorPort, { host: 'llm.example.com' })
    t.equal(reply.status, 200, `request ${i} answered despite one refusing pod`)
  }
  t.ok(pods.kube.logs.lines().some((l) => l.msg === 'retrying request on another pod after a connect failure'), 'some requests were retried')
  t.equal(pods.llms.get('stargate-0')?.requests.length, 20, 'all landed on the pod that accepts')
})

t.test('when every pod refuses, the request is retried once then 502 upstream_error', async (t) => {
  const pods = await StubPods.start(t, { pods: [] })
  for (const [i, ip] of ['127.0.9.21', '127.0.9.22'].entries()) {
    pods.kube.fake.apply(stargateSlice(`stargate-r${i}`, [{ pod: `stargate-r${i}`, ip }], { ports: { grpc: 1, quic: 2, http: await closedPort(ip) } }))
  }
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 2)
  const reply = await request(pods.kube.frontDoorPort, { host: 'llm.example.com' })
  t.same(errorOf(reply), { status: 502, code: 'upstream_error', header: 'upstream_error', message: 'the stargate could not be reached or failed before responding' })
  const failed = pods.kube.logs.lines().filter((l) => l.msg === 'upstream request failed')
  t.equal(failed.at(-1)?.attempt, 2, 'after exactly one retry')
  const named = await request(pods.kube.frontDoorPort, { host: 'stargate-r0.stargate.external' })
  t.equal(named.status, 502, 'a request naming a refusing pod is not sent elsewhere')
})

t.test('a pod that does not answer in time is 504 upstream_timeout', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http-headers-timeout-ms', '300'] })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1)
  const started = Date.now()
  const reply = await request(pods.kube.frontDoorPort, { host: 'stargate-0.stargate.external', path: '/slow?ms=3000', method: 'GET' })
  t.same(errorOf(reply), { status: 504, code: 'upstream_timeout', header: 'upstream_timeout', message: 'the stargate did not answer in time' })
  t.ok(Date.now() - started < 2500, 'answered at the timeout, not when the pod finally responds')
})

t.test('a body over --http-max-body-bytes is 413 payload_too_large, with or without content-length', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http-max-body-bytes', '1000'] })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1)
  const big = JSON.stringify({ text: 'x'.repeat(2000) })
  const declared = await request(pods.kube.frontDoorPort, { host: 'stargate-0.stargate.external', body: big })
  t.same(errorOf(declared), { status: 413, code: 'payload_too_large', header: 'payload_too_large', message: 'request body is larger than the router accepts' })
  t.equal(pods.llms.get('stargate-0')?.requests.length, 0, 'a declared oversize body is refused before anything is sent')
  const chunked = await request(pods.kube.frontDoorPort, { host: 'stargate-0.stargate.external', path: '/slow?ms=2000', body: big, headers: { 'transfer-encoding': 'chunked' } })
  t.equal(chunked.status, 413, 'a chunked body is cut off when it passes the limit')
  const small = await request(pods.kube.frontDoorPort, { host: 'stargate-0.stargate.external', body: '{"ok":true}' })
  t.equal(small.status, 200, 'a body under the limit passes')
})

function raw (port: number, bytes: string): Promise<string> {
  return rawExchange(port, bytes, 2000)
}

t.test('malformed requests and header injection get 400 and never reach a pod', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1)
  const port = pods.kube.frontDoorPort
  const cases: Array<[string, string]> = [
    ['garbage request line', 'HELLO THERE\r\n\r\n'],
    ['a bare CR inside a header value (header injection)', 'GET / HTTP/1.1\r\nHost: stargate-0.stargate.external\r\nX-Evil: a\rInjected: b\r\n\r\n'],
    ['both Content-Length and Transfer-Encoding (request smuggling)', 'POST / HTTP/1.1\r\nHost: stargate-0.stargate.external\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'],
    ['an invalid header name', 'GET / HTTP/1.1\r\nHost: stargate-0.stargate.external\r\nBad Header: x\r\n\r\n'],
    ['a request line with spaces in the target', 'GET /a b HTTP/1.1\r\nHost: x\r\n\r\n'],
  ]
  for (const [what, bytes] of cases) {
    const answer = await raw(port, bytes)
    t.match(answer, /^HTTP\/1\.1 400 /, `${what}: 400`)
  }
  t.equal(pods.llms.get('stargate-0')?.requests.length, 0, 'nothing reached the pod')
  const fine = await request(port, { host: 'stargate-0.stargate.external' })
  t.equal(fine.status, 200, 'the router keeps serving')
})

t.test('oversized request headers are 431', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http2-max-header-list-bytes', '4096'] })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1)
  const answer = await raw(pods.kube.frontDoorPort, `GET / HTTP/1.1\r\nHost: stargate-0.stargate.external\r\nX-Pad: ${'p'.repeat(8000)}\r\n\r\n`)
  t.match(answer, /^HTTP\/1\.1 431 /)
})
