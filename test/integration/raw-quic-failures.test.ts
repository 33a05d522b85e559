/**
 * Visible failures and tunnels that follow the snapshot. A Pylon refused in the handshake must
 * leave a trace: every refused or failed handshake is counted in stargate_k8s_router_quic_handshake_failures_total{reason} and logged once per
 * reason per minute with the peer address, the SNI and the ALPN offered. And a tunnel whose pod
 * starts terminating or leaves the Service is closed with 'target stargate left the ready set'
 * after --drain-grace-ms, unless the pod comes back first (as registrations are drained).
 */
import t from 'tap'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { QuinnPeer, quinnPeerSkip } from '../fixtures/quinn-peer.ts'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { createCa } from '../fixtures/certs.ts'
import { captureInitial, rawSocket, respin, sendRaw, templateOf } from '../fixtures/quic-raw.ts'
import { waitFor } from '../fixtures/wait.ts'

const skip = await quinnPeerSkip(t)
const skip09 = skip || await quinnPeerSkip(t, '0.9')
const FAILURES = 'stargate_k8s_router_quic_handshake_failures_total'

t.test('refusals and handshake failures are counted by reason and logged, rate-limited per reason', { skip }, async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.96', args: ['--connect-timeout-ms', '800'] })
  // Three unknown SNIs: three counts and three lines, within the logger's per-reason burst
  // (lib/log.ts; the limit itself is tested in test/unit/log-guards.test.ts).
  for (let i = 0; i < 3; i++) {
    const pylon = await cluster.dial(null, { serverName: `nobody-${i}.example.com`, caPem: null })
    await pylon.closedWith()
  }
  t.equal(await cluster.kube.metric(FAILURES, { reason: 'unknown_sni' }), 3, 'three unknown SNIs counted')
  const unknown = cluster.kube.logs.lines().filter((l) => l.msg === 'raw quic handshake refused' && l.reason === 'unknown_sni')
  t.same(unknown.map((l) => l.sni), ['nobody-0.example.com', 'nobody-1.example.com', 'nobody-2.example.com'], 'each logged with its SNI')
  t.match(unknown[0], { sni: 'nobody-0.example.com', remote: '127.0.0.1', alpn: [] })

  // A Pylon that does not trust the router's certificate refuses it with its TLS alert, counted
  // as 'certificate': the engine's client sends bad_certificate, quinn 0.11 + rustls 0.23 (the
  // real Pylon's stack) unknown_ca.
  const otherCa = await createCa({ name: 'not the router ca' })
  const strict = await cluster.dial('stargate-0', { caPem: otherCa.certPem })
  t.match(await strict.closedWith(), { initiator: 'error', established: false })
  await waitFor(async () => await cluster.kube.metric(FAILURES, { reason: 'certificate' }) === 1, { message: 'the refused certificate counted' })
  const caPath = join(cluster.tls.dir, 'other-ca.crt')
  await writeFile(caPath, otherCa.certPem)
  const distrustful = await QuinnPeer.client(t, { connect: `127.0.0.1:${cluster.tunnelPort}`, sni: 'stargate-0.stargate.external', caPath })
  t.match(await distrustful.closed(1), { established: false, by: 'local', code: 0x100 + 48 }, 'quinn refused the certificate (unknown_ca)')
  await waitFor(async () => await cluster.kube.metric(FAILURES, { reason: 'certificate' }) === 2, { message: 'quinn\'s refusal counted as certificate' })

  // A client that sends its Initial and vanishes: 'timeout' after --connect-timeout-ms.
  const socket = await rawSocket(t)
  await sendRaw(socket, cluster.tunnelPort, respin(templateOf(await captureInitial(t, 'stargate-0.stargate.external'))))
  await waitFor(async () => await cluster.kube.metric(FAILURES, { reason: 'timeout' }) === 1, { timeoutMs: 10_000, message: 'the abandoned handshake counted as timeout' })
  const timeout = cluster.kube.logs.lines().find((l) => l.msg === 'raw quic handshake refused' && l.reason === 'timeout')
  t.match(timeout, { sni: 'stargate-0.stargate.external' }, 'logged with its SNI')
  t.notOk(cluster.kube.logs.text().includes('BEGIN'), 'no PEM in the logs')
})

t.test('a quinn 0.9 Pylon refusing the router\'s certificate sends no alert: counted as peer_refused', { skip: skip09 }, async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.131' })
  const otherCa = await createCa({ name: 'not the router ca' })
  const caPath = join(cluster.tls.dir, 'other-ca.crt')
  await writeFile(caPath, otherCa.certPem)
  const distrustful = await QuinnPeer.client(t, { connect: `127.0.0.1:${cluster.tunnelPort}`, sni: 'stargate-0.stargate.external', caPath, quinn: '0.9' })
  // Its own view is bad_certificate; on the wire it sends APPLICATION_ERROR during the handshake.
  t.match(await distrustful.closed(1), { established: false, code: 0x100 + 42 }, 'quinn 0.9 refused the certificate (bad_certificate, its own view)')
  await waitFor(async () => await cluster.kube.metric(FAILURES, { reason: 'peer_refused' }) === 1, { message: 'quinn 0.9\'s refusal counted as peer_refused' })
  t.equal(await cluster.kube.metric(FAILURES, { reason: 'certificate' }), 0, 'not as certificate: the router cannot tell')
})

t.test('an ALPN the pod refuses is counted as upstream_alpn and the Pylon is told the pod could not be reached', { skip }, async (t) => {
  const cluster = await QuicCluster.start(t, { pods: [], subnet: '127.0.97' })
  const certPath = join(cluster.tls.dir, 'pod.crt')
  const keyPath = join(cluster.tls.dir, 'pod.key')
  await writeFile(certPath, cluster.tls.stargate.chainPem)
  await writeFile(keyPath, cluster.tls.stargate.keyPem)
  // A real Stargate's listener: no ALPN configured, so rustls refuses a client offering one.
  const pod = await QuinnPeer.server(t, { listen: '127.0.97.10:0', certPath, keyPath })
  cluster.list('stargate-0', '127.0.97.10', pod.port, true)
  await cluster.waitForTargets(1)
  const pylon = await cluster.dial('stargate-0', { alpn: ['h3'] })
  t.match(await pylon.closedWith(), { initiator: 'peer', app: true, code: 0, reason: 'stargate stargate-0 could not be reached: tls handshake refused' })
  t.same((await pod.waitEvent('client_hello')).alpn, ['h3'], 'the router offered the pod exactly what the Pylon negotiated')
  t.equal(await cluster.kube.metric(FAILURES, { reason: 'upstream_alpn' }), 1)
  t.equal(await cluster.outcome('relay_error'), 1)
})

t.test('a tunnel whose pod starts terminating is closed after --drain-grace-ms; one whose pod comes back to the Service first stays', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0', 'stargate-1'], subnet: '127.0.98', args: ['--drain-grace-ms', '700'] })
  const leaving = await cluster.dial('stargate-0')
  await leaving.ready()
  await cluster.stubs.get('stargate-0')?.tunnel()
  const flapping = await cluster.dial('stargate-1')
  await flapping.ready()
  const stub1 = cluster.stubs.get('stargate-1')
  const tunnel1 = await stub1?.tunnel()
  if (stub1 === undefined || tunnel1 === undefined) throw new Error('no tunnel')
  const started = Date.now()
  cluster.list('stargate-0', cluster.ipOf('stargate-0'), cluster.stubs.get('stargate-0')?.port ?? 0, { ready: false, serving: true, terminating: true })
  cluster.unlist('stargate-1')
  await cluster.waitForTargets(0)
  cluster.list('stargate-1', cluster.ipOf('stargate-1'), stub1.port, true)
  await cluster.waitForTargets(1)
  t.match(await leaving.closedWith(), { initiator: 'peer', app: true, code: 0, reason: 'target stargate left the ready set' })
  t.ok(Date.now() - started >= 600, 'not before the drain grace')
  t.equal(flapping.closed, null, 'the tunnel whose pod came back within the grace stays')
  t.equal((await stub1.request(tunnel1, 'still here')).toString(), 'pylon:still here')
})
