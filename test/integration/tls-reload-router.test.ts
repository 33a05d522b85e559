// TLS hot reload through the router (SPEC §8): TLS material mounted like a Kubernetes Secret
// (`..data` swaps) is picked up by the front door for new handshakes without a restart,
// rejected material keeps the last good one, and a changed trust bundle closes exactly the
// connections it no longer trusts. Clients: @grpc/grpc-js and node:tls.
import t from 'tap'
import { mkdtemp } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { connect, type TLSSocket } from 'node:tls'
import { once } from 'node:events'
import * as grpc from '@grpc/grpc-js'
import { StubPods } from '../fixtures/stub-pods.ts'
import { createCa, createLeaf, type CertAuthority, type Leaf } from '../fixtures/certs.ts'
import { ProjectedVolume } from '../fixtures/projected-volume.ts'
import { waitFor } from '../fixtures/wait.ts'
import { openRegistration } from '../fixtures/registration-stream.ts'

const HOST = 'stargate-0.stargate.external'

// Two cases wait out the 5 s trust-change grace; run beside other files on a loaded 2-core
// machine (load average 10) the file outlived tap's 30 s default.
t.setTimeout(90_000)

async function volume (files: Record<string, string>): Promise<ProjectedVolume> {
  return ProjectedVolume.create(join(await mkdtemp(join(tmpdir(), 'sg-secret-')), 'mount'), files)
}

/** The certificate fingerprint a fresh TLS handshake with the front door sees. */
async function servedFingerprint (port: number, ca: CertAuthority): Promise<string> {
  const socket: TLSSocket = connect({ port, host: '127.0.0.1', servername: HOST, ca: ca.certPem, ALPNProtocols: ['h2'] })
  await once(socket, 'secureConnect')
  const fingerprint = socket.getPeerCertificate().fingerprint256
  socket.destroy()
  return fingerprint
}

function fingerprintOf (leaf: Leaf): string {
  return leaf.x509.fingerprint256
}


t.test('after a valid Secret swap new handshakes get the new certificate and open streams keep working', async (t) => {
  const ca = await createCa({ name: 'router ca' })
  const first = await createLeaf(ca, { dnsNames: ['*.stargate.external'] })
  const second = await createLeaf(ca, { dnsNames: ['*.stargate.external'] })
  const secret = await volume({ 'tls.crt': first.chainPem, 'tls.key': first.keyPem })
  const pods = await StubPods.start(t, { pods: ['stargate-0'], args: ['--front-door-tls', '--tls-cert-path', secret.path('tls.crt'), '--tls-key-path', secret.path('tls.key'), '--tls-debounce-ms', '50'] })
  const port = pods.kube.frontDoorPort
  t.equal(await servedFingerprint(port, ca), fingerprintOf(first))
  const stream = openRegistration(pods.kube.address, `${HOST}:${port}`, grpc.credentials.createSsl(Buffer.from(ca.certPem)))
  t.teardown(stream.close)
  await waitFor(() => stream.acks() > 2, { message: 'the stream to flow' })
  await secret.swap({ 'tls.crt': second.chainPem, 'tls.key': second.keyPem })
  await waitFor(async () => (await servedFingerprint(port, ca)) === fingerprintOf(second), { message: 'a new handshake to see the new certificate', timeoutMs: 10_000 })
  const acks = stream.acks()
  await waitFor(() => stream.acks() > acks + 3, { message: 'the established stream keeps flowing' })
  t.equal(stream.status(), null, 'the established stream was not closed')
  t.equal(await pods.kube.metric('stargate_k8s_router_tls_reloads_total', { material_type: 'server_identity', result: 'success' }), 1)
})

t.test('after an invalid swap the old certificate is still served and the rejection is counted once', async (t) => {
  const ca = await createCa({ name: 'router ca' })
  const good = await createLeaf(ca, { dnsNames: ['*.stargate.external'] })
  const mismatched = await createLeaf(ca, { dnsNames: ['*.stargate.external'], wrongKey: true })
  const secret = await volume({ 'tls.crt': good.chainPem, 'tls.key': good.keyPem })
  const pods = await StubPods.start(t, { pods: ['stargate-0'], args: ['--front-door-tls', '--tls-cert-path', secret.path('tls.crt'), '--tls-key-path', secret.path('tls.key'), '--tls-debounce-ms', '50', '--tls-poll-interval-ms', '1000'] })
  await secret.swap({ 'tls.crt': mismatched.chainPem, 'tls.key': mismatched.keyPem })
  await waitFor(async () => (await pods.kube.metric('stargate_k8s_router_tls_reload_rejections_total', { material_type: 'server_identity', reason: 'key_mismatch' })) === 1, { message: 'the rejection', timeoutMs: 10_000 })
  // More events and polls of the same bad content.
  await secret.swap({ 'tls.crt': mismatched.chainPem, 'tls.key': mismatched.keyPem })
  await new Promise((resolve) => setTimeout(resolve, 2500))
  t.equal(await pods.kube.metric('stargate_k8s_router_tls_reload_rejections_total', { material_type: 'server_identity', reason: 'key_mismatch' }), 1, 'counted once per distinct content')
  t.equal(await servedFingerprint(pods.kube.frontDoorPort, ca), fingerprintOf(good), 'the last good certificate is still served')
  t.equal((await pods.kube.readyz()).status, 200, 'and the router stays ready')
  t.equal(pods.kube.logs.lines().filter((l) => l.msg !== undefined && String(l.msg).includes('reject')).length, 1, 'one log line for it')
})

t.test('an upstream-trust swap that drops a pod\'s CA closes its upstream connections and new ones fail verification', async (t) => {
  const podCa = await createCa({ name: 'stargate pods ca' })
  const otherCa = await createCa({ name: 'some other ca' })
  const podCert = await createLeaf(podCa, { dnsNames: ['*.stargate.external'] })
  const trust = await volume({ 'ca.crt': podCa.certPem })
  const credentials = grpc.ServerCredentials.createSsl(null, [{ cert_chain: Buffer.from(podCert.chainPem), private_key: Buffer.from(podCert.keyPem) }], false)
  const pods = await StubPods.start(t, { pods: ['stargate-0'], stub: { credentials }, args: ['--upstream-tls', '--upstream-tls-cert-path', trust.path('ca.crt'), '--tls-debounce-ms', '50'] })
  const authority = `${HOST}:${pods.kube.frontDoorPort}`
  const stream = openRegistration(pods.kube.address, authority, grpc.credentials.createInsecure())
  t.teardown(stream.close)
  await waitFor(() => stream.acks() > 2, { message: 'the stream to flow over a verified upstream' })
  await trust.swap({ 'ca.crt': otherCa.certPem })
  const status = await waitFor(() => stream.status(), { message: 'the stream made under the old trust to end', timeoutMs: 15_000 })
  t.equal(status.code, grpc.status.UNAVAILABLE, 'it ends UNAVAILABLE, so the Pylon registers again')
  const retry = openRegistration(pods.kube.address, authority, grpc.credentials.createInsecure())
  t.teardown(retry.close)
  const refused = await waitFor(() => retry.status(), { message: 'the new stream to fail' })
  t.equal(refused.code, grpc.status.UNAVAILABLE)
  t.match(refused.details, /^failed to connect to stargate target: /, 'the pod no longer verifies')
  t.equal(pods.kube.router.upstreamPool.openStreams(), 0)
})

t.test('a client-trust swap disconnects the Pylon whose certificate no longer verifies and keeps the other', async (t) => {
  const serverCa = await createCa({ name: 'router ca' })
  const identity = await createLeaf(serverCa, { dnsNames: ['*.stargate.external'] })
  const caA = await createCa({ name: 'pylon ca a' })
  const caB = await createCa({ name: 'pylon ca b' })
  const pylonA = await createLeaf(caA, { dnsNames: ['pylon-a'], clientAuth: true })
  const pylonB = await createLeaf(caB, { dnsNames: ['pylon-b'], clientAuth: true })
  const secret = await volume({ 'tls.crt': identity.chainPem, 'tls.key': identity.keyPem })
  const clientTrust = await volume({ 'ca.crt': caA.certPem + caB.certPem })
  const pods = await StubPods.start(t, {
    pods: ['stargate-0'],
    args: ['--front-door-tls', '--tls-cert-path', secret.path('tls.crt'), '--tls-key-path', secret.path('tls.key'), '--client-ca-path', clientTrust.path('ca.crt'), '--tls-debounce-ms', '50'],
  })
  const authority = `${HOST}:${pods.kube.frontDoorPort}`
  const credentialsFor = (leaf: Leaf): grpc.ChannelCredentials => grpc.credentials.createSsl(Buffer.from(serverCa.certPem), Buffer.from(leaf.keyPem), Buffer.from(leaf.certPem))
  const a = openRegistration(pods.kube.address, authority, credentialsFor(pylonA))
  const b = openRegistration(pods.kube.address, authority, credentialsFor(pylonB))
  t.teardown(() => { a.close(); b.close() })
  await waitFor(() => a.acks() > 2 && b.acks() > 2, { message: 'both Pylons registered' })
  await clientTrust.swap({ 'ca.crt': caB.certPem })
  await waitFor(() => a.status(), { message: 'Pylon A to be disconnected', timeoutMs: 15_000 })
  const acks = b.acks()
  await waitFor(() => b.acks() > acks + 3, { message: 'Pylon B keeps its stream' })
  t.equal(b.status(), null, 'Pylon B was not disconnected')
  const again = openRegistration(pods.kube.address, authority, credentialsFor(pylonA))
  t.teardown(again.close)
  const refused = await waitFor(() => again.status(), { message: 'Pylon A to be refused' })
  t.equal(refused.code, grpc.status.UNAVAILABLE, 'Pylon A cannot reconnect: rejected at the TLS layer')
})
