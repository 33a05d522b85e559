// SPEC §6 and §12: the front door's timeouts apply. Node would arm none of them (the inner
// HTTP servers never listen, so Node never arms their timers): without the router's own
// deadlines a request head without its blank line stays open past 40 s, and an h2c preface
// with SETTINGS and nothing else forever.
// Each case sends exactly those bytes and checks that the router closes the connection, how
// (408, GOAWAY), and the counter; and that busy connections (an SSE stream, an open watch) are
// not cut by an idle timeout.
import t from 'tap'
import net from 'node:net'
import { StubPods } from '../fixtures/stub-pods.ts'
import { FRAME, RawH2Client } from '../fixtures/raw-h2.ts'
import { waitFor } from '../fixtures/wait.ts'
import { request } from '../fixtures/http-client.ts'
import { createCa, createLeaf } from '../fixtures/certs.ts'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const SHORT = ['--http-headers-timeout-ms', '400', '--http-keep-alive-timeout-ms', '400', '--http2-session-idle-timeout-ms', '400']
const HOST = 'stargate-0.stargate.external'
/** The opt-in that makes the front door TLS, besides a server identity. */
const FRONT_DOOR_TLS: readonly string[] = ['--front-door-tls']

/** A raw connection: what it received and when the router closed it. */
function rawConnection (port: number, bytes: string): { socket: net.Socket, closed: Promise<string> } {
  const socket = net.connect(port, '127.0.0.1', () => { if (bytes !== '') socket.write(bytes) })
  socket.on('error', () => {})
  const closed = new Promise<string>((resolve) => {
    let text = ''
    socket.on('data', (chunk: Buffer) => { text += chunk.toString('latin1') })
    socket.on('close', () => { resolve(text) })
  })
  return { socket, closed }
}

t.test('a request head without its blank line is answered 408 and closed after the headers timeout', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: SHORT })
  const partial = rawConnection(pods.kube.frontDoorPort, `GET / HTTP/1.1\r\nHost: ${HOST}\r\n`)
  t.teardown(() => { partial.socket.destroy() })
  t.match(await partial.closed, /^HTTP\/1\.1 408 /)
  t.equal(await pods.kube.metric('stargate_k8s_router_front_door_connections_timed_out_total', { reason: 'headers_timeout' }), 1)
  t.equal(pods.llms.get('stargate-0')?.requests.length, 0)
})

t.test('a connection that never says which protocol it speaks is closed after the headers timeout', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], args: SHORT })
  const silent = rawConnection(pods.kube.frontDoorPort, '')
  const ambiguous = rawConnection(pods.kube.frontDoorPort, 'PRI * HTTP/2.0\r\n')
  t.teardown(() => { silent.socket.destroy(); ambiguous.socket.destroy() })
  t.equal(await silent.closed, '', 'no bytes at all')
  t.equal(await ambiguous.closed, '', 'half an HTTP/2 preface')
  t.equal(await pods.kube.metric('stargate_k8s_router_front_door_connections_timed_out_total', { reason: 'headers_timeout' }), 2)
})

t.test('an idle keep-alive connection is closed after the keep-alive timeout, and a slow next head after the headers timeout', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: SHORT })
  const idle = rawConnection(pods.kube.frontDoorPort, `GET /status/200 HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`)
  t.teardown(() => { idle.socket.destroy() })
  t.match(await idle.closed, /^HTTP\/1\.1 200 /, 'answered, then closed once idle')
  t.equal(await pods.kube.metric('stargate_k8s_router_front_door_connections_timed_out_total', { reason: 'keep_alive_timeout' }), 1)
  // A second request whose head starts after the first response and never ends.
  const slow = rawConnection(pods.kube.frontDoorPort, `GET /status/200 HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`)
  t.teardown(() => { slow.socket.destroy() })
  slow.socket.once('data', () => { slow.socket.write(`GET /status/200 HTTP/1.1\r\nHost: ${HOST}\r\n`) })
  t.match(await slow.closed, /408 Request Timeout/, 'the unfinished second head gets 408')
})

t.test('an SSE stream longer than the keep-alive timeout is not cut', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: { tokenIntervalMs: 100 }, args: SHORT })
  const reply = await request(pods.kube.frontDoorPort, { host: HOST, body: JSON.stringify({ stream: true, max_tokens: 12 }) })
  t.equal(reply.status, 200)
  t.equal(reply.body.split('data: ').length - 1, 13, 'all 12 tokens and [DONE] arrived')
})

t.test('an h2c connection that sends its preface and SETTINGS and nothing else gets GOAWAY after the idle timeout', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], args: SHORT })
  const client = await RawH2Client.connect(pods.kube.frontDoorPort)
  t.teardown(() => { client.close() })
  const goaway = await client.waitFrame((f) => f.type === FRAME.GOAWAY, 15_000)
  t.ok(goaway !== null, 'GOAWAY')
  t.equal(goaway?.payload.readUInt32BE(4), 0, 'NO_ERROR')
  await waitFor(() => client.closed, { message: 'the connection closed', timeoutMs: 10_000 })
  t.equal(await pods.kube.metric('stargate_k8s_router_front_door_connections_timed_out_total', { reason: 'http2_idle_timeout' }), 1)
})

t.test('an h2c connection with an open watch stream is not idle, and is once the stream ends', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], args: [...SHORT, '--watch-heartbeat-ms', '100'] })
  const watch = pods.kube.watch()
  await watch.next(() => true, { message: 'the first watch message' })
  const heartbeats = watch.messages.length
  await watch.next(() => watch.messages.length >= heartbeats + 8, { message: 'heartbeats well past the idle timeout', timeoutMs: 15_000 })
  t.equal(watch.error, null, 'the stream is still open')
  t.equal(await pods.kube.metric('stargate_k8s_router_front_door_connections_timed_out_total', { reason: 'http2_idle_timeout' }), 0)
})

t.test('connections over --front-door-max-connections are closed at accept, counted, and the router keeps serving', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--front-door-max-connections', '3'] })
  const port = pods.kube.frontDoorPort
  const held = [0, 1, 2].map(() => rawConnection(port, 'GET / HTTP/1.1\r\n'))
  t.teardown(() => { for (const h of held) h.socket.destroy() })
  await waitFor(async () => await pods.kube.metric('stargate_k8s_router_front_door_connections') === 3, { message: 'three connections open' })
  const extra = rawConnection(port, `GET / HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`)
  t.equal(await extra.closed, '', 'the fourth is closed without an answer')
  t.equal(await pods.kube.metric('stargate_k8s_router_connections_refused_total', { listener: 'front_door', reason: 'max_connections' }), 1)
  for (const h of held) h.socket.destroy()
  await waitFor(async () => await pods.kube.metric('stargate_k8s_router_front_door_connections') === 0, { message: 'the held connections gone' })
  t.equal((await request(port, { host: HOST, method: 'GET', path: '/status/200' })).status, 200, 'served again under the cap')
})

t.test('an idle HTTP/1.1 connection lives as long as --http-keep-alive-timeout-ms says, not Node\'s 5 s', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http-keep-alive-timeout-ms', '60000'] })
  const idle = rawConnection(pods.kube.frontDoorPort, `GET /status/200 HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`)
  t.teardown(() => { idle.socket.destroy() })
  let closed = false
  void idle.closed.then(() => { closed = true })
  await new Promise((resolve) => { setTimeout(resolve, 6500) })
  t.equal(closed, false, 'still open after 6.5 s idle')
  t.equal(await pods.kube.metric('stargate_k8s_router_front_door_connections'), 1)
})

t.test('a TLS handshake that does not finish in --tls-handshake-timeout-ms is closed and counted', async (t) => {
  const ca = await createCa({ name: 'handshake timeout ca' })
  const leaf = await createLeaf(ca, { dnsNames: ['router.example'] })
  const dir = await mkdtemp(join(tmpdir(), 'stargate-handshake-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  await writeFile(join(dir, 'tls.crt'), leaf.chainPem)
  await writeFile(join(dir, 'tls.key'), leaf.keyPem)
  const pods = await StubPods.start(t, { pods: ['stargate-0'], args: [...FRONT_DOOR_TLS, '--tls-cert-path', join(dir, 'tls.crt'), '--tls-key-path', join(dir, 'tls.key'), '--tls-handshake-timeout-ms', '400'] })
  // The first bytes of a ClientHello record, and then nothing.
  const stalled = rawConnection(pods.kube.frontDoorPort, '\u0016\u0003\u0001\u0002\u0000\u0001')
  t.teardown(() => { stalled.socket.destroy() })
  await stalled.closed
  t.equal(await pods.kube.metric('stargate_k8s_router_front_door_connections_timed_out_total', { reason: 'tls_handshake_timeout' }), 1)
})
