// A client that stops reading a large answer kept the pod's connection for as long
// as it liked. The router stops reading the pod when the client's socket is full
// (backpressure, as it should), but no timer ran while it waited: --http-idle-timeout-ms only
// counts the pod's silence, undici's body timeout is paused with the body, and
// --http-request-timeout-ms is off by default. Ten connections that asked for 100 MiB and never
// read held ten pod connections for the 21 s observed; 60 such readers from 8 addresses took
// a pod of 16 connections + 16 queue places, and a legitimate request got 503 upstream_busy.
// SPEC §12: a slow client costs a pod nothing it cannot afford.
//
// The defence (lib/http-forward/forwarder.ts): while the router waits on the client to take
// response bytes, --http-response-stall-timeout-ms runs; then the client's connection (or
// HTTP/2 stream) is closed and the pod's connection destroyed, counted as
// http_client_limit_refusals_total{reason="response_stalled"}.
//
// What the test sends: a GET for a 64 MiB answer never read (HTTP/1.1, and HTTP/2 without a
// WINDOW_UPDATE); 60 of them from 8 addresses against a pod of 16 + 16; and a client reading
// an 8 MiB answer slowly but steadily. What it checks: the pod's connection is let go within
// the stall timeout and a tick, the client's connection is closed, the counters; a legitimate
// request is answered once the readers' stall timeouts ran; the steady reader gets every byte.
import t, { type Test } from 'tap'
import net from 'node:net'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import { StubLlm } from '../fixtures/stub-llm.ts'
import { probe, type Probe } from '../fixtures/fault-probe.ts'
import { FRAME, RawH2Client } from '../fixtures/raw-h2.ts'
import { sleep, waitFor } from '../fixtures/wait.ts'

t.setTimeout(120_000)

const IP = '127.0.1.176'
const HOST = 'stargate-0.stargate.external'
const STALL_MS = 2000

async function start (t: Test, args: string[] = []): Promise<{ llm: StubLlm, frontDoor: number, router: Probe }> {
  const llm = await StubLlm.start({ podName: 'stargate-0', ip: IP })
  t.teardown(() => { llm.close() })
  const targets = join(await tempDir(t, 'stargate-slow-reader-'), 'targets.yaml')
  await writeFile(targets, `targets:\n  - {identity: stargate-0, address: ${IP}, grpcPort: 50051, quicPort: 50052, httpPort: ${llm.port}}\n`)
  const { frontDoor, health } = await startReadyRouter(t, ['--targets-file', targets, '--http-response-stall-timeout-ms', String(STALL_MS), ...args])
  return { llm, frontDoor, router: probe(health) }
}

/** A connection that asks for a large answer and never reads it; closed tells when the router closed it. */
function reader (t: Test, frontDoor: number, localAddress = '127.0.0.1'): { socket: net.Socket, closed: () => boolean } {
  let closed = false
  const socket = net.connect({ port: frontDoor, host: '127.0.0.1', localAddress }, () => { socket.write(`GET /bulk?mb=64 HTTP/1.1\r\nhost: ${HOST}\r\n\r\n`) })
  socket.on('error', () => {})
  // Paused: nothing is read, so the end of the connection is seen only once reading resumes.
  socket.pause()
  socket.on('close', () => { closed = true })
  t.teardown(() => { socket.destroy() })
  return { socket, closed: () => closed }
}

async function inFlight (router: Probe): Promise<number | undefined> {
  return await router.metric('stargate_k8s_router_http_requests_in_flight')
}

t.test('a client that never reads a large HTTP/1.1 answer loses its connection and the pod gets its connection back', async (t) => {
  const { llm, frontDoor, router } = await start(t, ['--http-idle-timeout-ms', '600000'])
  const client = reader(t, frontDoor)
  await waitFor(async () => await inFlight(router) === 1, { message: 'the request in flight' })
  await waitFor(() => llm.bulkWritten > 0, { message: 'the pod answering' })
  const stalledFrom = Date.now()
  await waitFor(async () => await inFlight(router) === 0 && llm.connections === 0, { timeoutMs: STALL_MS + 5000, message: 'the pod connection let go' })
  const heldMs = Date.now() - stalledFrom
  t.ok(llm.bulkWritten < 64 * 1024 * 1024, `the answer stalled (${Math.round(llm.bulkWritten / 1048576)} MiB of 64 written)`)
  t.ok(heldMs < STALL_MS + 3000, `the pod connection was held ${heldMs} ms (stall timeout ${STALL_MS} ms)`)
  t.equal(llm.requests.length, 1, 'one request reached the pod')
  client.socket.resume()
  await waitFor(() => client.closed(), { message: 'the client sees its connection closed once it reads' })
  t.equal(await router.metric('stargate_k8s_router_http_client_limit_refusals_total', { reason: 'response_stalled' }), 1, 'counted as response_stalled')
  t.equal(await router.metric('stargate_k8s_router_http_requests_total', { outcome: 'client_stalled', status_class: '2xx' }), 1, 'and as a client_stalled request')
})

t.test('an HTTP/2 client that never opens its flow-control window gets its stream reset and the pod its connection back', async (t) => {
  const { llm, frontDoor, router } = await start(t)
  const client = await RawH2Client.connect(frontDoor)
  t.teardown(() => { client.close() })
  client.headers(1, [[':method', 'GET'], [':scheme', 'http'], [':path', '/bulk?mb=64'], [':authority', HOST]], true)
  await waitFor(async () => await inFlight(router) === 1, { message: 'the request in flight' })
  const rst = await client.waitFrame((f) => f.type === FRAME.RST_STREAM && f.streamId === 1, STALL_MS + 5000)
  t.not(rst, null, 'the stream is reset')
  await waitFor(async () => await inFlight(router) === 0 && llm.connections === 0, { message: 'the pod connection let go' })
  t.equal(await router.metric('stargate_k8s_router_http_client_limit_refusals_total', { reason: 'response_stalled' }), 1, 'counted as response_stalled')
})

t.test('60 readers from 8 addresses hold a pod of 16 + 16 only until their stall timeouts, then a legitimate request is answered', async (t) => {
  const { llm, frontDoor, router } = await start(t, ['--http-upstream-max-connections', '16', '--http-upstream-max-queue', '16'])
  for (let i = 0; i < 60; i++) reader(t, frontDoor, `127.0.4.${1 + (i % 8)}`)
  await waitFor(async () => await inFlight(router) === 32, { message: 'the pod full: 16 connections and 16 queue places' })
  const started = Date.now()
  let answer = ''
  while (Date.now() - started < 3 * STALL_MS + 10_000) {
    const res = await fetch(`http://127.0.0.1:${frontDoor}/echo`, { headers: { host: HOST } })
    answer = `${res.status} ${res.headers.get('x-stargate-error-code') ?? ''}`
    await res.arrayBuffer()
    if (res.status === 200) break
    await sleep(250)
  }
  t.equal(answer.trim(), '200', `a legitimate request answered ${Date.now() - started} ms after the pod was full`)
  await waitFor(async () => await inFlight(router) === 0, { timeoutMs: 3 * STALL_MS + 10_000, message: 'every reader let go' })
  t.equal(await router.metric('stargate_k8s_router_http_client_limit_refusals_total', { reason: 'response_stalled' }), 32, 'the 32 admitted readers closed for stalling')
  t.ok(llm.connections <= 1, `no pod connection held for them (${llm.connections} open)`)
  const perAddress = new Map<string, number>()
  for (const r of llm.requests) if (r.url.startsWith('/bulk')) perAddress.set(String(r.headers['x-forwarded-for']), (perAddress.get(String(r.headers['x-forwarded-for'])) ?? 0) + 1)
  t.same([...perAddress.values()], Array(8).fill(4), `each address held its share of the pod (4 of 16) and no more: ${JSON.stringify(Object.fromEntries(perAddress))}`)
})

t.test('a client that reads a large answer slowly but steadily gets all of it', async (t) => {
  const { frontDoor, router } = await start(t)
  const socket = net.connect(frontDoor, '127.0.0.1', () => { socket.write(`GET /bulk?mb=8 HTTP/1.1\r\nhost: ${HOST}\r\nconnection: close\r\n\r\n`) })
  socket.on('error', () => {})
  t.teardown(() => { socket.destroy() })
  let received = 0
  let taken = 0
  // 2 MiB a second, 256 KiB every 125 ms: the answer takes about 4 s, twice the stall timeout.
  socket.on('data', (chunk: Buffer) => {
    received += chunk.length
    taken += chunk.length
    if (taken >= 256 * 1024) socket.pause()
  })
  const pace = setInterval(() => { taken = 0; socket.resume() }, 125)
  t.teardown(() => { clearInterval(pace) })
  const started = Date.now()
  await new Promise((resolve) => { socket.once('close', resolve) })
  clearInterval(pace)
  t.ok(Date.now() - started > STALL_MS, `the answer took longer than the stall timeout (${Date.now() - started} ms)`)
  t.ok(received > 8 * 1024 * 1024, `every byte arrived (${received} bytes with the head)`)
  t.equal(await router.metric('stargate_k8s_router_http_client_limit_refusals_total', { reason: 'response_stalled' }), 0, 'nothing closed for stalling')
})
