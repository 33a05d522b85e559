/**
 * SPEC §8: the raw QUIC listener takes its identity from the TLS manager per new
 * connection, so a renewed certificate is what the next Pylon sees while open tunnels keep
 * running; a change of the trust used to verify Stargate pods closes the tunnels whose pod
 * leg was verified under the old bundle (after a short grace) and new tunnels use the new one.
 */
import t from 'tap'
import { X509Certificate } from 'node:crypto'
import { join } from 'node:path'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { ProjectedVolume } from '../fixtures/projected-volume.ts'
import { createCa, createLeaf } from '../fixtures/certs.ts'
import { waitFor } from '../fixtures/wait.ts'

const fingerprint = (der: Buffer | null): string => der === null ? 'none' : new X509Certificate(der).fingerprint256

t.test('a renewed server certificate is presented to new tunnels; open tunnels keep running', async (t) => {
  let identity: ProjectedVolume | null = null
  const cluster = await QuicCluster.start(t, {
    pods: ['stargate-0'],
    subnet: '127.0.61',
    args: ['--tls-debounce-ms', '20'],
    tlsArgs: async (tls) => {
      identity = await ProjectedVolume.create(join(tls.dir, 'identity'), { 'tls.crt': tls.router.chainPem, 'tls.key': tls.router.keyPem })
      return ['--tls-cert-path', identity.path('tls.crt'), '--tls-key-path', identity.path('tls.key'), '--upstream-tls-cert-path', tls.caPath]
    },
  })
  const volume = identity as ProjectedVolume | null
  if (volume === null) throw new Error('no identity volume')
  const before = await cluster.dial('stargate-0')
  await before.ready()
  t.equal(fingerprint(before.peerCertificate()), cluster.tls.router.x509.fingerprint256, 'the first tunnel sees the first certificate')

  const renewed = await createLeaf(cluster.tls.ca, { dnsNames: ['*.stargate.external'] })
  await volume.swap({ 'tls.crt': renewed.chainPem, 'tls.key': renewed.keyPem })
  await waitFor(async () => await cluster.kube.metric('stargate_k8s_router_tls_reloads_total', { material_type: 'server_identity', result: 'success' }) === 1, { message: 'the reload' })

  const after = await cluster.dial('stargate-0')
  await after.ready()
  t.equal(fingerprint(after.peerCertificate()), renewed.x509.fingerprint256, 'a new tunnel sees the renewed certificate')
  const stub = cluster.stubs.get('stargate-0')
  const first = await stub?.tunnel(1)
  if (stub === undefined || first === undefined) throw new Error('no tunnel')
  t.equal((await stub.request(first, 'still up')).toString(), 'pylon:still up', 'the tunnel opened before the reload still relays')
  t.equal(before.closed, null)
})

t.test('a new upstream trust bundle closes tunnels verified under the old one; new tunnels use the new one', async (t) => {
  let trust: ProjectedVolume | null = null
  const cluster = await QuicCluster.start(t, {
    pods: ['stargate-0'],
    subnet: '127.0.62',
    args: ['--tls-debounce-ms', '20'],
    tlsArgs: async (tls) => {
      trust = await ProjectedVolume.create(join(tls.dir, 'upstream-ca'), { 'ca.crt': tls.ca.certPem })
      return ['--tls-cert-path', tls.certPath, '--tls-key-path', tls.keyPath, '--upstream-tls-cert-path', trust.path('ca.crt')]
    },
  })
  const volume = trust as ProjectedVolume | null
  if (volume === null) throw new Error('no trust volume')
  const old = await cluster.dial('stargate-0')
  await old.ready()
  await cluster.stubs.get('stargate-0')?.tunnel(1)

  // CA rotation with overlap: the new bundle holds a new CA and the old one.
  const next = await createCa({ name: 'next stargate ca' })
  await volume.swap({ 'ca.crt': next.certPem + cluster.tls.ca.certPem })
  await waitFor(async () => await cluster.kube.metric('stargate_k8s_router_tls_reloads_total', { material_type: 'upstream_trust', result: 'success' }) === 1, { message: 'the reload' })
  const closed = await old.closedWith(15_000)
  t.match(closed, { initiator: 'peer', app: true, code: 0, reason: 'upstream trust changed' }, 'the old tunnel is closed after the grace')

  const fresh = await cluster.dial('stargate-0')
  await fresh.ready()
  const tunnel = await cluster.stubs.get('stargate-0')?.tunnel(2)
  t.ok(tunnel !== undefined, 'a new tunnel reaches the pod under the new bundle')
})
