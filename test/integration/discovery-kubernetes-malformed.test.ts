// SPEC §3 rules 1, 3 and 4: malformed EndpointSlices (no ports, wrong protocol, port 0 or
// out of range, an unsupported address type, endpoints without addresses or without an
// identity) never crash the router or drop other slices; each skip is logged and counted in
// stargate_k8s_router_endpointslice_skipped_total{reason}. Checked through both paths a
// slice takes: the initial list (deserialized by the client library) and watch events (raw JSON).
import t from 'tap'
import { FakeKubeApiServer, type Json } from '../fixtures/kube-apiserver.ts'
import { NAMESPACE, pod, startKubeRouter, stargateSlice } from '../fixtures/kube-router.ts'
import { idsOf } from '../fixtures/stargate-watch-client.ts'
import { waitFor } from '../fixtures/wait.ts'

const SKIPPED = 'stargate_k8s_router_endpointslice_skipped_total'

/** One batch of broken slices; `s` keeps names distinct between batches. */
function malformedSlices (s: string): Json[] {
  return [
    stargateSlice(`bad-no-ports-${s}`, [pod(`np-${s}`, '127.0.4.1')], { ports: null }),
    stargateSlice(`bad-grpc-udp-${s}`, [pod(`gu-${s}`, '127.0.4.2')], {
      ports: [{ name: 'grpc', protocol: 'UDP', port: 50051 }, { name: 'quic', protocol: 'UDP', port: 50052 }],
    }),
    stargateSlice(`bad-quic-tcp-${s}`, [pod(`qt-${s}`, '127.0.4.3')], {
      ports: [{ name: 'grpc', protocol: 'TCP', port: 50051 }, { name: 'quic', protocol: 'TCP', port: 50052 }],
    }),
    stargateSlice(`bad-port-zero-${s}`, [pod(`p0-${s}`, '127.0.4.4')], { ports: { grpc: 0, quic: 50052 } }),
    stargateSlice(`bad-port-range-${s}`, [pod(`pr-${s}`, '127.0.4.5')], { ports: { grpc: 50051, quic: 70000 } }),
    stargateSlice(`bad-fqdn-${s}`, [pod(`fq-${s}`, 'stargate.example')], { addressType: 'FQDN' }),
    stargateSlice(`mixed-${s}`, [
      pod(`good-${s}`, '127.0.4.10'),
      { pod: `no-address-${s}` }, // addresses: []
      // A hostname is not an identity (the upstream router dropped that fallback).
      { pod: `node-${s}`, targetRefKind: 'Node', hostname: `hostname-${s}`, ip: '127.0.4.11' }, // non-Pod ref with a hostname
      { pod: `node-only-${s}`, targetRefKind: 'Node', ip: '127.0.4.12' }, // non-Pod ref, no hostname
      { ip: '127.0.4.13' }, // no targetRef, no hostname
    ]),
  ]
}

/** What one batch adds to the counter, by reason. */
const PER_BATCH: Record<string, number> = {
  missing_grpc_port: 2,
  missing_quic_port: 1,
  invalid_port: 2,
  unsupported_address_type: 1,
  no_address: 1,
  no_identity: 3,
}

t.test('malformed slices are skipped and counted by reason while the other slices keep working', async (t) => {
  const fake = await FakeKubeApiServer.start({ namespaces: [NAMESPACE] })
  fake.apply(stargateSlice('stargate-headless-good', [pod('stargate-0', '127.0.1.1'), pod('stargate-1', '127.0.1.2')]))
  for (const slice of malformedSlices('1')) fake.apply(slice)
  const kr = await startKubeRouter(t, { fake, args: ['--watch-heartbeat-ms', '3600000'] })
  const watcher = kr.watch()

  // Through the initial list.
  await watcher.nextWithIds(['good-1', 'stargate-0', 'stargate-1'])
  for (const [reason, count] of Object.entries(PER_BATCH)) {
    t.equal(await kr.metric(SKIPPED, { reason }), count, `list: ${reason}`)
  }
  t.equal(await kr.metric(SKIPPED, { reason: 'malformed_slice' }), 0)

  // Through watch events.
  for (const slice of malformedSlices('2')) fake.apply(slice)
  await watcher.nextWithIds(['good-1', 'good-2', 'stargate-0', 'stargate-1'], { from: 1 })
  await waitFor(async () => await kr.metric(SKIPPED, { reason: 'no_identity' }) === 6, { message: 'the second batch counted' })
  for (const [reason, count] of Object.entries(PER_BATCH)) {
    t.equal(await kr.metric(SKIPPED, { reason }), 2 * count, `watch: ${reason}`)
  }

  // Each skipping slice says so in the log, naming the slice and the reasons.
  const lines = kr.logs.lines().filter((l) => l.msg === 'endpointslice contributes fewer targets than it lists')
  const bySlice = new Map(lines.map((l) => [l.slice as string, l.skipped as Record<string, number>]))
  t.same(bySlice.get(`${NAMESPACE}/bad-no-ports-2`), { missing_grpc_port: 1 })
  t.same(bySlice.get(`${NAMESPACE}/bad-port-zero-1`), { invalid_port: 1 })
  t.same(bySlice.get(`${NAMESPACE}/mixed-2`), { no_address: 1, no_identity: 3 })

  // The good slice still follows changes, and no identity was ever guessed from an IP.
  fake.apply(stargateSlice('stargate-headless-good', [pod('stargate-0', '127.0.1.1')]))
  const last = await watcher.nextWithIds(['good-1', 'good-2', 'stargate-0'], { from: 2 })
  for (const id of idsOf(last)) t.notMatch(id, /^\d+[-.]\d+[-.]\d+[-.]\d+$/, `${id} is not an IP form`)
  t.same(await kr.readyz(), { status: 200, body: 'ready\n' })
})

t.test('a slice that becomes malformed stops contributing and a fixed one contributes again', async (t) => {
  const fake = await FakeKubeApiServer.start({ namespaces: [NAMESPACE] })
  fake.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.1.1')]))
  fake.apply(stargateSlice('stargate-headless-b', [pod('stargate-1', '127.0.1.2')]))
  const kr = await startKubeRouter(t, { fake, args: ['--watch-heartbeat-ms', '3600000'] })
  const watcher = kr.watch()
  await watcher.nextWithIds(['stargate-0', 'stargate-1'])
  fake.apply(stargateSlice('stargate-headless-b', [pod('stargate-1', '127.0.1.2')], { ports: { grpc: 50051 } }))
  await watcher.nextWithIds(['stargate-0'], { from: 1 })
  t.equal(await kr.metric(SKIPPED, { reason: 'missing_quic_port' }), 1)
  fake.apply(stargateSlice('stargate-headless-b', [pod('stargate-1', '127.0.1.2')]))
  await watcher.nextWithIds(['stargate-0', 'stargate-1'], { from: 2 })
})
