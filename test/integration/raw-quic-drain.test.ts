/**
 * SPEC §11 (upstream #1537): a raw QUIC tunnel the router drains takes no new stream from
 * either side, lets the open ones run to completion, and is closed with `router shutdown` on
 * both legs as soon as none is left. Both ends are quinn-peer (test/fixtures/quinn-peer),
 * configured as the real Pylon and Stargate.
 *
 * Failure modes: a stream opened during the drain that is relayed to a pod that will be cut
 * (the old behaviour), one that is refused without the documented code (a Stargate cannot tell
 * a refusal to retry elsewhere from a failure), a transfer in flight cut by the drain, a tunnel
 * held until the drain timeout although nothing is open on it.
 */
import t from 'tap'
import { QuinnPeer, patternSha256, quinnPeerSkip } from '../fixtures/quinn-peer.ts'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { STREAM_REFUSALS } from '../../lib/tunnel/errors.ts'
import { parseMetric } from '../fixtures/kube-router.ts'

const skip = await quinnPeerSkip(t)
const CODE = STREAM_REFUSALS.draining.code
const MIB = 1 << 20

t.setTimeout(120_000)

async function tunnel (t: Parameters<typeof QuicCluster.start>[0], subnet: string): Promise<{ cluster: QuicCluster, pylon: QuinnPeer, stargate: QuinnPeer, sc: number }> {
  const cluster = await QuicCluster.start(t, { pods: [], subnet, args: ['--shutdown-drain-timeout-ms', '30000'] })
  const stargate = await cluster.addQuinnPod('stargate-0', `${subnet}.10`, { accept: 'echo' })
  const pylon = await QuinnPeer.client(t, { connect: `127.0.0.1:${cluster.tunnelPort}`, sni: 'stargate-0.stargate.external', caPath: cluster.tls.caPath, accept: 'echo' })
  await pylon.established(1)
  const { conn: sc } = await stargate.waitEvent('connected')
  return { cluster, pylon, stargate, sc }
}

t.test('a draining tunnel refuses new streams from both sides with the code, finishes the open one, then closes with router shutdown', { skip }, async (t) => {
  const { cluster, pylon, stargate, sc } = await tunnel(t, '127.0.91')
  // A request of the Stargate's, half sent when the drain begins.
  const open = await stargate.open(sc)
  await stargate.write(sc, open, { bytes: 4 * MIB, seed: 7 })
  await pylon.waitEvent('stream', { conn: 1, stream: open })
  const started = Date.now()
  const shutdown = cluster.kube.router.shutdown()
  await new Promise((resolve) => { setTimeout(resolve, 100) })

  // New streams, one from each side: refused, never relayed.
  const fromStargate = await stargate.open(sc)
  await stargate.write(sc, fromStargate, 'a request opened during the drain').catch(() => {})
  const refusedAtStargate = await stargate.recvDone(sc, fromStargate)
  t.equal(refusedAtStargate.reset, CODE, 'the Stargate\'s new stream: RESET_STREAM with the code')
  t.match(await stargate.sendDone(sc, fromStargate), { outcome: 'stopped', code: CODE }, 'and STOP_SENDING with the code')
  const fromPylon = await pylon.open(1)
  await pylon.write(1, fromPylon, 'a request opened during the drain').catch(() => {})
  t.equal((await pylon.recvDone(1, fromPylon)).reset, CODE, 'the Pylon\'s new stream: RESET_STREAM with the code')
  t.match(await pylon.sendDone(1, fromPylon), { outcome: 'stopped', code: CODE }, 'and STOP_SENDING with the code')
  t.notOk(pylon.events.some((e) => e.ev === 'stream' && e.stream === fromStargate), 'the Stargate\'s refused stream never reached the Pylon')
  t.notOk(stargate.events.some((e) => e.ev === 'stream' && e.conn === sc && e.stream === fromPylon), 'nor the Pylon\'s the Stargate')

  // The open request finishes, echoed byte-exact.
  await stargate.write(sc, open, { bytes: 4 * MIB, seed: 7 })
  await stargate.finish(sc, open)
  const echoed = await stargate.recvDone(sc, open, 60_000)
  t.match(echoed, { fin: true, bytes: 8 * MIB, reset: null }, 'the open stream ran to completion during the drain')
  const sha = (await pylon.recvDone(1, open)).sha256
  t.equal(echoed.sha256, sha, 'byte-exact')
  t.not(sha, patternSha256(7, 0))

  // Nothing open any more: closed at once on both legs.
  const closed = await Promise.all([pylon.closed(1), stargate.closed(sc)])
  for (const [side, event] of [['Pylon', closed[0]], ['Stargate', closed[1]]] as const) {
    t.match(event, { kind: 'application', by: 'peer', code: 0, reason: 'router shutdown' }, `the ${side} is told router shutdown`)
  }
  await shutdown
  t.ok(Date.now() - started < 20_000, `shutdown over in ${Date.now() - started} ms of a 30 s drain timeout`)
  // The health listener is closed now: the registry is read in-process.
  const metrics = await cluster.kube.router.metrics.registry.metrics()
  t.equal(parseMetric(metrics, 'stargate_k8s_router_drain_streams_refused_total', { kind: 'raw_quic', side: 'pylon' }), 1)
  t.equal(parseMetric(metrics, 'stargate_k8s_router_drain_streams_refused_total', { kind: 'raw_quic', side: 'stargate' }), 1)
  t.equal(parseMetric(metrics, 'stargate_k8s_router_connections_drained_total', { kind: 'raw_quic', reason: 'shutdown' }), 1)
  const line = cluster.kube.logs.lines().find((l) => l.msg === 'raw quic tunnel closed')
  t.match(line, { outcome: 'completed', reason: 'router shutdown', drained: 'shutdown', refused: { pylon: 1, stargate: 1 } }, 'the close is logged with what the drain refused')
})

t.test('a tunnel with no open stream is closed at once when the drain begins', { skip }, async (t) => {
  const { cluster, pylon, stargate, sc } = await tunnel(t, '127.0.92')
  // One stream, finished before the drain: nothing is open any more.
  const done = await pylon.open(1)
  await pylon.write(1, done, 'hello')
  await pylon.finish(1, done)
  await pylon.recvDone(1, done)
  const started = Date.now()
  void cluster.kube.router.connections.drainAll('shutdown')
  t.match(await pylon.closed(1), { kind: 'application', code: 0, reason: 'router shutdown' })
  t.match(await stargate.closed(sc), { kind: 'application', code: 0, reason: 'router shutdown' })
  t.ok(Date.now() - started < 2000, `closed ${Date.now() - started} ms after the drain began`)
})

/*
 * A drain that begins while the pod leg is still connecting: the Pylon's stream already waiting
 * in the addon for that leg is work the drain lets finish (relayed once the leg is up), a new one
 * is refused with the code, and the tunnel closes once nothing is open. Failure modes: the
 * waiting stream dropped or cut by the drain, the new one relayed, the tunnel held until the
 * drain timeout.
 */
t.test('a drain that begins while the pod leg connects: the waiting stream is relayed, a new one refused, then the tunnel closes', { skip }, async (t) => {
  const subnet = '127.0.93'
  const cluster = await QuicCluster.start(t, { pods: [], subnet, args: ['--shutdown-drain-timeout-ms', '30000', '--connect-timeout-ms', '20000'] })
  const stargate = await cluster.addQuinnPod('stargate-0', `${subnet}.10`, { accept: 'echo' })
  // Frozen, the pod answers nothing: the router's leg to it stays in its handshake meanwhile.
  stargate.pause()
  t.teardown(() => { stargate.resume() })
  const pylon = await QuinnPeer.client(t, { connect: `127.0.0.1:${cluster.tunnelPort}`, sni: 'stargate-0.stargate.external', caPath: cluster.tls.caPath })
  await pylon.established(1)
  const waiting = await pylon.open(1)
  await pylon.write(1, waiting, { bytes: 100_000, seed: 3 })
  // Resolves once the router acknowledged every byte and the FIN.
  await pylon.finish(1, waiting)
  const started = Date.now()
  const shutdown = cluster.kube.router.shutdown()
  await new Promise((resolve) => { setTimeout(resolve, 100) })
  const fresh = await pylon.open(1)
  await pylon.write(1, fresh, 'a request opened during the drain').catch(() => {})
  t.equal((await pylon.recvDone(1, fresh)).reset, CODE, 'the new stream: RESET_STREAM with the code')
  t.match(await pylon.sendDone(1, fresh), { outcome: 'stopped', code: CODE }, 'and STOP_SENDING with the code')
  stargate.resume()
  t.match(await pylon.recvDone(1, waiting, 30_000), { fin: true, bytes: 100_000, reset: null, sha256: patternSha256(3, 100_000) }, 'the stream that waited for the pod leg is echoed whole')
  t.match(await pylon.closed(1, 30_000), { kind: 'application', by: 'peer', code: 0, reason: 'router shutdown' }, 'then the Pylon is told router shutdown')
  await shutdown
  t.ok(Date.now() - started < 20_000, `shutdown over in ${Date.now() - started} ms of a 30 s drain timeout`)
  const streamsAtPod = stargate.events.filter((e) => e.ev === 'stream').map((e) => (e as { stream: number }).stream)
  t.same(streamsAtPod, [waiting], 'only the waiting stream reached the pod')
})
