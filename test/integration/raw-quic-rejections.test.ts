/**
 * Issues 5 and 15, SPEC §7: a tunnel the router cannot route is refused from its Initial packet,
 * before any handshake work: a CONNECTION_CLOSE in an Initial carrying the reason the Pylon can
 * log (an application close cannot be sent before the handshake, RFC 9000 §10.2.3, so it is the
 * transport code APPLICATION_ERROR, 0x0c, with the reason kept); each rejection is counted.
 */
import t from 'tap'
import { QuicCluster } from '../fixtures/quic-cluster.ts'

t.test('a tunnel that cannot be routed is closed with code 0 and the reason, and counted', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.44' })
  // A listed pod that is not ready is not a target.
  cluster.list('stargate-9', '127.0.44.99', 40000, false)

  const cases = [
    { name: 'a Pylon that dials the IP (no SNI)', sni: null, reason: 'missing target SNI', outcome: 'missing_sni' },
    { name: 'an SNI outside the hostname template', sni: 'stargate-0.example.com', reason: 'unknown target SNI', outcome: 'unknown_sni' },
    { name: 'an SNI naming a pod that is not ready', sni: 'stargate-9.stargate.external', reason: 'target stargate not ready', outcome: 'target_unavailable' },
    { name: 'an SNI naming no pod at all', sni: 'stargate-404.stargate.external', reason: 'target stargate not ready', outcome: 'target_unavailable' },
  ] as const
  for (const c of cases) {
    // The router's certificate names only the template's hosts, so these clients cannot
    // verify it; they skip verification to see what the router does.
    const pylon = await cluster.dial(null, { serverName: c.sni, caPem: c.sni !== null && c.sni.endsWith('.stargate.external') ? cluster.tls.ca.certPem : null })
    const closed = await pylon.closedWith()
    t.match(closed, { initiator: 'peer', app: false, code: 0x0c, reason: c.reason, established: false }, `${c.name}: refused with '${c.reason}'`)
  }
  t.equal(await cluster.outcome('missing_sni'), 1)
  t.equal(await cluster.outcome('unknown_sni'), 1)
  t.equal(await cluster.outcome('target_unavailable'), 2)
  t.equal(await cluster.outcome('accepted'), 0, 'none was accepted')
  t.equal(cluster.stubs.get('stargate-0')?.tunnels.length, 0, 'no pod was dialed')
})

t.test('every connection outcome is exported at 0 before the first tunnel', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: [], subnet: '127.0.45' })
  for (const outcome of ['accepted', 'missing_sni', 'unknown_sni', 'target_unavailable', 'completed', 'relay_error']) {
    t.equal(await cluster.kube.metric('stargate_k8s_router_quic_connections_total', { outcome }), 0, outcome)
  }
  t.equal(await cluster.kube.metric('stargate_k8s_router_quic_relay_connections_active'), 0)
  t.equal(await cluster.kube.metric('stargate_k8s_router_quic_relayed_bytes_total', { direction: 'client_to_stargate' }), 0)
})
