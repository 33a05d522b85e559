/**
 * "1,000 concurrent tunnels": real Pylon-like clients (quinn 0.11 + rustls 0.23, no
 * ALPN, one quinn process holding every connection) → the router → one real Stargate-like
 * quinn server (no ALPN, echoing). All 1,000 tunnels are up at once, each carries a
 * byte-exact request/response on a stream of its own, the router's counters and metrics
 * agree with what the peers saw, and after every Pylon closes the engine's live objects
 * (connections, streams, buffered bytes) are back to where they were before the first dial.
 */
import t from 'tap'
import { QuinnPeer, patternSha256, quinnPeerSkip } from '../fixtures/quinn-peer.ts'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { engine as fixtureEngine } from '../fixtures/quic-engine.ts'
import { waitFor } from '../fixtures/wait.ts'

const skip = await quinnPeerSkip(t)
// 1,000 quinn connections set up and torn down in waves: 23-39 s at load 10-13 on 2 cores,
// past tap's 30 s per-file default when CI runs four files at once.
t.setTimeout(180_000)
const TUNNELS = 1000
const REQUEST = 4096
const SNI = 'stargate-0.stargate.external'

t.test('1,000 concurrent no-ALPN quinn tunnels each carry a byte-exact echo, the counters agree, and all close back to the baseline', { skip, timeout: 120_000 }, async (t) => {
  // Dials to the pod get the production default's room (QuicCluster's 1.5 s is for failure tests).
  const cluster = await QuicCluster.start(t, { pods: [], subnet: '127.0.121', args: ['--connect-timeout-ms', '20000'] })
  const stargate = await cluster.addQuinnPod('stargate-0', '127.0.121.10', { accept: 'echo' })
  const engine = fixtureEngine()
  const started = Date.now()
  const lap = (what: string): void => { t.comment(`${what} after ${Date.now() - started} ms`) }
  const baseline = engine.counters()

  const pylon = await QuinnPeer.client(t, { connect: `127.0.0.1:${cluster.tunnelPort}`, sni: SNI, caPath: cluster.tls.caPath })
  // Dialed in waves of 100 (a fleet of Pylons does not start in one instant); all stay up.
  const conns: number[] = [1]
  await pylon.established(1)
  while (conns.length < TUNNELS) {
    const wave = await Promise.all(Array.from({ length: Math.min(100, TUNNELS - conns.length) }, async () => await pylon.connect()))
    await Promise.all(wave.map(async (conn) => await pylon.established(conn, 60_000)))
    conns.push(...wave)
  }
  const connected = await Promise.all(conns.map(async (conn) => await pylon.established(conn)))
  t.ok(connected.every((c) => c.alpn === null), 'every Pylon negotiated no ALPN')
  const atStargate = await stargate.waitEvents('connected', {}, TUNNELS, 60_000)
  t.ok(atStargate.every((c) => c.alpn === null && c.sni === SNI), 'every pod leg: no ALPN, the Pylon\'s SNI')

  lap('all connected')
  // All up at once: both legs of every tunnel live in the engine and the router counts them.
  await waitFor(async () => await cluster.kube.metric('stargate_k8s_router_quic_relay_connections_active') === TUNNELS, { timeoutMs: 20_000, message: `${TUNNELS} tunnels active` })
  t.equal(await cluster.outcome('accepted'), TUNNELS, 'accepted counted once per tunnel')
  t.equal(engine.counters().connections - baseline.connections, 2 * TUNNELS, 'two engine connections per tunnel')

  // One request each, all in flight together; each echo is checked byte for byte.
  const bridgedBefore = engine.counters().bridgedStreams
  const streams = await Promise.all(conns.map(async (conn) => await pylon.open(conn, 'bi')))
  await Promise.all(conns.map(async (conn, i) => {
    await pylon.write(conn, streams[i] as number, { bytes: REQUEST, seed: i })
    await pylon.finish(conn, streams[i] as number)
  }))
  const echoes = await Promise.all(conns.map(async (conn, i) => await pylon.recvDone(conn, streams[i] as number, 60_000)))
  const intact = echoes.filter((e, i) => e.fin && e.bytes === REQUEST && e.sha256 === patternSha256(i, REQUEST)).length
  lap('all echoed')
  t.equal(intact, TUNNELS, `${TUNNELS} echoes of ${REQUEST} bytes, each intact and finished`)
  t.equal(engine.counters().bridgedStreams - bridgedBefore, TUNNELS, 'each stream paired in the addon (no turn through TypeScript)')
  const relayed = async (direction: string): Promise<number> => await cluster.kube.metric('stargate_k8s_router_quic_relayed_bytes_total', { direction }) ?? 0
  t.equal(await relayed('client_to_stargate'), TUNNELS * REQUEST, 'the relayed-bytes metric counts every request byte')
  t.equal(await relayed('stargate_to_client'), TUNNELS * REQUEST, 'and every answer byte')

  // Closed in waves too: a burst of 1,000 CONNECTION_CLOSEs can overflow a socket buffer, and a
  // lost one is never repeated (RFC 9000 §10.2), so its peer would wait out the idle timeout.
  for (let i = 0; i < TUNNELS; i += 100) {
    const wave = conns.slice(i, i + 100)
    await Promise.all(wave.map(async (conn) => { await pylon.close(conn, 0, 'pylon done') }))
    await stargate.waitEvents('closed', {}, i + wave.length, 30_000)
  }
  const closed = stargate.events.filter((e) => e.ev === 'closed') as Array<{ code: number | null, reason: string }>
  lap('all closed')
  const wrong = closed.filter((c) => c.code !== 0 || c.reason !== 'pylon done')
  t.same(wrong.slice(0, 3), [], 'every pod leg saw the Pylon\'s close code and reason')
  await waitFor(async () => await cluster.outcome('completed') === TUNNELS, { timeoutMs: 20_000, message: `${TUNNELS} tunnels completed` })
  t.equal(await cluster.kube.metric('stargate_k8s_router_quic_relay_connections_active'), 0, 'none active')
  // The closing periods (3 PTO on loopback) end within a second or two.
  await waitFor(() => {
    const now = engine.counters()
    return now.connections === baseline.connections && now.streams === baseline.streams && now.bufferedBytes === baseline.bufferedBytes
  }, { timeoutMs: 20_000, message: 'the engine\'s live connections, streams and buffers back to the baseline' })
  t.pass('the engine\'s live objects are back to the baseline')
})
