// SPEC §5 and §12: no bytes from a Stargate pod may end the router. A pod answering
// a registration with frames no correct HTTP/2 server sends (written raw, see
// test/fixtures/raw-h2.ts) costs that one stream an UNAVAILABLE, so the Pylon registers again;
// the router stays up, /livez answers and other registrations keep working. The failure mode:
// two content-type fields make respond() throw ERR_HTTP2_HEADER_SINGLE_VALUE inside an event
// handler, which ends the process.
import t from 'tap'
import * as grpc from '@grpc/grpc-js'
import http2 from 'node:http2'
import type { AddressInfo, Socket } from 'node:net'
import { StubPods } from '../fixtures/stub-pods.ts'
import { stargateSlice } from '../fixtures/kube-router.ts'
import { FLAG, FRAME, RawH2Server, frame, type RawH2ServerConnection, type RawRequest } from '../fixtures/raw-h2.ts'
import { waitFor } from '../fixtures/wait.ts'
import { MAX_SESSIONS_PER_POD } from '../../lib/control-plane/upstream-pool.ts'

const REGISTER = '/stargate.StargateControlPlane/RegisterInferenceServer'

function register (address: string, authority: string): Promise<grpc.StatusObject & { headers: Record<string, unknown> }> {
  const client = new grpc.Client(address, grpc.credentials.createInsecure(), { 'grpc.default_authority': authority })
  const call = client.makeBidiStreamRequest(REGISTER, (b: Buffer) => b, (b: Buffer) => b, new grpc.Metadata())
  let headers: Record<string, unknown> = {}
  call.on('metadata', (metadata: grpc.Metadata) => { headers = metadata.getMap() })
  call.on('data', () => {})
  call.on('error', () => {})
  call.write(Buffer.from([0x0a, 0x01, 0x70]))
  call.end()
  return new Promise((resolve) => {
    call.on('status', (status: grpc.StatusObject) => {
      client.close()
      resolve({ ...status, headers })
    })
  })
}

const OK_HEAD: Array<[string, string]> = [[':status', '200'], ['content-type', 'application/grpc']]
const MESSAGE = Buffer.from([0, 0, 0, 0, 2, 0x0a, 0x00])

type Behaviour = (c: RawH2ServerConnection, r: RawRequest) => void

const rst = (c: RawH2ServerConnection, id: number): void => { c.rstStream(id, 0) }

/**
 * invalid: Node refuses to re-send what nghttp2 accepted: UNAVAILABLE saying so, counted.
 * reset: nghttp2 itself refuses the frames and resets the upstream stream: UNAVAILABLE.
 * dropped: nghttp2 drops the one invalid field; the rest of the response is forwarded.
 */
type Expect = 'invalid' | 'reset' | 'dropped'

const HOSTILE: Array<{ what: string, behaviour: Behaviour, expect: Expect }> = [
  {
    what: 'two content-type fields in the response head',
    expect: 'invalid',
    behaviour: (c, r) => { c.headers(r.streamId, [...OK_HEAD, ['content-type', 'application/grpc+proto']], false); c.data(r.streamId, MESSAGE, false); c.headers(r.streamId, [['grpc-status', '0']], true) },
  },
  {
    what: 'two content-type fields in a trailers-only response',
    expect: 'invalid',
    behaviour: (c, r) => { c.headers(r.streamId, [...OK_HEAD, ['content-type', 'text/plain'], ['grpc-status', '0']], true) },
  },
  {
    what: 'a NUL byte in a header value',
    expect: 'dropped',
    behaviour: (c, r) => { c.headers(r.streamId, [...OK_HEAD, ['x-evil', 'a\u0000b']], false); c.headers(r.streamId, [['grpc-status', '0']], true) },
  },
  {
    what: 'an upper-case header name',
    expect: 'reset',
    behaviour: (c, r) => { c.headers(r.streamId, [...OK_HEAD, ['X-Evil', 'b']], false); c.headers(r.streamId, [['grpc-status', '0']], true) },
  },
  {
    what: 'a pseudo-header in the trailers',
    expect: 'reset',
    behaviour: (c, r) => { c.headers(r.streamId, OK_HEAD, false); c.data(r.streamId, MESSAGE, false); c.headers(r.streamId, [[':status', '200'], ['grpc-status', '0']], true) },
  },
  {
    what: 'a 256 KiB header block in CONTINUATION frames',
    expect: 'reset',
    behaviour: (c, r) => {
      const block = c.encode([...OK_HEAD, ['x-pad', 'p'.repeat(256 * 1024)]])
      const chunks: Buffer[] = []
      for (let at = 0; at < block.length; at += 16_000) chunks.push(block.subarray(at, at + 16_000))
      chunks.forEach((chunk, i) => {
        const last = i === chunks.length - 1
        c.write(frame(i === 0 ? FRAME.HEADERS : FRAME.CONTINUATION, last ? FLAG.END_HEADERS : 0, r.streamId, chunk))
      })
    },
  },
  {
    what: 'DATA before HEADERS',
    expect: 'reset',
    behaviour: (c, r) => { c.data(r.streamId, MESSAGE, false); c.headers(r.streamId, OK_HEAD, false) },
  },
  {
    what: 'a RST_STREAM in the middle of the trailers block',
    expect: 'reset',
    behaviour: (c, r) => {
      c.headers(r.streamId, OK_HEAD, false)
      c.data(r.streamId, MESSAGE, false)
      const block = c.encode([['grpc-status', '0'], ['grpc-message', 'x'.repeat(200)]])
      c.write(frame(FRAME.HEADERS, FLAG.END_STREAM, r.streamId, block.subarray(0, 10)))
      rst(c, r.streamId)
    },
  },
  {
    what: 'a response head without :status',
    expect: 'reset',
    behaviour: (c, r) => { c.headers(r.streamId, [['content-type', 'application/grpc']], false) },
  },
]

t.test('a hostile pod costs its own registration an UNAVAILABLE and nothing else', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'] })
  let behaviour: Behaviour = () => {}
  const hostile = await RawH2Server.start('127.0.9.41', (c, r) => { behaviour(c, r) })
  t.teardown(() => { hostile.close() })
  pods.kube.fake.apply(stargateSlice('stargate-hostile', [{ pod: 'stargate-hostile', ip: '127.0.9.41' }], { ports: { grpc: hostile.port, quic: 50052 } }))
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 2)
  const health = `http://127.0.0.1:${pods.kube.router.health.port}`
  let invalid = 0
  for (const scenario of HOSTILE) {
    behaviour = scenario.behaviour
    const status = await register(pods.kube.address, 'stargate-hostile.stargate.external:50071')
    switch (scenario.expect) {
      case 'invalid':
        invalid++
        t.same([status.code, status.details], [grpc.status.UNAVAILABLE, 'stargate target sent an invalid response'], `${scenario.what}: UNAVAILABLE saying why`)
        break
      case 'reset':
        t.same([status.code, status.details], [grpc.status.UNAVAILABLE, 'stargate target stargate-hostile reset the stream'], `${scenario.what}: UNAVAILABLE`)
        break
      case 'dropped':
        t.equal(status.code, grpc.status.OK, `${scenario.what}: the rest of the response is forwarded`)
        t.equal(status.headers['x-evil'], undefined, `${scenario.what}: the invalid field is not`)
        break
    }
    t.equal((await fetch(`${health}/livez`)).status, 200, `${scenario.what}: the router is alive`)
    t.equal((await register(pods.kube.address, 'stargate-0.stargate.external:50071')).code, grpc.status.OK, `${scenario.what}: other registrations work`)
  }
  t.equal(await pods.kube.metric('stargate_k8s_router_registration_streams_closed_total', { outcome: 'invalid_response' }), invalid, 'each invalid response is counted')
  await waitFor(() => pods.kube.router.upstreamPool.openStreams() === 0, { message: 'no upstream stream left open' })
})

/** A gRPC pod on node:http2 with the given SETTINGS; its streams are held, never answered. */
async function holdingPod (t: { teardown: (fn: () => void) => void }, ip: string, settings: http2.Settings): Promise<{ port: number, connections: () => number, streams: () => number }> {
  const server = http2.createServer({ settings })
  const sockets = new Set<Socket>()
  let streams = 0
  server.on('connection', (socket: Socket) => { sockets.add(socket); socket.on('close', () => { sockets.delete(socket) }) })
  server.on('stream', (stream) => { streams++; stream.on('error', () => {}) })
  await new Promise<void>((resolve) => { server.listen(0, ip, resolve) })
  t.teardown(() => { for (const s of sockets) s.destroy(); server.close() })
  return { port: (server.address() as AddressInfo).port, connections: () => sockets.size, streams: () => streams }
}

// A pod whose SETTINGS allow no streams got one new session per registration, never closed and
// never answered (nghttp2 queued the stream): 100 Pylon retries held 101 connections to it.
t.test('a pod that allows no streams gets UNAVAILABLE at once, and no session is kept for it', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'] })
  const pod = await holdingPod(t, '127.0.9.43', { maxConcurrentStreams: 0 })
  pods.kube.fake.apply(stargateSlice('stargate-zero', [{ pod: 'stargate-zero', ip: '127.0.9.43' }], { ports: { grpc: pod.port, quic: 50052 } }))
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 2)
  for (let i = 0; i < 20; i++) {
    const status = await register(pods.kube.address, 'stargate-zero.stargate.external:50071')
    t.same([status.code, status.details], [grpc.status.UNAVAILABLE, 'failed to connect to stargate target: the pod allows no streams (SETTINGS_MAX_CONCURRENT_STREAMS 0)'], `attempt ${i + 1}: UNAVAILABLE saying why`)
  }
  await waitFor(() => pods.kube.router.upstreamPool.size <= 1, { message: 'no session kept for the pod' })
  await waitFor(() => pod.connections() === 0, { message: 'the pod sees its connections closed' })
  t.equal(pod.streams(), 0, 'no stream ever reached it')
  t.equal((await register(pods.kube.address, 'stargate-0.stargate.external:50071')).code, grpc.status.OK, 'other registrations work')
})

// The registrations below arrive together, before the pod's first SETTINGS: all of them waited
// on the first session and were sent on it beyond the pod's limit, so nghttp2 held 31 of them
// for a stream that long-lived registrations never free. Now each gets a session, up to the cap.
t.test(`a pod that allows one stream a session holds at most ${MAX_SESSIONS_PER_POD} sessions; the registration beyond gets UNAVAILABLE`, async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'] })
  const pod = await holdingPod(t, '127.0.9.44', { maxConcurrentStreams: 1 })
  pods.kube.fake.apply(stargateSlice('stargate-one', [{ pod: 'stargate-one', ip: '127.0.9.44' }], { ports: { grpc: pod.port, quic: 50052 } }))
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 2)
  const client = new grpc.Client(pods.kube.address, grpc.credentials.createInsecure(), { 'grpc.default_authority': 'stargate-one.stargate.external:50071' })
  t.teardown(() => { client.close() })
  const calls: Array<grpc.ClientDuplexStream<Buffer, Buffer>> = []
  for (let i = 0; i < MAX_SESSIONS_PER_POD; i++) {
    const call = client.makeBidiStreamRequest(REGISTER, (b: Buffer) => b, (b: Buffer) => b, new grpc.Metadata())
    call.on('data', () => {})
    call.on('error', () => {})
    call.write(Buffer.from([0x0a, 0x01, 0x70]))
    calls.push(call)
  }
  t.teardown(() => { for (const call of calls) call.cancel() })
  await waitFor(() => pod.streams() === MAX_SESSIONS_PER_POD, { message: 'every held registration at the pod' })
  t.equal(pod.connections(), MAX_SESSIONS_PER_POD, 'one session each')
  const beyond = await register(pods.kube.address, 'stargate-one.stargate.external:50071')
  t.same([beyond.code, beyond.details], [grpc.status.UNAVAILABLE, `failed to connect to stargate target: every stream the pod allows on ${MAX_SESSIONS_PER_POD} sessions is in use`])
  t.equal(pod.connections(), MAX_SESSIONS_PER_POD, 'no session opened for it')
  t.equal((await register(pods.kube.address, 'stargate-0.stargate.external:50071')).code, grpc.status.OK, 'other pods are not affected')
})
