/**
 * Tunnel-port security (SPEC §8, §12): --client-ca-path applies to the tunnel port
 * too: a Pylon without a valid client certificate is refused in the handshake, one with a
 * valid certificate gets its tunnel; a client-trust change closes tunnels whose Pylon
 * certificate no longer verifies and leaves the others. The Pylons are quinn + rustls
 * (test/fixtures/quinn-peer), the real Pylon's stack, presenting a certificate as a Pylon
 * configured for mTLS would.
 */
import t from 'tap'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { QuinnPeer, quinnPeerSkip } from '../fixtures/quinn-peer.ts'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { ProjectedVolume } from '../fixtures/projected-volume.ts'
import { createCa, createLeaf, type CertAuthority } from '../fixtures/certs.ts'
import { waitFor } from '../fixtures/wait.ts'
import type { Teardown } from '../fixtures/kube-router.ts'

const skip = await quinnPeerSkip(t)

async function pylonCert (t: Teardown, dir: string, name: string, ca: CertAuthority): Promise<{ certPath: string, keyPath: string }> {
  const leaf = await createLeaf(ca, { dnsNames: [`${name}.pylon.test`], clientAuth: true })
  const certPath = join(dir, `${name}.crt`)
  const keyPath = join(dir, `${name}.key`)
  await writeFile(certPath, leaf.chainPem)
  await writeFile(keyPath, leaf.keyPem)
  t.teardown(() => {})
  return { certPath, keyPath }
}

t.test('with --client-ca-path, a Pylon without a client certificate is refused in the handshake and one with a valid certificate is relayed', { skip }, async (t) => {
  const pylonCa = await createCa({ name: 'pylon client ca' })
  let clientCa = ''
  const cluster = await QuicCluster.start(t, {
    pods: ['stargate-0'],
    subnet: '127.0.94',
    tlsArgs: async (tls) => {
      clientCa = join(tls.dir, 'pylon-ca.crt')
      await writeFile(clientCa, pylonCa.certPem)
      return [...tls.routerArgs, '--client-ca-path', clientCa]
    },
  })
  const anonymous = await QuinnPeer.client(t, { connect: `127.0.0.1:${cluster.tunnelPort}`, sni: 'stargate-0.stargate.external', caPath: cluster.tls.caPath })
  const refused = await anonymous.closed(1)
  t.match(refused, { kind: 'transport', by: 'peer', code: 0x100 + 116 }, 'closed with certificate_required (TLS 1.3: after the client\'s own Finished)')
  t.equal(cluster.stubs.get('stargate-0')?.tunnels.length, 0, 'the pod was never dialed')
  await waitFor(async () => await cluster.kube.metric('stargate_k8s_router_quic_handshake_failures_total', { reason: 'client_certificate' }) === 1, { message: 'the refusal counted as client_certificate' })
  const line = cluster.kube.logs.lines().find((l) => l.msg === 'raw quic handshake refused' && l.reason === 'client_certificate')
  t.match(line, { sni: 'stargate-0.stargate.external', remote: '127.0.0.1', alpn: [] }, 'and logged with the peer address, the SNI and the ALPN offered')

  const { certPath, keyPath } = await pylonCert(t, cluster.tls.dir, 'pylon-a', pylonCa)
  const pylon = await QuinnPeer.client(t, { connect: `127.0.0.1:${cluster.tunnelPort}`, sni: 'stargate-0.stargate.external', caPath: cluster.tls.caPath, certPath, keyPath, accept: 'echo' })
  await pylon.established(1)
  const tunnel = await cluster.stubs.get('stargate-0')?.tunnel()
  if (tunnel === undefined) throw new Error('no tunnel')
  t.equal((await cluster.stubs.get('stargate-0')?.request(tunnel, 'mtls'))?.toString(), 'mtls', 'a Pylon with a valid certificate is relayed (the quinn Pylon echoes)')
})

t.test('a client-trust change closes tunnels whose Pylon certificate no longer verifies, and keeps the others', { skip }, async (t) => {
  const caA = await createCa({ name: 'pylon ca a' })
  const caB = await createCa({ name: 'pylon ca b' })
  let volume: ProjectedVolume | null = null
  const cluster = await QuicCluster.start(t, {
    pods: ['stargate-0'],
    subnet: '127.0.95',
    args: ['--tls-debounce-ms', '20'],
    tlsArgs: async (tls) => {
      volume = await ProjectedVolume.create(join(tls.dir, 'client-ca'), { 'ca.crt': caA.certPem + caB.certPem })
      return [...tls.routerArgs, '--client-ca-path', volume.path('ca.crt')]
    },
  })
  const trust = volume as ProjectedVolume | null
  if (trust === null) throw new Error('no volume')
  const a = await pylonCert(t, cluster.tls.dir, 'pylon-a', caA)
  const b = await pylonCert(t, cluster.tls.dir, 'pylon-b', caB)
  const pylonA = await QuinnPeer.client(t, { connect: `127.0.0.1:${cluster.tunnelPort}`, sni: 'stargate-0.stargate.external', caPath: cluster.tls.caPath, ...a })
  const pylonB = await QuinnPeer.client(t, { connect: `127.0.0.1:${cluster.tunnelPort}`, sni: 'stargate-0.stargate.external', caPath: cluster.tls.caPath, ...b })
  await pylonA.established(1)
  await pylonB.established(1)
  await cluster.stubs.get('stargate-0')?.tunnel(2)
  // CA A is removed from the client trust.
  await trust.swap({ 'ca.crt': caB.certPem })
  await waitFor(async () => await cluster.kube.metric('stargate_k8s_router_tls_reloads_total', { material_type: 'client_trust', result: 'success' }) === 1, { message: 'the reload' })
  t.match(await pylonA.closed(1, 15_000), { kind: 'application', by: 'peer', code: 0, reason: 'client trust changed' }, 'the Pylon whose CA was removed is closed')
  t.notOk(pylonB.events.some((e) => e.ev === 'closed'), 'the other tunnel stays open')
  const anotherA = await QuinnPeer.client(t, { connect: `127.0.0.1:${cluster.tunnelPort}`, sni: 'stargate-0.stargate.external', caPath: cluster.tls.caPath, ...a })
  t.match(await anotherA.closed(1), { by: 'peer', code: 0x100 + 42 }, 'a new handshake with the removed CA\'s certificate is refused (bad_certificate)')
})
