// Fault suite, SPEC §12 ("a slow client costs a pod nothing it cannot afford"). The
// attack: 2,100 HTTP/1.1 POSTs with `Content-Length: 100000`, each sending one byte every 2 s
// (under the body idle timeout), took a pod's 1,024 connections and 1,024 queue places: 52
// clients got 503 upstream_busy and a legitimate request to that pod got no answer. And every
// request aborted while it held a pod connection left a fresh idle one behind (+1,022 after
// the attack, kept 30 s): undici put the aborted request back as pending and reconnected for it.
//
// Scaled to run in well under a minute on a loaded 2-core machine: the pod takes 16 connections
// and 16 queue places, and 300 tricklers send one byte a second from one address; legitimate
// clients come from other addresses. What users see: the legitimate request is answered, no
// pod connection is held by a request whose body is still trickling in, tricklers below the
// minimum rate get 408 body_rate_too_low, and aborted requests leave no pod connection behind.
import t from 'tap'
import net from 'node:net'
import http from 'node:http'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startReadyRouter, tempDir, type Teardown } from '../fixtures/router-process.ts'
import { StubLlm } from '../fixtures/stub-llm.ts'
import { probe } from '../fixtures/fault-probe.ts'
import { sleep, waitFor } from '../fixtures/wait.ts'

t.setTimeout(120_000)

const HOST = 'stargate-0.stargate.external'
const CAP = ['--http-upstream-max-connections', '16', '--http-upstream-max-queue', '16']
const TRICKLERS = 300

async function podAndRouter (t: Teardown, ip: string, args: readonly string[]): Promise<{ llm: StubLlm, frontDoor: number, router: ReturnType<typeof probe> }> {
  const llm = await StubLlm.start({ podName: 'stargate-0', ip, tokenIntervalMs: 50 })
  t.teardown(() => { llm.close() })
  const targets = join(await tempDir(t, 'stargate-slow-bodies-'), 'targets.yaml')
  await writeFile(targets, `targets:\n  - {identity: stargate-0, address: ${ip}, grpcPort: 50051, quicPort: 50052, httpPort: ${llm.port}}\n`)
  const { frontDoor, health } = await startReadyRouter(t, ['--targets-file', targets, ...args])
  return { llm, frontDoor, router: probe(health) }
}

interface Raw {
  readonly socket: net.Socket
  /** Everything the router sent so far. */
  text: string
  closed: boolean
}

/** A raw client connection from localAddress that writes first once connected. */
function raw (port: number, localAddress: string, first: string): Raw {
  const socket = net.connect({ port, host: '127.0.0.1', localAddress }, () => { socket.write(first) })
  const client: Raw = { socket, text: '', closed: false }
  socket.on('data', (chunk: Buffer) => { client.text += chunk.toString('latin1') })
  socket.on('error', () => {})
  socket.on('close', () => { client.closed = true })
  return client
}

/** Sends one byte on every open connection each intervalMs, until stopped. */
function trickle (clients: readonly Raw[], intervalMs: number): () => void {
  const timer = setInterval(() => {
    for (const c of clients) if (!c.closed && c.text === '') c.socket.write('x')
  }, intervalMs)
  return () => { clearInterval(timer) }
}

/** One request from localAddress on its own connection; rejects when no answer comes within timeoutMs. */
function legit (port: number, localAddress: string, path: string, body: string, timeoutMs: number): Promise<{ status: number, code: string | undefined, body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, localAddress, path, method: 'POST', agent: false, headers: { host: HOST, 'content-type': 'application/json' }, timeout: timeoutMs }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => { text += c })
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, code: res.headers['x-stargate-error-code'] as string | undefined, body: text }) })
    })
    req.on('timeout', () => { req.destroy(new Error(`no answer within ${timeoutMs} ms`)) })
    req.on('error', reject)
    req.end(body)
  })
}

const UPLOAD_HEAD = `POST /echo HTTP/1.1\r\nhost: ${HOST}\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n`

t.test('300 trickling uploads take no pod connection, and a legitimate request to the same pod is answered', async (t) => {
  const { llm, frontDoor, router } = await podAndRouter(t, '127.0.1.121', CAP)
  const tricklers: Raw[] = []
  for (let i = 0; i < TRICKLERS; i++) tricklers.push(raw(frontDoor, '127.0.50.1', UPLOAD_HEAD + 'x'))
  const stop = trickle(tricklers, 1000)
  t.teardown(() => { stop(); for (const c of tricklers) c.socket.destroy() })
  const answered = (): Raw[] => tricklers.filter((c) => c.text !== '')
  await waitFor(async () => (await router.metric('stargate_k8s_router_http_requests_in_flight') ?? 0) + answered().length >= TRICKLERS, { timeoutMs: 30_000, message: 'every trickler\'s head at the router' })
  t.same(answered().map((c) => c.text.slice(0, c.text.indexOf('\r\n'))), [], 'no trickler was refused: the pod\'s places are not theirs to take')
  t.equal(llm.connections, 0, 'no pod connection is held by a request whose body is still arriving')
  t.equal(llm.requests.length, 0, 'the pod has seen none of them')
  t.equal(await router.metric('stargate_k8s_router_http_request_bodies_buffering'), TRICKLERS, 'their bodies are being read by the router')

  const reply = await legit(frontDoor, '127.0.60.1', '/v1/chat/completions', '{"model":"m","messages":[]}', 10_000)
  t.equal(reply.status, 200, 'the legitimate request is answered')
  t.equal(JSON.parse(reply.body).object, 'chat.completion')

  // A head whose body has not started: no pod connection for it either.
  const seen = llm.requests.length
  const accepted = llm.accepted
  const headOnly = raw(frontDoor, '127.0.60.2', `POST /echo HTTP/1.1\r\nhost: ${HOST}\r\ncontent-length: 1000\r\n\r\n`)
  await waitFor(async () => await router.metric('stargate_k8s_router_http_requests_in_flight') === TRICKLERS + 1, { message: 'the head-only request in flight' })
  await sleep(500)
  t.equal(llm.requests.length, seen, 'a request whose body has not started does not reach the pod')
  t.equal(llm.accepted, accepted, 'and opens no pod connection')
  headOnly.socket.destroy()

  stop()
  for (const c of tricklers) c.socket.destroy()
  await waitFor(async () => await router.metric('stargate_k8s_router_http_requests_in_flight') === 0, { timeoutMs: 20_000, message: 'no request in flight after the tricklers left' })
  await sleep(1000)
  t.ok(llm.connections <= 1, `pod connections after the attack: ${llm.connections} (at most the legitimate request's, kept alive)`)
  t.equal(await router.livez(), 200)
})

t.test('requests holding every pod connection and queue place leave no pod connection behind when their clients vanish', async (t) => {
  const { llm, frontDoor, router } = await podAndRouter(t, '127.0.1.122', CAP)
  const clients: Raw[] = []
  // 8 token streams and 8 uploads past the body buffer hold the 16 connections (each from its
  // own address: the per-client share is not what this tests); 16 more streams wait.
  const upload = `POST /echo HTTP/1.1\r\nhost: ${HOST}\r\ncontent-length: 1000000\r\n\r\n` + 'u'.repeat(100 * 1024)
  const stream = `GET /sse-forever HTTP/1.1\r\nhost: ${HOST}\r\n\r\n`
  for (let i = 0; i < 16; i++) clients.push(raw(frontDoor, `127.0.51.${i + 1}`, i < 8 ? stream : upload))
  t.teardown(() => { for (const c of clients) c.socket.destroy() })
  await waitFor(() => llm.requests.length === 16, { timeoutMs: 20_000, message: 'the pod serving 16 requests' })
  for (let i = 16; i < 32; i++) clients.push(raw(frontDoor, `127.0.51.${i + 1}`, stream))
  await waitFor(async () => await router.metric('stargate_k8s_router_http_requests_in_flight') === 32, { timeoutMs: 20_000, message: '16 more requests waiting for a connection' })
  t.equal(llm.accepted, 16, 'the pod took its 16 connections')

  for (const c of clients) c.socket.destroy()
  await waitFor(() => llm.openResponses === 0, { timeoutMs: 20_000, message: 'the pod saw every request end' })
  await waitFor(async () => await router.metric('stargate_k8s_router_http_requests_in_flight') === 0, { message: 'no request in flight' })
  // Long enough for a reconnect (a loopback connect takes well under a millisecond) to show.
  await sleep(1000)
  t.equal(llm.connections, 0, 'no idle pod connection is left behind')
  // A waiting request can be given a freed connection before the router has read its own
  // client's FIN (the clients all leave at once); that connection is closed when the FIN is
  // read. What must not happen is an abort opening a connection of its own.
  t.ok(llm.accepted <= 32, `at most one pod connection per request: ${llm.accepted} for 32`)
  t.equal(await router.metricSum('stargate_k8s_router_http_requests_total', { outcome: 'client_aborted' }), 32)
})

t.test('uploads trickling below the minimum rate get 408 body_rate_too_low and never reach the pod; a slow but steady one is forwarded', async (t) => {
  const { llm, frontDoor, router } = await podAndRouter(t, '127.0.1.123', [...CAP, '--http-body-min-bytes-per-second', '200', '--http-body-rate-window-ms', '1000'])
  const tricklers: Raw[] = []
  for (let i = 0; i < 100; i++) tricklers.push(raw(frontDoor, '127.0.52.1', UPLOAD_HEAD + 'x'))
  const stop = trickle(tricklers, 200)
  t.teardown(() => { stop(); for (const c of tricklers) c.socket.destroy() })
  // 300 bytes every 200 ms: 1,500 bytes/s, above the minimum of 200.
  const body = JSON.stringify({ text: 'y'.repeat(5990) })
  const steady = raw(frontDoor, '127.0.60.3', `POST /echo HTTP/1.1\r\nhost: ${HOST}\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n`)
  let sent = 0
  const pump = setInterval(() => { if (sent < body.length) { steady.socket.write(body.slice(sent, sent + 300)); sent += 300 } }, 200)
  t.teardown(() => { clearInterval(pump); steady.socket.destroy() })

  await waitFor(() => tricklers.every((c) => c.closed), { timeoutMs: 20_000, message: 'every trickler answered and closed' })
  const statuses = new Set(tricklers.map((c) => c.text.slice(0, c.text.indexOf('\r\n'))))
  t.same([...statuses], ['HTTP/1.1 408 Request Timeout'], 'every trickler: 408')
  t.ok(tricklers.every((c) => /\r\nx-stargate-error-code: body_rate_too_low\r\n/i.test(c.text)), 'with x-stargate-error-code body_rate_too_low')
  t.ok(tricklers.every((c) => c.text.endsWith('{"error":{"code":"body_rate_too_low","message":"the request body arrived more slowly than the router accepts"}}')), 'and the JSON error body')
  t.equal(await router.metric('stargate_k8s_router_http_client_limit_refusals_total', { reason: 'body_rate_too_low' }), 100, 'each counted')

  await waitFor(() => steady.closed, { timeoutMs: 20_000, message: 'the steady upload answered' })
  t.match(steady.text, /^HTTP\/1\.1 200 /, 'the steady upload is forwarded')
  t.equal(JSON.parse(steady.text.slice(steady.text.indexOf('\r\n\r\n') + 4)).body, body, 'whole')
  t.same(llm.requests.map((r) => r.url), ['/echo'], 'the pod saw only the steady upload')
})
