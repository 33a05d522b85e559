// A Stargate pod that answers a WebTransport
// session request over HTTP/2 with a :status outside 200..599 (600 here; nghttp2 accepts any
// three digits) ended the router. The relay re-sent the status to the Pylon from the pod
// stream's 'response' handler and Node's respond() threw ERR_HTTP2_STATUS_INVALID: exit 1.
// Now the Pylon gets 502 upstream_invalid_response, the router logs the pod and the error,
// counts the session as upstream_connect_error, and keeps serving.
import t from 'tap'
import tls from 'node:tls'
import type { AddressInfo } from 'node:net'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import { FRAME, RawH2Client, RawH2ServerConnection, frame, type Fields } from '../fixtures/raw-h2.ts'
import { createCa, createLeaf } from '../fixtures/certs.ts'
import { probe } from '../fixtures/fault-probe.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(90_000)

const IP = '127.0.1.132'
const POD_HOST = 'stargate-0.stargate.external'
const CONNECT: Fields = [[':method', 'CONNECT'], [':protocol', 'webtransport'], [':scheme', 'https'], [':path', '/_stargate/webtransport'], [':authority', POD_HOST]]
/** SETTINGS_ENABLE_CONNECT_PROTOCOL = 1 (RFC 8441 §3), in the pod's first SETTINGS as the relay requires. */
const ENABLE_CONNECT = Buffer.from([0x00, 0x08, 0x00, 0x00, 0x00, 0x01])

t.test('a pod answering a session request with :status 600 gets the Pylon a 502, and the router keeps serving', async (t) => {
  const ca = await createCa({ name: 'invalid status ca' })
  const routerLeaf = await createLeaf(ca, { dnsNames: ['*.stargate.external'] })
  const podLeaf = await createLeaf(ca, { dnsNames: [POD_HOST] })
  const dir = await tempDir(t, 'stargate-invalid-status-')
  await writeFile(join(dir, 'tls.crt'), routerLeaf.chainPem)
  await writeFile(join(dir, 'tls.key'), routerLeaf.keyPem)
  await writeFile(join(dir, 'ca.crt'), ca.certPem)
  // The pod: TLS with ALPN h2, raw frames, and every request answered 600.
  const pod = tls.createServer({ cert: podLeaf.chainPem, key: podLeaf.keyPem, ALPNProtocols: ['h2'] }, (socket) => {
    socket.on('error', () => {})
    socket.write(frame(FRAME.SETTINGS, 0, 0, ENABLE_CONNECT))
    const connection = new RawH2ServerConnection(socket, (c, request) => { c.headers(request.streamId, [[':status', '600'], ['content-type', 'text/plain']], true) })
    t.teardown(() => { connection.close() })
  })
  await new Promise<void>((resolve) => { pod.listen(0, IP, resolve) })
  t.teardown(() => { pod.close() })
  const quicPort = (pod.address() as AddressInfo).port
  await writeFile(join(dir, 'targets.yaml'), `targets:\n  - {identity: stargate-0, address: ${IP}, grpcPort: 50051, quicPort: ${quicPort}}\n`)
  const { p, health } = await startReadyRouter(t, [
    '--targets-file', join(dir, 'targets.yaml'),
    '--tunnel-protocol', 'webtransport', '--tls-cert-path', join(dir, 'tls.crt'), '--tls-key-path', join(dir, 'tls.key'),
    '--upstream-tls-cert-path', join(dir, 'ca.crt'),
  ])
  const listening = await waitFor(() => p.logs().find((l) => typeof l.msg === 'string' && l.msg.startsWith('webtransport tunnel listening')), { message: 'the webtransport listening log line' })
  const tunnel = (listening.tcp as { port: number }).port
  const router = probe(health)

  for (const attempt of [1, 2]) {
    const pylon = await RawH2Client.connectTls(tunnel, { ca: ca.certPem, servername: POD_HOST })
    t.teardown(() => { pylon.close() })
    pylon.headers(1, CONNECT, false)
    const answer = await pylon.waitFrame((f) => f.type === FRAME.HEADERS && f.streamId === 1, 15_000)
    if (answer === null) {
      t.fail(`attempt ${attempt}: the connection closed without an answer; router errors: ${JSON.stringify(p.logs().filter((l) => Number(l.level) >= 50))} ${p.stderr().slice(-800)}`)
      return
    }
    const fields = pylon.decode(answer)
    t.equal(fields[':status'], '502', `attempt ${attempt}: 502`)
    t.equal(fields['x-stargate-error-code'], 'upstream_invalid_response', `attempt ${attempt}: the code names the pod's answer`)
    pylon.close()
  }
  t.equal(await router.livez(), 200, 'the router answers /livez')
  t.equal(p.child.exitCode, null, 'the router process is still running')
  t.equal(await router.metric('stargate_k8s_router_webtransport_sessions_total', { outcome: 'upstream_connect_error' }), 2, 'both sessions counted as upstream_connect_error')
  t.equal(await router.metric('stargate_k8s_router_webtransport_sessions_total', { outcome: 'upstream_rejected' }), 0, 'not as a rejection passed through')
  const warned = p.logs().filter((l) => l.msg === 'stargate target sent an invalid response')
  t.equal(warned.length, 2, 'each logged at warn')
  t.equal(warned[0]?.err, 'ERR_HTTP2_STATUS_INVALID', 'with Node\'s error code')
  t.equal(warned[0]?.target, 'stargate-0', 'and the pod')
})
