/**
 * Issue 15/16: once a raw QUIC tunnel's pod leg is up, the addon pairs every new stream itself
 * (lib/quic/native/src/bridge.c) with a twin of the same stream ID on the other leg, in the
 * same engine turn. A Stargate that allows few concurrent streams makes the rest wait natively,
 * in order, until it grants more (MAX_STREAMS): none is lost or reordered, and the IDs still
 * match. Peers are quinn-peer, configured as the real Pylon and Stargate (no ALPN).
 */
import t from 'tap'
import { QuinnPeer, patternSha256, quinnPeerSkip } from '../fixtures/quinn-peer.ts'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { QuicEngine } from '../../lib/quic/engine.ts'
import { waitFor } from '../fixtures/wait.ts'

const skip = await quinnPeerSkip(t)

t.test('streams beyond the Stargate\'s stream limit wait in the addon and all cross intact, with matching IDs', { skip }, async (t) => {
  const cluster = await QuicCluster.start(t, { pods: [], subnet: '127.0.122' })
  const stargate = await cluster.addQuinnPod('stargate-0', '127.0.122.10', { accept: 'echo', maxBidiStreams: 2 })
  const pylon = await QuinnPeer.client(t, { connect: `127.0.0.1:${cluster.tunnelPort}`, sni: 'stargate-0.stargate.external', caPath: cluster.tls.caPath })
  await pylon.established(1)
  // A first echo proves both legs are up (the pod leg is dialed after the Pylon's handshake).
  const first = await pylon.open(1, 'bi')
  await pylon.write(1, first, 'warm up')
  await pylon.finish(1, first)
  t.match(await pylon.recvDone(1, first), { bytes: 7, fin: true })
  const before = QuicEngine.shared().counters().bridgedStreams
  const ids = await Promise.all(Array.from({ length: 12 }, async () => await pylon.open(1, 'bi')))
  await Promise.all(ids.map(async (id, i) => {
    await pylon.write(1, id, { bytes: 100_000 + i, seed: 40 + i })
    await pylon.finish(1, id)
  }))
  const echoes = await Promise.all(ids.map(async (id) => await pylon.recvDone(1, id, 30_000)))
  t.same(echoes.map((e) => e.sha256), ids.map((_, i) => patternSha256(40 + i, 100_000 + i)), '12 streams, 2 at a time at the pod, each echoed intact')
  const atPod = stargate.events.filter((e) => e.ev === 'stream').map((e) => (e as { stream: number }).stream)
  t.same(atPod.slice(-12), ids, 'the pod saw the same stream IDs, in order')
  t.equal(QuicEngine.shared().counters().bridgedStreams - before, 12, 'the addon paired every one')
})

t.test('a Pylon that closes while its streams wait in the addon for the Stargate\'s credit leaves nothing behind', { skip }, async (t) => {
  // A short idle timeout on the router's legs. Under load (six copies of this file at once
  // beside a busy loop: 5 runs in 12) the router never processed the Pylon's one
  // CONNECTION_CLOSE: its endpoint dropped no datagram and the kernel's RcvbufErrors did not
  // move, and why the close is missing is not explained yet (issue 15, open). QUIC's answer to a
  // close that never arrives is the idle timeout, 300 s by default, 4 s here; this test is about
  // what the router leaves behind either way.
  const cluster = await QuicCluster.start(t, { pods: [], subnet: '127.0.123', args: ['--relay-idle-timeout-ms', '4000', '--relay-keep-alive-ms', '1000'] })
  // The pod takes one stream at a time and never finishes it: the rest wait in the addon.
  const stargate = await cluster.addQuinnPod('stargate-0', '127.0.123.10', { accept: 'hold', maxBidiStreams: 1 })
  const engine = QuicEngine.shared()
  const baseline = engine.counters()
  const pylon = await QuinnPeer.client(t, { connect: `127.0.0.1:${cluster.tunnelPort}`, sni: 'stargate-0.stargate.external', caPath: cluster.tls.caPath })
  await pylon.established(1)
  const { conn } = await stargate.waitEvent('connected')
  const ids = await Promise.all(Array.from({ length: 6 }, async () => await pylon.open(1, 'bi')))
  await Promise.all(ids.map(async (id, i) => { await pylon.write(1, id, { bytes: 50_000, seed: i }) }))
  await stargate.waitEvent('stream', { conn })
  await waitFor(() => engine.counters().bufferedBytes > baseline.bufferedBytes, { timeoutMs: 10_000, message: 'bytes of the waiting streams held in the addon' })
  await pylon.close(1, 7, 'pylon gone mid-relay')
  // The Pylon's code and reason when its close arrived; the idle close when it was lost.
  const closed = await stargate.closed(conn, 20_000)
  t.ok((closed.code === 7 && closed.reason === 'pylon gone mid-relay') || (closed.code === 0 && /^pylon connection idle timeout$/.test(closed.reason)), `the pod leg closed with the Pylon's code and reason, or the idle reason (got ${closed.code} ${closed.reason})`)
  await waitFor(() => {
    const now = engine.counters()
    return now.connections === baseline.connections && now.streams === baseline.streams && now.bufferedBytes === baseline.bufferedBytes
  }, { timeoutMs: 15_000, message: 'the engine\'s live connections, streams and buffers back to the baseline' })
  t.pass('connections, streams and buffers back to the baseline')
})
