/**
 * Issue 17 with SPEC §7, §8: without --upstream-tls-cert-path the router's own certificate file
 * is the trust that verifies Stargate pods (as the Rust router). Renewing that file is then an
 * upstream-trust change on every leg, decided once in lib/tls/trust-policy.ts: what was dialled
 * under the old file closes (HTTP/2 GOAWAY, raw QUIC after the 5 s grace, WebTransport with a
 * close capsule) and new connections are verified with the new one. Each kind on real sockets:
 * raw QUIC, WebTransport over HTTP/3 and over HTTP/2, registration (@grpc/grpc-js) and HTTP
 * forwarding (an HTTPS pod behind --upstream-tls).
 */
import t from 'tap'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { mkdtemp } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import * as grpc from '@grpc/grpc-js'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { H3Cluster } from '../fixtures/h3-cluster.ts'
import { WtCluster } from '../fixtures/webtransport-cluster.ts'
import { StubPods } from '../fixtures/stub-pods.ts'
import { ProjectedVolume } from '../fixtures/projected-volume.ts'
import { createCa, createLeaf, type CertAuthority } from '../fixtures/certs.ts'
import { request } from '../fixtures/http-client.ts'
import { waitFor } from '../fixtures/wait.ts'

const REGISTER = '/stargate.StargateControlPlane/RegisterInferenceServer'
const HOST = 'stargate-0.stargate.external'

/** The router's certificate file as an operator writes it when it is also the pods' trust: leaf, then the CA. */
async function renewedIdentity (ca: CertAuthority): Promise<{ 'tls.crt': string, 'tls.key': string }> {
  const leaf = await createLeaf(ca, { dnsNames: ['*.stargate.external'] })
  return { 'tls.crt': leaf.chainPem + ca.certPem, 'tls.key': leaf.keyPem }
}

async function secretVolume (files: Record<string, string>): Promise<ProjectedVolume> {
  return ProjectedVolume.create(join(await mkdtemp(join(tmpdir(), 'sg-identity-')), 'mount'), files)
}

const reloaded = (metric: (name: string, labels: Record<string, string>) => Promise<number | undefined>) => async (): Promise<boolean> =>
  await metric('stargate_k8s_router_tls_reloads_total', { material_type: 'server_identity', result: 'success' }) === 1

t.test('raw QUIC: renewing the router certificate that is the upstream trust closes tunnels verified under it; new ones verify', async (t) => {
  let identity: ProjectedVolume | null = null
  const cluster = await QuicCluster.start(t, {
    pods: ['stargate-0'],
    subnet: '127.0.63',
    args: ['--tls-debounce-ms', '20'],
    tlsArgs: async (tls) => {
      identity = await ProjectedVolume.create(join(tls.dir, 'identity'), { 'tls.crt': tls.router.chainPem + tls.ca.certPem, 'tls.key': tls.router.keyPem })
      return ['--tls-cert-path', identity.path('tls.crt'), '--tls-key-path', identity.path('tls.key')]
    },
  })
  const volume = identity as ProjectedVolume | null
  if (volume === null) throw new Error('no identity volume')
  const old = await cluster.dial('stargate-0')
  await old.ready()
  await cluster.stubs.get('stargate-0')?.tunnel(1)

  await volume.swap(await renewedIdentity(cluster.tls.ca))
  await waitFor(reloaded((name, labels) => cluster.kube.metric(name, labels)), { message: 'the reload' })
  const closed = await old.closedWith(15_000)
  t.match(closed, { initiator: 'peer', app: true, code: 0, reason: 'upstream trust changed' }, 'the tunnel verified under the old file is closed after the grace')

  const fresh = await cluster.dial('stargate-0')
  await fresh.ready()
  t.ok(await cluster.stubs.get('stargate-0')?.tunnel(2), 'a new tunnel reaches the pod, verified with the renewed file')
})

t.test('WebTransport over HTTP/3: renewing the router certificate that is the upstream trust closes bridged sessions; new ones work', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' }, routerArgs: ['--tls-debounce-ms', '200'], routerCertificateIsTrust: true })
  const opened = await cluster.open('stargate-0')
  if (opened.session === null) throw new Error(`no session: ${opened.status} ${opened.body}`)
  const atPod = await cluster.pods.get('stargate-0')!.nextSession()
  if (atPod === null) throw new Error('no session at the pod')
  const renewed = await renewedIdentity(cluster.ca)
  await writeFile(join(cluster.dir, 'router.key'), renewed['tls.key'])
  await writeFile(join(cluster.dir, 'router.crt'), renewed['tls.crt'])
  t.same(await opened.session.ended, { how: 'closed', code: 0, reason: 'upstream trust changed' }, 'the Pylon is told why')
  t.same(await atPod.ended, { how: 'closed', code: 0, reason: 'upstream trust changed' }, 'and so is the pod')
  await waitFor(async () => await cluster.metric('trust_replaced') === 1, { message: 'outcome trust_replaced' })
  const again = await cluster.open('stargate-0')
  t.equal(again.status, 200, 'a new session is bridged, the pod verified with the renewed file')
})

t.test('WebTransport over HTTP/2: renewing the router certificate that is the upstream trust closes bridged sessions; new ones work', async (t) => {
  const cluster = await WtCluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' }, routerArgs: ['--tls-debounce-ms', '200'], routerCertificateIsTrust: true })
  const opened = await cluster.open('stargate-0')
  if (opened.wt === null) throw new Error(`no session: ${opened.status} ${opened.body}`)
  const atPod = await cluster.stubs.get('stargate-0')!.nextSession()
  const renewed = await renewedIdentity(cluster.ca)
  await writeFile(join(cluster.dir, 'router.key'), renewed['tls.key'])
  await writeFile(join(cluster.dir, 'router.crt'), renewed['tls.crt'])
  t.strictSame(await opened.wt.ended, { ok: true, closeCode: 0, reason: 'upstream trust changed' }, 'the Pylon is told why')
  t.strictSame(await atPod.wt.ended, { ok: true, closeCode: 0, reason: 'upstream trust changed' }, 'and so is the pod')
  await waitFor(async () => await cluster.metric('trust_replaced') === 1, { message: 'outcome trust_replaced' })
  const again = await cluster.open('stargate-0')
  t.equal(again.status, 200, 'a new session is bridged, the pod verified with the renewed file')
})

t.test('registration: renewing the router certificate that is the upstream trust ends streams made under it; new ones register', async (t) => {
  const ca = await createCa({ name: 'stargate ca' })
  const podCert = await createLeaf(ca, { dnsNames: ['*.stargate.external'] })
  const secret = await secretVolume(await renewedIdentity(ca))
  const credentials = grpc.ServerCredentials.createSsl(null, [{ cert_chain: Buffer.from(podCert.chainPem), private_key: Buffer.from(podCert.keyPem) }], false)
  const pods = await StubPods.start(t, {
    pods: ['stargate-0'],
    stub: { credentials },
    args: ['--upstream-tls', '--tls-cert-path', secret.path('tls.crt'), '--tls-key-path', secret.path('tls.key'), '--tls-debounce-ms', '50'],
  })
  const authority = `${HOST}:${pods.kube.frontDoorPort}`
  const stream = openRegistration(pods.kube.address, authority)
  t.teardown(stream.close)
  await waitFor(() => stream.acks() > 2, { message: 'the stream to flow over an upstream verified with the router certificate' })
  await secret.swap(await renewedIdentity(ca))
  const status = await waitFor(() => stream.status(), { message: 'the stream made under the old file to end', timeoutMs: 15_000 })
  t.equal(status.code, grpc.status.UNAVAILABLE, 'it ends UNAVAILABLE, so the Pylon registers again')
  const retry = openRegistration(pods.kube.address, authority)
  t.teardown(retry.close)
  await waitFor(() => retry.acks() > 2, { message: 'a new registration to flow, the pod verified with the renewed file' })
})

t.test('HTTP forwarding: renewing the router certificate that is the upstream trust replaces the pod connections made under it', async (t) => {
  const ca = await createCa({ name: 'stargate ca' })
  const podCert = await createLeaf(ca, { dnsNames: ['*.stargate.external'] })
  const secret = await secretVolume(await renewedIdentity(ca))
  const pods = await StubPods.start(t, {
    pods: ['stargate-0'],
    http: true,
    httpTls: { certPem: podCert.chainPem, keyPem: podCert.keyPem },
    args: ['--upstream-tls', '--tls-cert-path', secret.path('tls.crt'), '--tls-key-path', secret.path('tls.key'), '--tls-debounce-ms', '50'],
  })
  const llm = pods.llms.get('stargate-0')
  if (llm === undefined) throw new Error('no llm endpoint')
  const ask = async (): Promise<number> => (await request(pods.kube.frontDoorPort, { host: `${HOST}:${pods.kube.frontDoorPort}` })).status
  t.equal(await ask(), 200, 'the pod answers over TLS verified with the router certificate')
  t.equal(await ask(), 200)
  t.equal(llm.accepted, 1, 'both requests used one kept-alive connection')

  await secret.swap(await renewedIdentity(ca))
  await waitFor(reloaded((name, labels) => pods.kube.metric(name, labels)), { message: 'the reload' })
  await waitFor(() => llm.connections === 0, { message: 'the connection made under the old file to close' })
  t.equal(await ask(), 200, 'the next request is verified with the renewed file')
  t.equal(llm.accepted, 2, 'on a new connection')
})

/** An open registration stream sending an update every 50 ms; counts acks; records its end. */
function openRegistration (address: string, authority: string): { acks: () => number, status: () => grpc.StatusObject | null, close: () => void } {
  const client = new grpc.Client(address, grpc.credentials.createInsecure(), { 'grpc.default_authority': authority })
  const call = client.makeBidiStreamRequest(REGISTER, (b: Buffer) => b, (b: Buffer) => b, new grpc.Metadata())
  let acks = 0
  let status: grpc.StatusObject | null = null
  call.on('data', () => { acks++ })
  call.on('error', () => {})
  call.on('status', (s: grpc.StatusObject) => { status = s })
  const timer = setInterval(() => { if (status === null) call.write(Buffer.from([0x0a, 0x01, 0x70])) }, 50)
  return { acks: () => acks, status: () => status, close: () => { clearInterval(timer); call.cancel(); client.close() } }
}
