/**
 * SPEC §7 and §12: a tunnel the router cannot route is refused from its
 * Initial packet, before any handshake work. An Initial is readable by anyone on the path, so
 * the refusal is a transport CONNECTION_CLOSE with APPLICATION_ERROR (0x0c) and no reason phrase
 * (RFC 9000 §10.2.3: an application close cannot be sent before the handshake, and its reason
 * must be cleared when it is converted); the router keeps the reason in its metrics and its log.
 * The router used to put the reason text in the Initial.
 */
import t from 'tap'
import { readFile } from 'node:fs/promises'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { QuinnPeer, quinnPeerSkip } from '../fixtures/quinn-peer.ts'
import { ROOT } from '../../scripts/docs.ts'

const skipQuinn = await quinnPeerSkip(t)

t.test('a tunnel that cannot be routed is closed with APPLICATION_ERROR and no reason; the reason is counted and logged', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.44' })
  // A listed pod that is not ready is not a target.
  cluster.list('stargate-9', '127.0.44.99', 40000, false)

  const cases = [
    { name: 'a Pylon that dials the IP (no SNI)', sni: null, outcome: 'missing_sni' },
    { name: 'an SNI outside the hostname template', sni: 'stargate-0.example.com', outcome: 'unknown_sni' },
    { name: 'an SNI naming a pod that is not ready', sni: 'stargate-9.stargate.external', outcome: 'target_unavailable' },
    // The template matches: the name is a pod's as far as routing can tell, so it is not ready.
    { name: 'an SNI naming no pod at all', sni: 'stargate-404.stargate.external', outcome: 'target_unavailable' },
  ] as const
  for (const c of cases) {
    // The router's certificate names only the template's hosts, so these clients cannot
    // verify it; they skip verification to see what the router does.
    const pylon = await cluster.dial(null, { serverName: c.sni, caPem: c.sni !== null && c.sni.endsWith('.stargate.external') ? cluster.tls.ca.certPem : null })
    const closed = await pylon.closedWith()
    t.match(closed, { initiator: 'peer', app: false, code: 0x0c, established: false }, `${c.name}: refused with APPLICATION_ERROR`)
    t.equal(closed.reason, '', `${c.name}: no reason phrase on the wire`)
    const logged = cluster.kube.logs.lines().filter((l) => l.msg === 'raw quic handshake refused' && l.sni === c.sni)
    t.match(logged, [{ reason: c.outcome, remote: '127.0.0.1' }], `${c.name}: the router logs why (${c.outcome})`)
  }
  t.equal(await cluster.outcome('missing_sni'), 1)
  t.equal(await cluster.outcome('unknown_sni'), 1)
  t.equal(await cluster.outcome('target_unavailable'), 2)
  t.equal(await cluster.kube.metric('stargate_k8s_router_quic_handshake_failures_total', { reason: 'target_unavailable' }), 2, 'and counts it as a refused handshake by reason')
  t.equal(await cluster.outcome('accepted'), 0, 'none was accepted')
  t.equal(cluster.stubs.get('stargate-0')?.tunnels.length, 0, 'no pod was dialed')
})

t.test('a quinn Pylon refused by SNI sees the close docs/errors.md describes', { skip: skipQuinn }, async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.140' })
  const pylon = await QuinnPeer.client(t, { connect: `127.0.0.1:${cluster.tunnelPort}`, sni: 'stargate-7.stargate.external', caPath: cluster.tls.caPath })
  const closed = await pylon.closed(1)
  t.match(closed, { kind: 'transport', by: 'peer', code: 0x0c, reason: '', established: false }, 'quinn reads a transport close, APPLICATION_ERROR, no reason')
  const errors = await readFile(`${ROOT}docs/errors.md`, 'utf8')
  t.ok(closed.error !== null && errors.includes(`quinn reports \`${closed.error}\``), `docs/errors.md quotes quinn's report: ${String(closed.error)}`)
  t.equal(await cluster.outcome('target_unavailable'), 1, 'counted under its reason')
})

t.test('every connection outcome is exported at 0 before the first tunnel', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: [], subnet: '127.0.45' })
  for (const outcome of ['accepted', 'missing_sni', 'unknown_sni', 'target_unavailable', 'completed', 'relay_error']) {
    t.equal(await cluster.kube.metric('stargate_k8s_router_quic_connections_total', { outcome }), 0, outcome)
  }
  t.equal(await cluster.kube.metric('stargate_k8s_router_quic_relay_connections_active'), 0)
  t.equal(await cluster.kube.metric('stargate_k8s_router_quic_relayed_bytes_total', { direction: 'client_to_stargate' }), 0)
})
