/**
 * SPEC §11: what the front door's clients see when the router drains. Registration streams end
 * at once with UNAVAILABLE `router is shutting down` and only then does the connection get
 * GOAWAY (a Pylon re-registers through another replica while this one drains); a gRPC stream
 * that reaches the router after its connection began to drain is refused the same way (a
 * stream above the GOAWAY's last stream id nghttp2 ignores itself, RFC 9113 §6.8); LLM
 * requests and SSE streams on the same connections finish; an HTTP/1.1 keep-alive connection's
 * next response carries `connection: close`, an idle one is closed at once; and the shutdown is
 * over as soon as the last response has ended, not at the drain timeout.
 *
 * Failure modes: registrations held until the deadline (the old contract), a GOAWAY that
 * reaches the Pylon before its stream's status (it would see the stream reset instead), an
 * SSE stream cut by the drain, a keep-alive connection left open so its client sends its next
 * request into a closing router.
 */
import t from 'tap'
import net from 'node:net'
import http2 from 'node:http2'
import { StubPods } from '../fixtures/stub-pods.ts'
import { RawH2Client, FRAME, FLAG, frame } from '../fixtures/raw-h2.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(120_000)

/** gRPC request headers of RegisterInferenceServer to an advertised stargate. */
function registration (authority: string): Array<[string, string]> {
  return [[':method', 'POST'], [':scheme', 'http'], [':path', '/stargate.StargateControlPlane/RegisterInferenceServer'], [':authority', authority], ['content-type', 'application/grpc'], ['te', 'trailers']]
}

/** One empty InferenceServerRegistration, framed. */
const EMPTY_MESSAGE = Buffer.from([0, 0, 0, 0, 0])

t.test('a registration stream ends UNAVAILABLE `router is shutting down` before its connection gets GOAWAY', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], args: ['--shutdown-drain-timeout-ms', '30000'] })
  const client = await RawH2Client.connect(pods.kube.frontDoorPort)
  t.teardown(() => { client.close() })
  client.headers(1, registration(`${pods.advertisedHost('stargate-0')}:50071`), false)
  client.data(1, EMPTY_MESSAGE, false)
  const response = await client.waitFrame((f) => f.type === FRAME.HEADERS && f.streamId === 1)
  if (response === null) throw new Error('closed before the response')
  t.equal(client.decode(response)[':status'], '200', 'the pod answered through the router')
  await waitFor(() => pods.stubs.get('stargate-0')?.registrations.length === 1 ? true : undefined)

  const shutdown = pods.kube.router.shutdown()
  const trailers = await client.waitFrame((f) => f.type === FRAME.HEADERS && f.streamId === 1 && (f.flags & FLAG.END_STREAM) !== 0)
  if (trailers === null) throw new Error('closed before the trailers')
  t.match(client.decode(trailers), { 'grpc-status': '14', 'grpc-message': 'router is shutting down' }, 'UNAVAILABLE with the message')
  const goaway = await client.waitFrame((f) => f.type === FRAME.GOAWAY)
  if (goaway === null) throw new Error('closed before the GOAWAY')
  t.ok(client.frames.indexOf(trailers) < client.frames.indexOf(goaway), 'the status came first, then GOAWAY')
  t.equal(goaway.payload.readUInt32BE(4), 0, 'GOAWAY NO_ERROR')
  await waitFor(() => pods.stubs.get('stargate-0')?.registrations[0]?.cancelled === true ? true : undefined, { message: 'the pod stream cancelled' })
  t.equal(await pods.kube.metric('stargate_k8s_router_connections_drained_total', { kind: 'registration', reason: 'shutdown' }), 1, 'drained as a registration connection')
  client.close()
  await shutdown
})

t.test('a gRPC stream that reaches a draining connection before its GOAWAY is refused UNAVAILABLE and counted', async (t) => {
  // The GOAWAY waits for the ended stream's status; with the client's stream window at 0 that
  // status cannot go out (its last DATA is held), so the GOAWAY waits its 200 ms and a stream
  // the client opens meanwhile reaches the router while the connection drains.
  const pods = await StubPods.start(t, { pods: ['stargate-0'], args: ['--shutdown-drain-timeout-ms', '30000'] })
  const client = await RawH2Client.connect(pods.kube.frontDoorPort)
  t.teardown(() => { client.close() })
  const noWindow = Buffer.alloc(6)
  noWindow.writeUInt16BE(0x4, 0) // SETTINGS_INITIAL_WINDOW_SIZE
  noWindow.writeUInt32BE(0, 2)
  client.write(frame(FRAME.SETTINGS, 0, 0, noWindow))
  client.headers(1, registration(`${pods.advertisedHost('stargate-0')}:50071`), false)
  client.data(1, EMPTY_MESSAGE, false)
  const response = await client.waitFrame((f) => f.type === FRAME.HEADERS && f.streamId === 1)
  if (response === null) throw new Error('closed before the response')
  client.decode(response) // HPACK state: header blocks are decoded in arrival order
  await waitFor(() => pods.stubs.get('stargate-0')?.registrations.length === 1 ? true : undefined)
  const shutdown = pods.kube.router.shutdown()
  await new Promise((resolve) => { setTimeout(resolve, 50) })
  t.equal(client.frames.some((f) => f.type === FRAME.GOAWAY), false, 'no GOAWAY yet')
  client.headers(3, registration(`${pods.advertisedHost('stargate-0')}:50071`), false)
  const refused = await client.waitFrame((f) => f.type === FRAME.HEADERS && f.streamId === 3)
  if (refused === null) throw new Error('closed before the answer')
  t.match(client.decode(refused), { ':status': '200', 'grpc-status': '14', 'grpc-message': 'router is shutting down' }, 'trailers-only UNAVAILABLE')
  t.equal(await pods.kube.metric('stargate_k8s_router_drain_streams_refused_total', { kind: 'registration', side: 'pylon' }), 1, 'counted')
  t.equal(pods.stubs.get('stargate-0')?.registrations.length, 1, 'nothing reached the pod')
  const grant = Buffer.alloc(4)
  grant.writeUInt32BE(1 << 20)
  client.write(frame(FRAME.WINDOW_UPDATE, 0, 1, grant))
  client.close()
  await shutdown
})

t.test('an SSE stream and a request in flight finish; keep-alive connections get connection: close or are closed at once; shutdown ends with the last response', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: { tokenIntervalMs: 100 }, args: ['--shutdown-drain-timeout-ms', '30000'] })
  const port = pods.kube.frontDoorPort
  const host = `${pods.advertisedHost('stargate-0')}`
  // HTTP/1.1, keep-alive: an SSE stream of 15 tokens (1.5 s), a request whose answer comes in
  // 800 ms, and an idle connection that has finished one request.
  const sse = await rawHttp1(port, `POST /v1/chat/completions HTTP/1.1\r\nhost: ${host}\r\ncontent-type: application/json\r\ncontent-length: 33\r\n\r\n{"stream":true,"max_tokens":15}  `)
  await waitFor(() => sse.data.includes('data: '), { message: 'the first token' })
  const slow = await rawHttp1(port, `GET /slow?ms=800 HTTP/1.1\r\nhost: ${host}\r\n\r\n`)
  await waitFor(() => pods.llms.get('stargate-0')?.requests.some((r) => r.url.startsWith('/slow')) === true ? true : undefined)
  const idle = await rawHttp1(port, `GET /status/200 HTTP/1.1\r\nhost: ${host}\r\n\r\n`)
  await waitFor(() => idle.data.includes('"pod"') ? true : undefined, { message: 'the idle connection\'s first answer' })
  t.match(idle.data, /connection: keep-alive/i, 'a keep-alive connection')
  // HTTP/2 (h2c): an SSE stream.
  const h2 = http2.connect(`http://127.0.0.1:${port}`)
  t.teardown(() => { h2.destroy() })
  let goaway = false
  h2.on('goaway', () => { goaway = true })
  h2.on('error', () => {})
  const stream = h2.request({ ':method': 'POST', ':path': '/v1/chat/completions', ':authority': host, 'content-type': 'application/json' })
  stream.end('{"stream":true,"max_tokens":15}')
  let h2Body = ''
  stream.setEncoding('utf8').on('data', (chunk: string) => { h2Body += chunk })
  const h2Ended = new Promise<void>((resolve) => { stream.on('end', resolve); stream.on('close', resolve) })
  await waitFor(() => h2Body.includes('data: ') ? true : undefined, { message: 'the first HTTP/2 token' })

  const started = Date.now()
  const shutdown = pods.kube.router.shutdown()
  await waitFor(() => idle.closedAt !== null ? true : undefined, { message: 'the idle keep-alive connection closed', timeoutMs: 2000 })
  t.ok((idle.closedAt ?? 0) - started < 1000, 'the idle connection is closed at once')
  await waitFor(() => goaway ? true : undefined, { message: 'GOAWAY on the HTTP/2 connection', timeoutMs: 2000 })

  await waitFor(() => slow.closedAt !== null ? true : undefined, { message: 'the slow answer', timeoutMs: 10_000 })
  t.match(slow.data, /^HTTP\/1\.1 200/, 'the request in flight was answered')
  t.match(slow.data, /\r\nconnection: close\r\n/i, 'with connection: close')
  await waitFor(() => sse.closedAt !== null ? true : undefined, { message: 'the SSE stream to end', timeoutMs: 10_000 })
  t.equal((sse.data.match(/^data: /gm) ?? []).length, 15 + 1, 'every SSE token and the [DONE] line arrived')
  await h2Ended
  t.equal((h2Body.match(/^data: /gm) ?? []).length, 15 + 1, 'so did the HTTP/2 SSE stream\'s')
  await shutdown
  const lastEnd = Math.max(sse.closedAt ?? 0, slow.closedAt ?? 0)
  const tookMs = Date.now() - started
  t.ok(Date.now() - lastEnd < 1500, `shutdown done ${Date.now() - lastEnd} ms after the last response ended (${tookMs} ms in all, drain timeout 30 s)`)
})

interface Raw {
  data: string
  closedAt: number | null
}

function rawHttp1 (port: number, request: string): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1')
    const raw: Raw = { data: '', closedAt: null }
    socket.setEncoding('latin1')
    socket.on('data', (chunk: string) => { raw.data += chunk })
    socket.on('close', () => { raw.closedAt = Date.now() })
    socket.on('error', () => {})
    socket.once('connect', () => { socket.write(request); resolve(raw) })
    socket.once('error', reject)
  })
}
