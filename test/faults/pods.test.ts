// Fault suite: Stargate pods die in the middle of a stream or answer garbage. A
// registration to a pod that dies ends UNAVAILABLE (the Pylon registers again) and a token
// stream from one is cut; a pod answering frames or bytes no server sends costs that one call
// UNAVAILABLE or 502. The router stays up, /livez answers, the counters say what happened, no
// stream is left open, and a second round of the same faults leaves no more descriptors than
// the first.
import t from 'tap'
import net from 'node:net'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import * as grpc from '@grpc/grpc-js'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import { StubStargate } from '../fixtures/stub-stargate.ts'
import { StubLlm } from '../fixtures/stub-llm.ts'
import { Pylon } from '../fixtures/pylon.ts'
import { RawH2Server } from '../fixtures/raw-h2.ts'
import { RawHttpPod, answerWith } from '../fixtures/raw-http-pod.ts'
import { openFdsExcept, probe } from '../fixtures/fault-probe.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(180_000)

const GOOD_IP = '127.0.1.101'
const BAD_IP = '127.0.1.102'

/** An SSE request; resolves once the router closed the connection, with the bytes received. */
function streamUntilCut (port: number, onFirstToken: () => void): Promise<string> {
  return new Promise((resolve) => {
    const body = JSON.stringify({ stream: true, max_tokens: 100_000 })
    const socket = net.connect(port, '127.0.0.1', () => {
      socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: stargate-0.stargate.external\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`)
    })
    let text = ''
    let told = false
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1')
      if (!told && text.includes('data: ')) { told = true; onFirstToken() }
    })
    socket.on('error', () => {})
    socket.on('close', () => { resolve(text) })
  })
}

function httpStatus (port: number, host: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1', () => { socket.write(`GET /x HTTP/1.1\r\nhost: ${host}\r\nconnection: close\r\n\r\n`) })
    let text = ''
    socket.on('data', (chunk: Buffer) => { text += chunk.toString('latin1') })
    socket.on('error', () => {})
    socket.on('close', () => { resolve(text.slice(0, text.indexOf('\r\n'))) })
  })
}

t.test('pods killed mid-stream or answering garbage cost their own calls, and leave nothing behind', async (t) => {
  let stub = await StubStargate.start({ podName: 'stargate-0', ip: GOOD_IP, advertisedHost: 'stargate-0.stargate.external' })
  let llm = await StubLlm.start({ podName: 'stargate-0', ip: GOOD_IP, tokenIntervalMs: 20 })
  const grpcPort = stub.port
  const httpPort = llm.port
  const badGrpc = await RawH2Server.start(BAD_IP, (c, r) => { c.headers(r.streamId, [[':status', '200'], ['content-type', 'application/grpc'], ['content-type', 'text/html']], true) })
  const badHttp = await RawHttpPod.start(BAD_IP, answerWith('<html>not http</html>'))
  t.teardown(() => { stub.kill(); llm.close(); badGrpc.close(); badHttp.close() })
  const targets = join(await tempDir(t, 'stargate-targets-'), 'targets.yaml')
  await writeFile(targets, [
    'targets:',
    `  - {identity: stargate-0, address: ${GOOD_IP}, grpcPort: ${grpcPort}, quicPort: 50052, httpPort: ${httpPort}}`,
    `  - {identity: stargate-bad, address: ${BAD_IP}, grpcPort: ${badGrpc.port}, quicPort: 50052, httpPort: ${badHttp.port}}`,
    '',
  ].join('\n'))
  const { p, health, frontDoor } = await startReadyRouter(t, ['--targets-file', targets])
  const router = probe(health)
  const pid = p.child.pid as number
  const descriptors: number[] = []

  for (const round of [1, 2]) {
    // A registration whose pod dies.
    const pylon = new Pylon({ routerAddress: `127.0.0.1:${frontDoor}`, heartbeatMs: 100 })
    const registration = pylon.register({ stargateId: 'stargate-0', advertiseAddr: 'stargate-0.stargate.external:50071', httpAdvertiseAddr: '', grpcPylonDialAddr: '' })
    await waitFor(() => registration.acks.length >= 2, { message: `round ${round}: acked` })
    stub.kill()
    const status = await waitFor(() => registration.status, { message: `round ${round}: the registration ended` })
    t.equal(status.code, grpc.status.UNAVAILABLE, `round ${round}: a pod dying mid-stream is UNAVAILABLE (${status.details})`)
    pylon.close()

    // A token stream whose pod dies.
    const cut = await streamUntilCut(frontDoor, () => { llm.close() })
    t.notMatch(cut, /\[DONE\]/, `round ${round}: the stream is cut, not completed`)

    // Pods answering garbage.
    const bad = new Pylon({ routerAddress: `127.0.0.1:${frontDoor}` })
    const badRegistration = bad.register({ stargateId: 'stargate-bad', advertiseAddr: 'stargate-bad.stargate.external:50071', httpAdvertiseAddr: '', grpcPylonDialAddr: '' })
    const badStatus = await waitFor(() => badRegistration.status, { message: `round ${round}: the bad registration ended` })
    t.same([badStatus.code, badStatus.details], [grpc.status.UNAVAILABLE, 'stargate target sent an invalid response'], `round ${round}: duplicate content-type from a pod`)
    bad.close()
    t.equal(await httpStatus(frontDoor, 'stargate-bad.stargate.external'), 'HTTP/1.1 502 Bad Gateway', `round ${round}: bytes that are not HTTP`)

    t.equal(await router.livez(), 200, `round ${round}: alive`)
    await waitFor(async () => await router.metric('stargate_k8s_router_registration_streams_active') === 0, { message: `round ${round}: no registration stream left open` })
    await waitFor(async () => await router.metric('stargate_k8s_router_http_requests_in_flight') === 0, { message: `round ${round}: no request left in flight` })
    // The pods come back at the same addresses.
    stub = await StubStargate.start({ podName: 'stargate-0', ip: GOOD_IP, advertisedHost: 'stargate-0.stargate.external', port: grpcPort })
    llm = await StubLlm.start({ podName: 'stargate-0', ip: GOOD_IP, port: httpPort, tokenIntervalMs: 20 })
    await waitFor(async () => await router.metric('stargate_k8s_router_front_door_connections') === 0, { message: `round ${round}: client connections gone` })
    descriptors.push(await openFdsExcept(pid, [GOOD_IP, BAD_IP]))
  }
  t.ok((await router.metric('stargate_k8s_router_registration_streams_closed_total', { outcome: 'upstream_reset' }) ?? 0) >= 2, 'pod deaths counted as upstream_reset')
  t.equal(await router.metric('stargate_k8s_router_registration_streams_closed_total', { outcome: 'invalid_response' }), 2, 'invalid responses counted')
  t.equal(await router.metric('stargate_k8s_router_http_requests_total', { outcome: 'upstream_invalid_response', status_class: '5xx' }), 2)
  t.ok((await router.metric('stargate_k8s_router_http_requests_total', { outcome: 'upstream_error', status_class: '2xx' }) ?? 0) >= 2, 'cut streams counted as upstream_error')
  t.comment(`router descriptors after each round: ${descriptors.join(', ')}`)
  t.ok((descriptors[1] as number) <= (descriptors[0] as number), 'the second round leaves no more descriptors than the first')
})
