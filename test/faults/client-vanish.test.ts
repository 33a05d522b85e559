// Fault suite: clients vanish at every phase of a connection to the TLS front door:
// in the middle of the TLS handshake, of a request head (HTTP/1.1 and HTTP/2), of a request
// body (an LLM upload, a gRPC registration message), of the trailers, and of a streamed
// response. Each costs nothing but its own connection: the router stays up, /livez answers, the
// upstream call is cancelled (the pods see it end), no stream or request is left open, the
// aborts are counted, and a second round leaves no more descriptors than the first.
import t from 'tap'
import net from 'node:net'
import tls from 'node:tls'
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import { StubStargate } from '../fixtures/stub-stargate.ts'
import { StubLlm } from '../fixtures/stub-llm.ts'
import { FLAG, FRAME, RawH2Client, frame, type Fields } from '../fixtures/raw-h2.ts'
import { createCa, createLeaf } from '../fixtures/certs.ts'
import { openFdsExcept, probe } from '../fixtures/fault-probe.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(180_000)

const IP = '127.0.1.111'
const SNI = 'router.example'
const REGISTER = '/stargate.StargateControlPlane/RegisterInferenceServer'
const REGISTRATION_HEAD: Fields = [[':method', 'POST'], [':scheme', 'https'], [':path', REGISTER], [':authority', 'stargate-0.stargate.external:50071'], ['content-type', 'application/grpc'], ['te', 'trailers']]
const MESSAGE = Buffer.from([0, 0, 0, 0, 3, 0x0a, 0x01, 0x70])

function vanishAfter (socket: net.Socket, ms = 100): Promise<void> {
  return new Promise((resolve) => { setTimeout(() => { socket.destroy(); resolve() }, ms) })
}

t.test('clients vanishing at every phase cost only their own connection, and leave nothing behind', async (t) => {
  const ca = await createCa({ name: 'vanish ca' })
  const leaf = await createLeaf(ca, { dnsNames: [SNI, '*.stargate.external'] })
  const dir = await tempDir(t, 'stargate-vanish-')
  await mkdir(join(dir, 'tls'))
  await writeFile(join(dir, 'tls', 'tls.crt'), leaf.chainPem)
  await writeFile(join(dir, 'tls', 'tls.key'), leaf.keyPem)
  const stub = await StubStargate.start({ podName: 'stargate-0', ip: IP, advertisedHost: 'stargate-0.stargate.external' })
  const llm = await StubLlm.start({ podName: 'stargate-0', ip: IP, tokenIntervalMs: 20 })
  t.teardown(() => { stub.kill(); llm.close() })
  const targets = join(dir, 'targets.yaml')
  await writeFile(targets, `targets:\n  - {identity: stargate-0, address: ${IP}, grpcPort: ${stub.port}, quicPort: 50052, httpPort: ${llm.port}}\n`)
  const { p, health, frontDoor } = await startReadyRouter(t, ['--targets-file', targets, '--front-door-tls', '--tls-cert-path', join(dir, 'tls', 'tls.crt'), '--tls-key-path', join(dir, 'tls', 'tls.key')])
  const router = probe(health)
  const pid = p.child.pid as number
  const secure = (alpn: string): Promise<tls.TLSSocket> => new Promise((resolve, reject) => {
    const socket = tls.connect({ port: frontDoor, host: '127.0.0.1', servername: SNI, ca: ca.certPem, ALPNProtocols: [alpn] }, () => { resolve(socket) })
    socket.once('error', reject)
  })
  const descriptors: number[] = []

  for (const round of [1, 2]) {
    // Mid-handshake: the start of a ClientHello, then gone.
    const raw = net.connect(frontDoor, '127.0.0.1', () => { raw.write(Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03])) })
    raw.on('error', () => {})
    await vanishAfter(raw)

    // Mid-head, HTTP/1.1 and HTTP/2.
    const h1 = await secure('http/1.1')
    h1.write('POST /echo HTTP/1.1\r\nhost: stargate-0.stargate.external\r\ncontent-le')
    await vanishAfter(h1)
    const h2 = await RawH2Client.connectTls(frontDoor, { ca: ca.certPem, servername: SNI })
    h2.write(frame(FRAME.HEADERS, 0, 1, h2.encode(REGISTRATION_HEAD).subarray(0, 12)))
    await vanishAfter(h2.socket)

    // Mid-body: an upload to a pod, and half a registration message.
    const upload = await secure('http/1.1')
    // Past the body buffer (64 KiB), so the upload is streaming to the pod when the client goes.
    upload.write('POST /echo HTTP/1.1\r\nhost: stargate-0.stargate.external\r\ncontent-length: 1000000\r\n\r\n' + 'x'.repeat(70 * 1024))
    await waitFor(() => llm.requests.length >= round, { message: `round ${round}: the upload reached the pod` })
    await vanishAfter(upload)
    const half = await RawH2Client.connectTls(frontDoor, { ca: ca.certPem, servername: SNI })
    half.headers(1, REGISTRATION_HEAD, false)
    half.data(1, MESSAGE.subarray(0, 6), false)
    await waitFor(() => stub.registrations.length >= 2 * round - 1, { message: `round ${round}: the registration reached the pod` })
    await vanishAfter(half.socket)

    // Mid-trailers: a whole message, then half of a trailers block.
    const trailing = await RawH2Client.connectTls(frontDoor, { ca: ca.certPem, servername: SNI })
    trailing.headers(1, REGISTRATION_HEAD, false)
    trailing.data(1, MESSAGE, false)
    await waitFor(() => stub.registrations.length >= 2 * round, { message: `round ${round}: the second registration reached the pod` })
    trailing.write(frame(FRAME.HEADERS, FLAG.END_STREAM, 1, trailing.encode([['x-trailer', 'y'.repeat(100)]]).subarray(0, 8)))
    await vanishAfter(trailing.socket)

    // Mid-response: a token stream the client walks away from.
    const sse = await secure('http/1.1')
    const body = JSON.stringify({ stream: true, max_tokens: 100_000 })
    sse.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: stargate-0.stargate.external\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`)
    await new Promise<void>((resolve) => { sse.on('data', (chunk: Buffer) => { if (chunk.toString().includes('data: ')) resolve() }) })
    sse.destroy()

    t.equal(await router.livez(), 200, `round ${round}: alive`)
    await waitFor(() => llm.openResponses === 0, { message: `round ${round}: the pod saw every HTTP request end` })
    await waitFor(() => stub.openCalls === 0, { message: `round ${round}: the pod saw every registration end` })
    await waitFor(async () => await router.metric('stargate_k8s_router_registration_streams_active') === 0, { message: `round ${round}: no registration stream open` })
    await waitFor(async () => await router.metric('stargate_k8s_router_http_requests_in_flight') === 0, { message: `round ${round}: no request in flight` })
    await waitFor(async () => await router.metric('stargate_k8s_router_front_door_connections') === 0, { message: `round ${round}: no client connection open` })
    descriptors.push(await openFdsExcept(pid, [IP]))
  }
  t.ok(await router.metricSum('stargate_k8s_router_http_requests_total', { outcome: 'client_aborted' }) >= 4, 'aborted uploads and streams are counted')
  t.comment(`router descriptors (without pooled pod connections) after each round: ${descriptors.join(', ')}`)
  t.ok((descriptors[1] as number) <= (descriptors[0] as number), 'the second round leaves no more descriptors than the first')
  t.equal(p.child.exitCode, null, 'the router is still running')
})
