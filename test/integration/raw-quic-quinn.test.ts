/**
 * The failure this fixes: a real Pylon's raw QUIC tunnel (quinn + rustls, offering no
 * ALPN) through the router to a real Stargate's quinn listener (no ALPN configured, refusing any
 * client that offers one). Before the engine the router refused the Pylon inside the handshake
 * (alert 120) and would have offered the pod an ALPN it refuses. Both ends here are quinn-peer
 * (test/fixtures/quinn-peer), configured as the real ones: quinn 0.11 + rustls 0.23 as upstream
 * runs, and one tunnel between quinn 0.9 ends, the stack older Pylons and Stargates shipped with.
 */
import t from 'tap'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { QuinnPeer, patternSha256, quinnPeerSkip, type QuinnVersion } from '../fixtures/quinn-peer.ts'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import type { Teardown } from '../fixtures/kube-router.ts'
import { sleep } from '../fixtures/wait.ts'

const skip = await quinnPeerSkip(t)
const skip09 = skip || await quinnPeerSkip(t, '0.9')
const MIB = 1 << 20
/** Characters of each quinn peer's stderr a failed transfer prints. */
const STDERR_SHOWN = 8000

interface Tunnel {
  readonly cluster: QuicCluster
  readonly pylon: QuinnPeer
  readonly stargate: QuinnPeer
  /** The stargate's connection number for the relayed tunnel. */
  readonly sc: number
}

interface TunnelOptions {
  readonly pylon?: QuinnVersion
  readonly stargate?: QuinnVersion
  /** Both peers' idle timeout (quinn's default, 30 s, unless set). */
  readonly idleTimeoutMs?: number
  /** The router's extra flags. */
  readonly args?: readonly string[]
}

async function tunnel (t: Teardown, subnet: string, options: TunnelOptions = {}): Promise<Tunnel> {
  const cluster = await QuicCluster.start(t, { pods: [], subnet, args: [...options.args ?? []] })
  const certPath = join(cluster.tls.dir, 'pod.crt')
  const keyPath = join(cluster.tls.dir, 'pod.key')
  await writeFile(certPath, cluster.tls.stargate.chainPem)
  await writeFile(keyPath, cluster.tls.stargate.keyPem)
  const stargate = await QuinnPeer.server(t, { listen: `${subnet}.10:0`, certPath, keyPath, accept: 'echo', quinn: options.stargate, idleTimeoutMs: options.idleTimeoutMs })
  cluster.list('stargate-0', `${subnet}.10`, stargate.port, true)
  await cluster.waitForTargets(1)
  const pylon = await QuinnPeer.client(t, { connect: `127.0.0.1:${cluster.tunnelPort}`, sni: 'stargate-0.stargate.external', caPath: cluster.tls.caPath, accept: 'echo', quinn: options.pylon, idleTimeoutMs: options.idleTimeoutMs })
  const connected = await pylon.established(1)
  if (connected.alpn !== null) throw new Error(`the pylon negotiated ALPN ${connected.alpn}`)
  const { conn: sc } = await stargate.waitEvent('connected')
  return { cluster, pylon, stargate, sc }
}

/**
 * What each side said about the tunnel's end: the router's raw quic log lines (its close
 * reason, and in `first` which leg ended first, its close kind, code and ngtcp2 error) and
 * both quinn peers' close events (`by`: local = that quinn detected the error itself, peer =
 * it received the CONNECTION_CLOSE). quinn reports a lost send side only as "connection lost";
 * this says why. With QUINN_PEER_TRACE=debug in the environment the peers' stderr tails
 * follow: quinn's own log, e.g. the offsets and limits of a flow-control violation it detected.
 */
function closeStory ({ cluster, pylon, stargate }: Tunnel): string {
  const router = cluster.kube.logs.lines().filter((line) => String(line.msg).startsWith('raw quic'))
  const peer = (name: string, p: QuinnPeer): string[] => p.events.filter((e) => e.ev === 'closed').map((e) => `${name}: ${JSON.stringify(e)}`)
  const stderr = (name: string, p: QuinnPeer): string[] => p.stderr === '' ? [] : [`${name} stderr (tail):`, p.stderr.slice(-STDERR_SHOWN)]
  return ['router:', ...router.map((line) => `  ${JSON.stringify(line)}`), ...peer('pylon', pylon), ...peer('stargate', stargate),
    ...stderr('pylon', pylon), ...stderr('stargate', stargate)].join('\n')
}

/** Runs a transfer; when it fails, the error carries closeStory(). */
async function explained<T> (tunnel: Tunnel, transfer: Promise<T>): Promise<T> {
  try {
    return await transfer
  } catch (err) {
    // The peers' close events arrive just after the failed write: wait for them (bounded, as
    // a peer whose connection is still up sends none).
    await Promise.allSettled([tunnel.pylon.closed(1, 5000), tunnel.stargate.closed(tunnel.sc, 5000)])
    throw new Error(`${err instanceof Error ? err.message : String(err)}\n${closeStory(tunnel)}`, { cause: err })
  }
}

t.test('a no-ALPN quinn Pylon reaches a no-ALPN quinn Stargate through the router, offered no ALPN on either leg', { skip }, async (t) => {
  const { cluster, stargate } = await tunnel(t, '127.0.90')
  const hello = await stargate.waitEvent('client_hello')
  t.equal(hello.alpn, null, 'the router offered the pod no ALPN extension')
  t.equal(hello.sni, 'stargate-0.stargate.external', 'and the Pylon\'s SNI')
  const connected = await stargate.waitEvent('connected')
  t.equal(connected.alpn, null)
  t.equal(await cluster.outcome('accepted'), 1)
})

t.test('64 MiB each way byte-exact: the Stargate opens streams to the Pylon and the Pylon opens some too', { skip }, async (t) => {
  const relayed = await tunnel(t, '127.0.91')
  const { pylon, stargate, sc } = relayed
  // The reverse tunnel's main direction: the Stargate proxies a request to the Pylon (which echoes).
  const down = await stargate.open(sc, 'bi')
  const up = await pylon.open(1, 'bi')
  await explained(relayed, Promise.all([
    stargate.write(sc, down, { bytes: 64 * MIB, seed: 11 }).then(async () => { await stargate.finish(sc, down) }),
    pylon.write(1, up, { bytes: 64 * MIB, seed: 12 }).then(async () => { await pylon.finish(1, up) }),
  ]))
  const [back, echoed] = await explained(relayed, Promise.all([stargate.recvDone(sc, down, 120_000), pylon.recvDone(1, up, 120_000)]))
  t.match(back, { bytes: 64 * MIB, fin: true, sha256: patternSha256(11, 64 * MIB) }, 'Stargate → Pylon → Stargate: 64 MiB each way intact')
  t.match(echoed, { bytes: 64 * MIB, fin: true, sha256: patternSha256(12, 64 * MIB) }, 'Pylon → Stargate → Pylon: 64 MiB each way intact')
  t.equal(down, 1, 'the Stargate\'s first stream is 1')
  t.ok((await pylon.waitEvent('stream', { conn: 1, stream: down })).dir === 'bi', 'and the Pylon sees the same stream ID')
})

t.test('uni streams both ways, reset and stop-sending codes, and close code and reason cross the router', { skip }, async (t) => {
  const { pylon, stargate, sc } = await tunnel(t, '127.0.92')
  const u = await pylon.open(1, 'uni')
  await pylon.write(1, u, 'pylon uni')
  await pylon.finish(1, u)
  t.match(await stargate.recvDone(sc, u), { bytes: 9, fin: true }, 'a Pylon uni stream reaches the Stargate with FIN')
  const v = await stargate.open(sc, 'uni')
  await stargate.write(sc, v, 'stargate uni')
  await stargate.finish(sc, v)
  t.match(await pylon.recvDone(1, v), { bytes: 12, fin: true }, 'a Stargate uni stream reaches the Pylon')
  // Reset by the Pylon: the Stargate sees the code.
  await stargate.accept('hold')
  const r = await pylon.open(1, 'bi')
  await pylon.write(1, r, 'partial')
  await stargate.waitEvent('stream', { conn: sc, stream: r })
  await stargate.read(sc, r)
  await pylon.reset(1, r, 77)
  t.match(await stargate.recvDone(sc, r), { reset: 77 }, 'RESET_STREAM 77 crossed')
  // STOP_SENDING from the Stargate: the Pylon's writer learns the code.
  const s = await pylon.open(1, 'bi')
  await pylon.write(1, s, 'upload')
  await stargate.waitEvent('stream', { conn: sc, stream: s })
  await stargate.stop(sc, s, 9)
  t.match(await pylon.waitEvent('stopped', { conn: 1, stream: s }), { code: 9 }, 'STOP_SENDING 9 crossed')
  await pylon.close(1, 0x1234, 'pylon shutting down')
  t.match(await stargate.closed(sc), { kind: 'application', by: 'peer', code: 0x1234, reason: 'pylon shutting down' }, 'close code and reason crossed')
})

t.test('the Stargate closing its tunnel: its code and reason reach the Pylon', { skip }, async (t) => {
  const { pylon, stargate, sc, cluster } = await tunnel(t, '127.0.93')
  await stargate.close(sc, 42, 'stargate restarting')
  t.match(await pylon.closed(1), { kind: 'application', by: 'peer', code: 42, reason: 'stargate restarting' })
  t.equal(await cluster.outcome('completed'), 1)
  // Which leg ended the tunnel and how, as a failed transfer's story prints it.
  const closed = cluster.kube.logs.lines().find((line) => line.msg === 'raw quic tunnel closed')
  t.match(closed, { outcome: 'completed', first: { leg: 'upstream', kind: 'peer', app: true, code: 42, liberr: 0 } }, 'the router logs the leg that closed first, its kind, code and ngtcp2 error')
})

/*
 * quinn 0.11 runs path-MTU discovery by default: once the handshake is confirmed it probes with
 * padded packets of up to 1452 bytes, and each side's datagram limit (max_datagram_size) grows
 * from 1154 to 1406 bytes. The router's legs carry 1350-byte packets (no discovery of its own),
 * so its datagram bridge meets datagrams it cannot forward. The failure mode: ngtcp2 answers "0
 * bytes written" for a DATAGRAM frame that can never fit, as it does under congestion control;
 * the engine kept such a datagram at the head of the other leg's queue, and since it sends
 * queued datagrams before stream data, that leg never sent stream data again: one datagram at
 * the Pylon's own limit froze every stream of its tunnel.
 */
t.test('quinn 0.11 path-MTU discovery through the router: 1452-byte packets on both legs, and a datagram too large for the other leg is dropped, never stalling the tunnel', { skip }, async (t) => {
  const { pylon, stargate, sc } = await tunnel(t, '127.0.132')
  const client = await pylon.mtuDiscovered(1)
  t.match(client, { current_mtu: 1452, mtu_probes_lost: 0, black_holes: 0 }, 'the Pylon\'s leg carries quinn\'s 1452-byte probes')
  const server = await stargate.mtuDiscovered(sc)
  t.match(server, { current_mtu: 1452, mtu_probes_lost: 0, black_holes: 0 }, 'so does the Stargate\'s')
  const limit = client.max_datagram_size ?? 0
  t.ok(limit > 1350, `the Pylon's datagram limit grew past the router's packet size (${limit})`)
  t.equal(server.max_datagram_size, limit, 'and the Stargate\'s alike')

  await pylon.datagram(1, { bytes: limit, seed: 21 })
  await pylon.datagram(1, { bytes: 1200, seed: 22 })
  t.equal((await stargate.waitEvent('datagram', { conn: sc })).len, 1200, 'the Pylon\'s next datagram arrives; the one too large for the Stargate leg was dropped')
  await stargate.datagram(sc, { bytes: limit, seed: 23 })
  await stargate.datagram(sc, { bytes: 1200, seed: 24 })
  t.equal((await pylon.waitEvent('datagram', { conn: 1 })).len, 1200, 'likewise towards the Pylon')

  const up = await pylon.open(1, 'bi')
  const down = await stargate.open(sc, 'bi')
  await Promise.all([
    pylon.write(1, up, { bytes: 4 * MIB, seed: 25 }).then(async () => { await pylon.finish(1, up) }),
    stargate.write(sc, down, { bytes: 4 * MIB, seed: 26 }).then(async () => { await stargate.finish(sc, down) }),
  ])
  t.match(await pylon.recvDone(1, up), { bytes: 4 * MIB, fin: true, sha256: patternSha256(25, 4 * MIB) }, 'streams both ways still flow, byte-exact')
  t.match(await stargate.recvDone(sc, down), { bytes: 4 * MIB, fin: true, sha256: patternSha256(26, 4 * MIB) })
  t.equal(stargate.events.filter((e) => e.ev === 'datagram').length, 1, 'the Stargate received only the datagram that fits')
})

t.test('an older Pylon on quinn 0.9 reaches a Stargate on quinn 0.11 through the router: 16 MiB each way byte-exact', { skip: skip09 }, async (t) => {
  const relayed = await tunnel(t, '127.0.133', { pylon: '0.9' })
  const { pylon, stargate, sc } = relayed
  t.equal((await pylon.established(1)).quinn, '0.9', 'the Pylon runs quinn 0.9')
  t.equal((await stargate.waitEvent('connected')).quinn, '0.11', 'the Stargate quinn 0.11')
  const down = await stargate.open(sc, 'bi')
  const up = await pylon.open(1, 'bi')
  await explained(relayed, Promise.all([
    stargate.write(sc, down, { bytes: 16 * MIB, seed: 31 }).then(async () => { await stargate.finish(sc, down) }),
    pylon.write(1, up, { bytes: 16 * MIB, seed: 32 }).then(async () => { await pylon.finish(1, up) }),
  ]))
  const [back, echoed] = await explained(relayed, Promise.all([stargate.recvDone(sc, down, 60_000), pylon.recvDone(1, up, 60_000)]))
  t.match(back, { bytes: 16 * MIB, fin: true, sha256: patternSha256(31, 16 * MIB) }, 'Stargate → Pylon → Stargate intact')
  t.match(echoed, { bytes: 16 * MIB, fin: true, sha256: patternSha256(32, 16 * MIB) }, 'Pylon → Stargate → Pylon intact')
  await pylon.close(1, 0x99, 'old pylon leaving')
  t.match(await stargate.closed(sc), { kind: 'application', by: 'peer', code: 0x99, reason: 'old pylon leaving' }, 'its close crossed')
})

/*
 * quinn 0.11's idle timeout is 30 s by default, and neither the real Pylon nor the real Stargate
 * sends keep-alives: an idle tunnel lives on the PINGs of the router's legs (--relay-keep-alive-ms,
 * 10 s by default). Scaled down here: peers at 1.5 s, PINGs every 400 ms; without them the same
 * tunnel dies of idleness.
 */
t.test('an idle tunnel outlives the quinn peers\' idle timeout on the router\'s keep-alives, and dies of it without them', { skip }, async (t) => {
  const kept = await tunnel(t, '127.0.134', { idleTimeoutMs: 1500, args: ['--relay-keep-alive-ms', '400'] })
  const dropped = await tunnel(t, '127.0.135', { idleTimeoutMs: 1500, args: ['--relay-keep-alive-ms', '0'] })
  t.match(await dropped.pylon.closed(1, 10_000), { kind: 'timeout' }, 'without keep-alives the idle Pylon times out')
  await sleep(4000)
  t.notOk(kept.pylon.events.some((e) => e.ev === 'closed'), 'with them the Pylon stays connected past 2 × its idle timeout')
  t.notOk(kept.stargate.events.some((e) => e.ev === 'closed'), 'and so does the Stargate')
  const s = await kept.pylon.open(1, 'bi')
  await kept.pylon.write(1, s, 'still there')
  await kept.pylon.finish(1, s)
  t.match(await kept.pylon.recvDone(1, s), { bytes: 11, fin: true }, 'and the tunnel still echoes')
})
