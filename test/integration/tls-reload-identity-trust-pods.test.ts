/**
 * SPEC §7, §8: without --upstream-tls-cert-path the router's own certificate file
 * is the trust that verifies Stargate pods (as the Rust router). Renewing that file is then an
 * upstream-trust change on every leg, decided once in lib/tls/trust-policy.ts: what was dialled
 * under the old file closes (HTTP/2 GOAWAY, raw QUIC after the 5 s grace, WebTransport with a
 * close capsule) and new connections are verified with the new one. Here registration
 * (@grpc/grpc-js) and HTTP forwarding (an HTTPS pod behind --upstream-tls) on real sockets
 * (the tunnel kinds: tls-reload-identity-trust-tunnels.test.ts).
 */
import t from 'tap'
import { join } from 'node:path'
import { mkdtemp } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import * as grpc from '@grpc/grpc-js'
import { StubPods } from '../fixtures/stub-pods.ts'
import { ProjectedVolume } from '../fixtures/projected-volume.ts'
import { createCa, createIdentityWithCa, createLeaf } from '../fixtures/certs.ts'
import { request } from '../fixtures/http-client.ts'
import { waitFor } from '../fixtures/wait.ts'
import { openRegistration } from '../fixtures/registration-stream.ts'

const HOST = 'stargate-0.stargate.external'

async function secretVolume (files: Record<string, string>): Promise<ProjectedVolume> {
  return ProjectedVolume.create(join(await mkdtemp(join(tmpdir(), 'sg-identity-')), 'mount'), files)
}

const reloaded = (metric: (name: string, labels: Record<string, string>) => Promise<number | undefined>) => async (): Promise<boolean> =>
  await metric('stargate_k8s_router_tls_reloads_total', { material_type: 'server_identity', result: 'success' }) === 1

// Each case waits out the 5 s trust-change grace; on a loaded 2-core machine a file of them
// outlives tap's 30 s default.
t.setTimeout(90_000)

t.test('registration: renewing the router certificate that is the upstream trust ends streams made under it; new ones register', async (t) => {
  const ca = await createCa({ name: 'stargate ca' })
  const podCert = await createLeaf(ca, { dnsNames: ['*.stargate.external'] })
  const secret = await secretVolume(await createIdentityWithCa(ca))
  const credentials = grpc.ServerCredentials.createSsl(null, [{ cert_chain: Buffer.from(podCert.chainPem), private_key: Buffer.from(podCert.keyPem) }], false)
  const pods = await StubPods.start(t, {
    pods: ['stargate-0'],
    stub: { credentials },
    args: ['--upstream-tls', '--tls-cert-path', secret.path('tls.crt'), '--tls-key-path', secret.path('tls.key'), '--tls-debounce-ms', '50'],
  })
  const authority = `${HOST}:${pods.kube.frontDoorPort}`
  const stream = openRegistration(pods.kube.address, authority, grpc.credentials.createInsecure())
  t.teardown(stream.close)
  await waitFor(() => stream.acks() > 2, { message: 'the stream to flow over an upstream verified with the router certificate' })
  await secret.swap(await createIdentityWithCa(ca))
  const status = await waitFor(() => stream.status(), { message: 'the stream made under the old file to end', timeoutMs: 15_000 })
  t.equal(status.code, grpc.status.UNAVAILABLE, 'it ends UNAVAILABLE, so the Pylon registers again')
  const retry = openRegistration(pods.kube.address, authority, grpc.credentials.createInsecure())
  t.teardown(retry.close)
  await waitFor(() => retry.acks() > 2, { message: 'a new registration to flow, the pod verified with the renewed file' })
})

t.test('HTTP forwarding: renewing the router certificate that is the upstream trust replaces the pod connections made under it', async (t) => {
  const ca = await createCa({ name: 'stargate ca' })
  const podCert = await createLeaf(ca, { dnsNames: ['*.stargate.external'] })
  const secret = await secretVolume(await createIdentityWithCa(ca))
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

  await secret.swap(await createIdentityWithCa(ca))
  await waitFor(reloaded((name, labels) => pods.kube.metric(name, labels)), { message: 'the reload' })
  await waitFor(() => llm.connections === 0, { message: 'the connection made under the old file to close' })
  t.equal(await ask(), 200, 'the next request is verified with the renewed file')
  t.equal(llm.accepted, 2, 'on a new connection')
})
