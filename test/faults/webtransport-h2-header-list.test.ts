// The WebTransport-over-HTTP/2 listener answers a session request whose header list is over
// --http2-max-header-list-bytes with 431 `headers_too_large`, as docs/errors.md promises for
// every HTTP/2 listener: between the limit (16,384) and twice it (the advertised
// SETTINGS_MAX_HEADER_LIST_SIZE, 32,768) nghttp2 delivers the request, and the relay must not
// route it, dial the pod, or send the header list on.
//
// What the test sends: extended CONNECTs carrying one 17,000-byte and one 31,000-byte field on
// one connection; what it checks: :status 431 with the code and message, counted
// invalid_connect, no session accepted, no connection to the pod.
import t from 'tap'
import net from 'node:net'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import { FLAG, FRAME, frame, type Fields } from '../fixtures/raw-h2.ts'
import { connectTlsResettable } from '../fixtures/h2-stream-burst.ts'
import { REJECTIONS } from '../../lib/tunnel/webtransport-connect.ts'
import { createCa, createLeaf } from '../fixtures/certs.ts'
import { probe } from '../fixtures/fault-probe.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(60_000)

const IP = '127.0.1.173'
const POD_HOST = 'stargate-0.stargate.external'
const CONNECT: Fields = [[':method', 'CONNECT'], [':protocol', 'webtransport'], [':scheme', 'https'], [':path', '/_stargate/webtransport'], [':authority', POD_HOST]]

t.test('extended CONNECTs whose header lists are between the limit and twice it are answered 431, never routed', async (t) => {
  const ca = await createCa({ name: 'wt header list ca' })
  const leaf = await createLeaf(ca, { dnsNames: ['*.stargate.external'] })
  const dir = await tempDir(t, 'stargate-wt-headers-')
  await writeFile(join(dir, 'tls.crt'), leaf.chainPem)
  await writeFile(join(dir, 'tls.key'), leaf.keyPem)
  // The pod: a TCP listener that counts the connections the router makes to it.
  const pod = { connections: 0 }
  const podServer = net.createServer((socket) => { pod.connections++; socket.destroy() })
  await new Promise<void>((resolve) => { podServer.listen(0, IP, resolve) })
  t.teardown(() => { podServer.close() })
  await writeFile(join(dir, 'targets.yaml'), `targets:\n  - {identity: stargate-0, address: ${IP}, grpcPort: 50051, quicPort: ${(podServer.address() as net.AddressInfo).port}}\n`)
  const started = await startReadyRouter(t, ['--targets-file', join(dir, 'targets.yaml'), '--tunnel-protocol', 'webtransport', '--tls-cert-path', join(dir, 'tls.crt'), '--tls-key-path', join(dir, 'tls.key'), '--connect-timeout-ms', '2000'])
  const listening = await waitFor(() => started.p.logs().find((l) => typeof l.msg === 'string' && l.msg.startsWith('webtransport tunnel listening')), { message: 'the webtransport listening log line' })
  const client = await connectTlsResettable((listening.tcp as { port: number }).port, { ca: ca.certPem, servername: POD_HOST })
  t.teardown(() => { client.close() })
  await client.waitFrame((f) => f.type === FRAME.SETTINGS && (f.flags & FLAG.ACK) !== 0)
  let streamId = 1
  for (const size of [17_000, 31_000]) {
    const block = client.encode([...CONNECT, ['x-big', 'a'.repeat(size)]], false)
    client.write(frame(FRAME.HEADERS, 0, streamId, block.subarray(0, 16_384)))
    client.write(frame(FRAME.CONTINUATION, FLAG.END_HEADERS, streamId, block.subarray(16_384)))
    const id = streamId
    const answer = await client.waitFrame((f) => (f.type === FRAME.HEADERS || f.type === FRAME.RST_STREAM) && f.streamId === id, 10_000)
    const head = answer !== null && answer.type === FRAME.HEADERS ? client.decode(answer) : {}
    t.equal(head[':status'], '431', `a ${size}-byte field: :status 431`)
    t.equal(head['x-stargate-error-code'], 'headers_too_large', 'with the code')
    const body = await client.waitFrame((f) => f.type === FRAME.DATA && f.streamId === id, 10_000)
    t.equal(body?.payload.toString(), `${REJECTIONS.headers_too_large.message}\n`, 'and the message')
    streamId += 2
  }
  const metrics = probe(started.health)
  t.equal(await metrics.metric('stargate_k8s_router_webtransport_sessions_total', { outcome: 'invalid_connect' }), 2, 'counted invalid_connect')
  t.equal(await metrics.metric('stargate_k8s_router_webtransport_sessions_total', { outcome: 'accepted' }) ?? 0, 0, 'no session accepted for them')
  t.equal(pod.connections, 0, 'the pod was never dialled')
})
