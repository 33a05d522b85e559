/**
 * A tunnel's peer closes its connection after the router acknowledged everything it sent: the
 * router must deliver those bytes (and their FINs) to the other peer before it closes that leg
 * with the same code and reason. The failure mode: a quinn Stargate wrote 16 MiB, waited until
 * the router had acknowledged all of it (finish + stopped), closed its connection, and the
 * router closed the Pylon's leg at once, dropping what it still held for it: the Pylon read
 * 12.4 MiB, then "connection lost". Real quinn 0.11 peers at both ends; the reader holds its
 * streams unread until the writer has closed, so the router surely holds bytes at that moment
 * (the reader's flow-control window is far below what was written).
 *
 * The other leg is closed once it delivered everything, or after CLOSE_FLUSH_MS (10 s) at the
 * latest: a reader that never reads gets the close at that bound, with the same code and reason.
 */
import t from 'tap'
import { patternSha256, quinnPeerSkip, type QuinnPeer } from '../fixtures/quinn-peer.ts'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import type { Teardown } from '../fixtures/kube-router.ts'
import { CLOSE_FLUSH_MS } from '../../lib/tunnel/quic-port.ts'

const skip = await quinnPeerSkip(t)
t.setTimeout(120_000)
const MIB = 1 << 20
/**
 * Written to a reader that holds it unread: more than the reader's stream window (quinn: 1.25 MB),
 * so the router holds the rest, and within what the router's leg lets the writer send before the
 * reader reads (its connection window, 2 MiB to start, plus what the reader took).
 */
const BIG = 2.5 * MIB
const SMALL = MIB / 2

/** A Pylon and a Stargate on quinn 0.11 through the router; streams each opens are held unread by the other. */
async function tunnel (t: Teardown, subnet: string): Promise<{ cluster: QuicCluster, pylon: QuinnPeer, stargate: QuinnPeer, sc: number }> {
  const cluster = await QuicCluster.start(t, { pods: [], subnet })
  const hold = { accept: 'hold' } as const
  return { cluster, ...await cluster.quinnTunnel('stargate-0', `${subnet}.10`, { stargate: hold, pylon: hold }) }
}

t.test('the Stargate closes after the router acknowledged 2.5 MiB on a stream and 512 KiB on a uni stream: the Pylon reads both whole with their FINs, then the Stargate\'s close', { skip }, async (t) => {
  const { cluster, pylon, stargate, sc } = await tunnel(t, '127.0.161')
  const bi = await stargate.open(sc, 'bi')
  const uni = await stargate.open(sc, 'uni')
  await Promise.all([
    stargate.write(sc, bi, { bytes: BIG, seed: 41 }).then(async () => { await stargate.finish(sc, bi) }),
    stargate.write(sc, uni, { bytes: SMALL, seed: 42 }).then(async () => { await stargate.finish(sc, uni) }),
  ])
  // finish() returned: the router acknowledged every byte and both FINs. The Pylon read nothing yet.
  await stargate.close(sc, 0x2a, 'stargate done')
  t.match(await stargate.closed(sc), { kind: 'application', by: 'local' })
  await pylon.waitEvent('stream', { conn: 1, stream: bi })
  await pylon.waitEvent('stream', { conn: 1, stream: uni })
  await pylon.read(1, bi)
  await pylon.read(1, uni)
  t.match(await pylon.recvDone(1, bi, 30_000), { bytes: BIG, fin: true, sha256: patternSha256(41, BIG) }, 'the Pylon reads the whole stream and its FIN')
  t.match(await pylon.recvDone(1, uni, 30_000), { bytes: SMALL, fin: true, sha256: patternSha256(42, SMALL) }, 'and the whole uni stream')
  t.match(await pylon.closed(1, 30_000), { kind: 'application', by: 'peer', code: 0x2a, reason: 'stargate done' }, 'then the Stargate\'s code and reason')
  t.equal(await cluster.outcome('completed'), 1)
})

t.test('the reverse: the Pylon closes after the router acknowledged 2.5 MiB, and the Stargate reads it whole, then the Pylon\'s close', { skip }, async (t) => {
  const { pylon, stargate, sc } = await tunnel(t, '127.0.162')
  const bi = await pylon.open(1, 'bi')
  await pylon.write(1, bi, { bytes: BIG, seed: 43 })
  await pylon.finish(1, bi)
  await pylon.close(1, 0x17, 'pylon leaving')
  await stargate.waitEvent('stream', { conn: sc, stream: bi })
  await stargate.read(sc, bi)
  t.match(await stargate.recvDone(sc, bi, 30_000), { bytes: BIG, fin: true, sha256: patternSha256(43, BIG) }, 'the Stargate reads the whole stream and its FIN')
  t.match(await stargate.closed(sc, 30_000), { kind: 'application', by: 'peer', code: 0x17, reason: 'pylon leaving' }, 'then the Pylon\'s code and reason')
})

t.test(`a reader that never reads gets the close with the same code and reason after ${CLOSE_FLUSH_MS} ms`, { skip }, async (t) => {
  const { pylon, stargate, sc } = await tunnel(t, '127.0.163')
  const bi = await stargate.open(sc, 'bi')
  await stargate.write(sc, bi, { bytes: BIG, seed: 44 })
  await stargate.finish(sc, bi)
  const started = Date.now()
  await stargate.close(sc, 0x2b, 'stargate gone')
  t.match(await pylon.closed(1, CLOSE_FLUSH_MS + 20_000), { kind: 'application', by: 'peer', code: 0x2b, reason: 'stargate gone' }, 'the Stargate\'s close reaches the Pylon')
  const waited = Date.now() - started
  t.ok(waited >= CLOSE_FLUSH_MS - 500, `not before the bound, as the router still held bytes for it (${waited} ms)`)
  t.notOk(pylon.events.some((e) => e.ev === 'recv_done' && e.fin), 'the stream, never read, did not reach its end at the Pylon')
})
