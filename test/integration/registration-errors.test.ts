// SPEC §5 error table: every way a registration can fail reaches the Pylon as a
// trailers-only gRPC status with the documented code and message, and the router keeps
// serving other streams. Clients: @grpc/grpc-js, node:http2, and raw frames (hpack.js) for
// a request without :authority, which Node's client cannot send.
import t from 'tap'
import net from 'node:net'
import http2 from 'node:http2'
import * as grpc from '@grpc/grpc-js'
import { StubPods } from '../fixtures/stub-pods.ts'
import { stargateSlice } from '../fixtures/kube-router.ts'
import { RawH2Client, FRAME } from '../fixtures/raw-h2.ts'
import { waitFor } from '../fixtures/wait.ts'

const REGISTER = '/stargate.StargateControlPlane/RegisterInferenceServer'

/** One registration call with the given :authority; resolves with its final status. */
function register (address: string, authority: string, messages: Buffer[] = [registration()], metadata = new grpc.Metadata()): Promise<grpc.StatusObject> {
  const client = new grpc.Client(address, grpc.credentials.createInsecure(), { 'grpc.default_authority': authority })
  const call = client.makeBidiStreamRequest(REGISTER, (b: Buffer) => b, (b: Buffer) => b, metadata)
  call.on('data', () => {})
  call.on('error', () => {})
  for (const m of messages) call.write(m)
  call.end()
  return new Promise((resolve) => {
    call.on('status', (status: grpc.StatusObject) => {
      client.close()
      resolve(status)
    })
  })
}

function registration (id = 'pylon-1'): Buffer {
  return Buffer.from([0x0a, id.length, ...Buffer.from(id)])
}

/** A gRPC frame: flags byte, 4-byte length, message. */
function grpcFrame (message: Buffer, flags = 0, declaredLength = message.length): Buffer {
  const header = Buffer.alloc(5)
  header[0] = flags
  header.writeUInt32BE(declaredLength, 1)
  return Buffer.concat([header, message])
}

/** Opens a registration stream with node:http2 and collects the response. */
function rawRegister (address: string, authority: string, body: Buffer, options: { end?: boolean, headers?: Record<string, string> } = {}): Promise<{ headers: http2.IncomingHttpHeaders, trailers: http2.IncomingHttpHeaders | null, session: http2.ClientHttp2Session }> {
  const session = http2.connect(`http://${address}`)
  session.on('error', () => {})
  const stream = session.request({ ':method': 'POST', ':path': REGISTER, ':authority': authority, 'content-type': 'application/grpc', te: 'trailers', ...options.headers })
  stream.on('error', () => {})
  stream.write(body)
  if (options.end !== false) stream.end()
  return new Promise((resolve) => {
    let headers: http2.IncomingHttpHeaders = {}
    let trailers: http2.IncomingHttpHeaders | null = null
    stream.on('response', (h) => { headers = h })
    stream.on('trailers', (h) => { trailers = h })
    stream.on('data', () => {})
    stream.on('close', () => { resolve({ headers, trailers, session }) })
  })
}

function statusOf (result: { headers: http2.IncomingHttpHeaders, trailers: http2.IncomingHttpHeaders | null }): { code: number, message: string } {
  const source = result.trailers ?? result.headers
  return { code: Number(source['grpc-status']), message: decodeURIComponent(String(source['grpc-message'] ?? '')) }
}

t.test('a registration without :authority is INVALID_ARGUMENT', async (t) => {
  // HTTP/2 lets a request carry its authority in `host` instead of :authority (RFC 9113
  // §8.3.1); a gRPC registration must name its Stargate in :authority.
  const pods = await StubPods.start(t, { pods: ['stargate-0'] })
  const client = await RawH2Client.connect(pods.kube.frontDoorPort)
  t.teardown(() => { client.close() })
  client.headers(1, [[':method', 'POST'], [':scheme', 'http'], [':path', REGISTER], ['host', 'stargate-0.stargate.external'], ['content-type', 'application/grpc'], ['te', 'trailers']], true)
  const response = await client.waitFrame((f) => f.type === FRAME.HEADERS && f.streamId === 1)
  t.ok(response !== null, 'a response came back')
  const fields = client.decode(response!)
  t.equal(fields[':status'], '200')
  t.equal(fields['grpc-status'], String(grpc.status.INVALID_ARGUMENT))
  t.equal(fields['grpc-message'], 'registration requires a target stargate authority')
  t.ok((response!.flags & 0x1) !== 0, 'trailers-only: the HEADERS frame ends the stream')
  t.equal(pods.stubs.get('stargate-0')?.registrations.length, 0, 'nothing reached the pod')
})

t.test('a request with neither :authority nor host is refused at the HTTP/2 layer', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'] })
  const client = await RawH2Client.connect(pods.kube.frontDoorPort)
  t.teardown(() => { client.close() })
  client.headers(1, [[':method', 'POST'], [':scheme', 'http'], [':path', REGISTER], ['content-type', 'application/grpc']], true)
  const reset = await client.waitFrame((f) => f.type === FRAME.RST_STREAM && f.streamId === 1)
  t.equal(reset?.payload.readUInt32BE(0), 1, 'RST_STREAM PROTOCOL_ERROR (nghttp2 requires an authority)')
  t.equal((await register(pods.kube.address, 'stargate-0.stargate.external:50071')).code, grpc.status.OK, 'the connection was not the router\'s problem: others register')
})

t.test('an authority for another domain is INVALID_ARGUMENT naming the host', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'] })
  const status = await register(pods.kube.address, 'api.example.com:443')
  t.equal(status.code, grpc.status.INVALID_ARGUMENT)
  t.equal(status.details, 'registration authority api.example.com does not match advertised stargate hostname template')
})

t.test('the Service name as authority is INVALID_ARGUMENT', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'] })
  const status = await register(pods.kube.address, 'stargate-headless:50071')
  t.equal(status.code, grpc.status.INVALID_ARGUMENT)
  t.equal(status.details, 'registration authority stargate-headless does not match advertised stargate hostname template')
  t.equal(await pods.kube.metric('stargate_k8s_router_registration_streams_closed_total', { outcome: 'invalid_argument' }), 1)
})

t.test('a pod that is not ready is UNAVAILABLE naming the pod', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0', 'stargate-1'] })
  pods.setReady('stargate-1', false)
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1)
  const status = await register(pods.kube.address, 'stargate-1.stargate.external:50071')
  t.equal(status.code, grpc.status.UNAVAILABLE)
  t.equal(status.details, 'target stargate stargate-1 is not ready')
  const unknown = await register(pods.kube.address, 'stargate-9.stargate.external:50071')
  t.equal(unknown.details, 'target stargate stargate-9 is not ready', 'a pod that does not exist reads the same')
  t.equal((await register(pods.kube.address, 'stargate-0.stargate.external:50071')).code, grpc.status.OK, 'the ready pod still registers')
})

t.test('a pod that goes away mid-stream ends the stream UNAVAILABLE and others keep going', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0', 'stargate-1'] })
  const pylon = pods.pylon({ heartbeatMs: 50 })
  pylon.watch()
  await waitFor(() => pylon.latest?.stargates.length === 2)
  pylon.registerAll()
  const dying = await waitFor(() => { const r = pylon.registrations.get('stargate-0'); return r !== undefined && r.acks.length > 0 ? r : null })
  const other = await waitFor(() => { const r = pylon.registrations.get('stargate-1'); return r !== undefined && r.acks.length > 0 ? r : null })
  pods.stubs.get('stargate-0')?.kill()
  const status = await waitFor(() => dying.status, { message: 'the stream to the killed pod to end' })
  t.equal(status.code, grpc.status.UNAVAILABLE, 'UNAVAILABLE, never INTERNAL')
  const acks = other.acks.length
  await waitFor(() => other.acks.length > acks + 2, { message: 'the other stream keeps flowing' })
  t.equal(other.status, null)
  // Counted when the Pylon's stream has closed, which can be a moment after the Pylon read the status.
  await waitFor(async () => await pods.kube.metric('stargate_k8s_router_registration_streams_closed_total', { outcome: 'upstream_reset' }) === 1, { message: 'one stream counted upstream_reset' })
  t.pass('the stream is counted upstream_reset')
})

t.test('an upstream that refuses connections is UNAVAILABLE with the cause', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'] })
  const closed = net.createServer()
  await new Promise<void>((resolve) => { closed.listen(0, '127.0.9.9', resolve) })
  const port = (closed.address() as net.AddressInfo).port
  await new Promise<void>((resolve) => { closed.close(() => { resolve() }) })
  pods.kube.fake.apply(stargateSlice('stargate-refuser', [{ pod: 'stargate-refuser', ip: '127.0.9.9' }], { ports: { grpc: port, quic: 50052 } }))
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 2)
  const status = await register(pods.kube.address, 'stargate-refuser.stargate.external:50071')
  t.equal(status.code, grpc.status.UNAVAILABLE)
  t.equal(status.details, 'failed to connect to stargate target: ECONNREFUSED')
  t.equal(await pods.kube.metric('stargate_k8s_router_registration_streams_closed_total', { outcome: 'connect_error' }), 1)
})

t.test('an upstream that never answers times out after --connect-timeout-ms', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], args: ['--connect-timeout-ms', '300'] })
  // Accepts TCP connections and never speaks HTTP/2.
  const silent = net.createServer((socket) => { socket.on('error', () => {}) })
  await new Promise<void>((resolve) => { silent.listen(0, '127.0.9.10', resolve) })
  t.teardown(() => { silent.close() })
  const port = (silent.address() as net.AddressInfo).port
  pods.kube.fake.apply(stargateSlice('stargate-silent', [{ pod: 'stargate-silent', ip: '127.0.9.10' }], { ports: { grpc: port, quic: 50052 } }))
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 2)
  const started = Date.now()
  const status = await register(pods.kube.address, 'stargate-silent.stargate.external:50071')
  t.equal(status.code, grpc.status.UNAVAILABLE)
  t.equal(status.details, 'timed out connecting to stargate target')
  t.ok(Date.now() - started >= 250, 'after the connect timeout')
  t.equal((await register(pods.kube.address, 'stargate-0.stargate.external:50071')).code, grpc.status.OK, 'other pods still register')
})

t.test('a compressed message without grpc-encoding is rejected and the upstream stream cancelled', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'] })
  const result = await rawRegister(pods.kube.address, 'stargate-0.stargate.external:50071', grpcFrame(registration(), 1))
  t.teardown(() => { result.session.close() })
  t.same(statusOf(result), { code: grpc.status.INTERNAL, message: 'received compressed message but grpc-encoding was not declared' })
  await waitFor(() => pods.kube.router.upstreamPool.openStreams() === 0, { message: 'no upstream stream left open' })
})

t.test('a message over --grpc-max-message-bytes is RESOURCE_EXHAUSTED', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], args: ['--grpc-max-message-bytes', '1024'] })
  const big = Buffer.concat([Buffer.from([0x0a, 0xd0, 0x0f]), Buffer.alloc(2000, 0x61)])
  const result = await rawRegister(pods.kube.address, 'stargate-0.stargate.external:50071', grpcFrame(big))
  t.teardown(() => { result.session.close() })
  t.same(statusOf(result), { code: grpc.status.RESOURCE_EXHAUSTED, message: `received message larger than max (${big.length} vs. 1024)` })
  t.equal((await register(pods.kube.address, 'stargate-0.stargate.external:50071')).code, grpc.status.OK, 'a message under the limit passes')
})

t.test('a length prefix larger than the body is INTERNAL, not a hang', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'] })
  const result = await rawRegister(pods.kube.address, 'stargate-0.stargate.external:50071', grpcFrame(registration(), 0, 500))
  t.teardown(() => { result.session.close() })
  t.same(statusOf(result), { code: grpc.status.INTERNAL, message: 'stream ended in the middle of a message' })
  await waitFor(() => pods.kube.router.upstreamPool.openStreams() === 0, { message: 'the upstream stream is cancelled' })
  t.equal((await register(pods.kube.address, 'stargate-0.stargate.external:50071')).code, grpc.status.OK, 'other streams still work')
})

t.test('oversized request headers are refused and the router keeps serving', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], args: ['--http2-max-header-list-bytes', '4096'] })
  const client = await RawH2Client.connect(pods.kube.frontDoorPort)
  t.teardown(() => { client.close() })
  client.headers(1, [[':method', 'POST'], [':scheme', 'http'], [':path', REGISTER], [':authority', 'stargate-0.stargate.external:50071'],
    ['content-type', 'application/grpc'], ['x-padding', 'p'.repeat(8000)]], true)
  const answer = await client.waitFrame((f) => f.type === FRAME.HEADERS && f.streamId === 1)
  t.ok(answer !== null, 'answered')
  const fields = client.decode(answer!)
  t.equal(fields['grpc-status'], String(grpc.status.RESOURCE_EXHAUSTED))
  t.equal(fields['grpc-message'], 'request headers exceed 4096 bytes')
  t.equal(pods.stubs.get('stargate-0')?.registrations.length, 0, 'nothing reached the pod')
  t.equal((await register(pods.kube.address, 'stargate-0.stargate.external:50071')).code, grpc.status.OK, 'other clients still register')
})

t.test('a client that never reads makes the router pause the pod instead of buffering', async (t) => {
  // An upstream that writes 64 KiB acks as fast as the stream takes them.
  const server = http2.createServer()
  let written = 0
  server.on('stream', (stream) => {
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' })
    const chunk = grpcFrame(Buffer.alloc(64 * 1024, 0x62))
    const pump = (): void => {
      while (!stream.destroyed && stream.write(chunk)) written += chunk.length
      if (!stream.destroyed) { written += chunk.length; stream.once('drain', pump) }
    }
    pump()
    stream.on('error', () => {})
  })
  await new Promise<void>((resolve) => { server.listen(0, '127.0.9.11', resolve) })
  t.teardown(() => { server.close() })
  const pods = await StubPods.start(t, { pods: ['stargate-0'] })
  pods.kube.fake.apply(stargateSlice('stargate-flood', [{ pod: 'stargate-flood', ip: '127.0.9.11' }], { ports: { grpc: (server.address() as net.AddressInfo).port, quic: 50052 } }))
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 2)
  const session = http2.connect(`http://${pods.kube.address}`)
  t.teardown(() => { session.destroy() })
  const stream = session.request({ ':method': 'POST', ':path': REGISTER, ':authority': 'stargate-flood.stargate.external:50071', 'content-type': 'application/grpc' })
  stream.on('error', () => {})
  stream.pause() // never read
  stream.write(grpcFrame(registration()))
  await waitFor(() => written > 0, { message: 'the pod to start writing' })
  await new Promise((resolve) => setTimeout(resolve, 1500))
  const plateau = written
  await new Promise((resolve) => setTimeout(resolve, 1000))
  t.ok(written < 8 * 1024 * 1024, `the pod could write only what flow-control windows and stream buffers hold (${written} bytes)`)
  t.equal(written, plateau, 'and then it is paused')
  t.equal((await register(pods.kube.address, 'stargate-0.stargate.external:50071')).code, grpc.status.OK, 'other streams are unaffected')
})

t.test('a rapid-reset burst gets GOAWAY ENHANCE_YOUR_CALM and other clients are unaffected', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'] })
  const session = http2.connect(`http://${pods.kube.address}`, { settings: { maxConcurrentStreams: 1000 } })
  session.on('error', () => {})
  t.teardown(() => { session.destroy() })
  const goaway = new Promise<number>((resolve) => { session.on('goaway', (code) => { resolve(code) }) })
  for (let i = 0; i < 400 && !session.destroyed && !session.closed; i++) {
    const stream = session.request({ ':method': 'POST', ':path': REGISTER, ':authority': 'stargate-0.stargate.external:50071', 'content-type': 'application/grpc' })
    stream.on('error', () => {})
    stream.close(http2.constants.NGHTTP2_CANCEL)
  }
  t.equal(await goaway, http2.constants.NGHTTP2_ENHANCE_YOUR_CALM)
  t.equal(await pods.kube.metric('stargate_k8s_router_http2_rapid_reset_closes_total'), 1)
  t.equal((await register(pods.kube.address, 'stargate-0.stargate.external:50071')).code, grpc.status.OK, 'another client registers')
})

t.test('no upstream stream or session leaks after churn', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0', 'stargate-1'] })
  const router = pods.kube.router
  const done: Array<Promise<unknown>> = []
  for (let i = 0; i < 60; i++) {
    const authority = `stargate-${i % 2}.stargate.external:50071`
    if (i % 3 === 0) {
      done.push(register(pods.kube.address, authority))
    } else {
      // Open, get an ack, then cancel (client goes away mid-stream).
      const client = new grpc.Client(pods.kube.address, grpc.credentials.createInsecure(), { 'grpc.default_authority': authority })
      const call = client.makeBidiStreamRequest(REGISTER, (b: Buffer) => b, (b: Buffer) => b, new grpc.Metadata())
      call.on('error', () => {})
      done.push(new Promise<void>((resolve) => {
        call.on('data', () => { call.cancel(); client.close(); resolve() })
      }))
      call.write(registration())
    }
  }
  await Promise.all(done)
  await waitFor(() => router.upstreamPool.openStreams() === 0, { message: 'every upstream stream closed' })
  await waitFor(() => router.registrations.active === 0, { message: 'every downstream stream released' })
  await waitFor(() => [...pods.stubs.values()].every((s) => s.openCalls === 0), { message: 'the pods see no open call' })
  t.equal(router.upstreamPool.size, 2, 'still one pooled session per pod')
  t.equal(await pods.kube.metric('stargate_k8s_router_registration_streams_active'), 0)
})
