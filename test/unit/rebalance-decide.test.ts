// SPEC §10, replica balancing: the decision of how many Pylon connections this replica moves in
// one interval, as a table. The band is mean ± max(tolerance × mean, 1) per kind; moves start
// once some replica (above the band, or below it) has been outside for two intervals in a row;
// only replicas above the mean move, floor(load - mean) at most, capped; nothing moves while a
// peer's load is unknown or stale, nor in the first interval after start or a peer set change;
// a balanced state never moves.
import t from 'tap'
import { decide, moveCap, NO_DWELL, type DecideInput, type Dwell, type PeerFreshness, type RoundResult } from '../../lib/rebalance/decide.ts'
import { ZERO_LOAD, type PylonLoad } from '../../lib/rebalance/load.ts'

/** Raw QUIC tunnels only (the other kinds at 0), the usual shape of a row. */
function tunnels (n: number): PylonLoad {
  return { ...ZERO_LOAD, raw_quic: n }
}

function peers (...loads: ReadonlyArray<PylonLoad | number | PeerFreshness>): DecideInput['peers'] {
  return loads.map((load, i) => typeof load === 'string'
    ? { id: `routers/p${i}`, freshness: load, load: load === 'unknown' ? null : tunnels(5) }
    : { id: `routers/p${i}`, freshness: 'known' as const, load: typeof load === 'number' ? tunnels(load) : load })
}

function dwell (rawQuic: number): Dwell {
  return { ...NO_DWELL, raw_quic: rawQuic }
}

interface Row {
  readonly why: string
  readonly own: PylonLoad
  readonly peers: DecideInput['peers']
  readonly tolerance?: number
  readonly dwell?: Dwell
  readonly settling?: boolean
  readonly cap?: number
  readonly moves: PylonLoad
  readonly nextDwell: Dwell
  readonly result: RoundResult
}

const ROWS: readonly Row[] = [
  // The band and the dwell
  { why: 'even load is balanced', own: tunnels(10), peers: peers(10, 10), moves: ZERO_LOAD, nextDwell: NO_DWELL, result: 'balanced' },
  { why: 'inside the band (8..12 around 10) is balanced', own: tunnels(12), peers: peers(8, 10), moves: ZERO_LOAD, nextDwell: NO_DWELL, result: 'balanced' },
  { why: 'above the band, first interval: waits', own: tunnels(16), peers: peers(7, 7), moves: ZERO_LOAD, nextDwell: dwell(1), result: 'waiting' },
  { why: 'above the band, second interval in a row: moves its excess over the mean (16 - 10)', own: tunnels(16), peers: peers(7, 7), dwell: dwell(1), moves: tunnels(6), nextDwell: NO_DWELL, result: 'moving' },
  { why: 'back inside the band before the second interval: the dwell starts again', own: tunnels(12), peers: peers(9, 9), dwell: dwell(1), moves: ZERO_LOAD, nextDwell: NO_DWELL, result: 'balanced' },
  { why: 'a dwell carried past the trigger still moves (a missed interval)', own: tunnels(16), peers: peers(7, 7), dwell: dwell(5), moves: tunnels(6), nextDwell: NO_DWELL, result: 'moving' },
  // Two-sided: a replica below the band starts the moves too
  { why: '12/12/6: nobody above the band, one below it; each 12 moves 2 (to the mean, 10)', own: tunnels(12), peers: peers(12, 6), dwell: dwell(1), moves: tunnels(2), nextDwell: NO_DWELL, result: 'moving' },
  { why: '12/12/6 seen from the starved replica: it moves nothing, the others do', own: tunnels(6), peers: peers(12, 12), dwell: dwell(1), moves: ZERO_LOAD, nextDwell: NO_DWELL, result: 'others_move' },
  { why: '12/12/6, first interval below: waits', own: tunnels(12), peers: peers(12, 6), moves: ZERO_LOAD, nextDwell: dwell(1), result: 'waiting' },
  { why: 'a new replica at 0: the full one moves down to the mean', own: tunnels(30), peers: peers(0, 0), dwell: dwell(1), cap: 100, moves: tunnels(20), nextDwell: NO_DWELL, result: 'moving' },
  { why: 'within the band but above the mean while another is below: moves its excess', own: tunnels(11), peers: peers(12, 7), dwell: dwell(1), moves: tunnels(1), nextDwell: NO_DWELL, result: 'moving' },
  // Never below the mean
  { why: 'a fractional mean: floor of the excess (14 - 11.33 = 2.67 -> 2)', own: tunnels(14), peers: peers(14, 6), dwell: dwell(1), moves: tunnels(2), nextDwell: NO_DWELL, result: 'moving' },
  { why: 'at the mean: nothing to move though the kind triggered', own: tunnels(10), peers: peers(16, 4), dwell: dwell(1), moves: ZERO_LOAD, nextDwell: NO_DWELL, result: 'others_move' },
  { why: 'less than one connection above the mean: nothing (10 vs 9.67)', own: tunnels(10), peers: peers(15, 4), dwell: dwell(1), moves: ZERO_LOAD, nextDwell: NO_DWELL, result: 'others_move' },
  // The cap
  { why: 'the cap limits one interval\'s moves', own: tunnels(40), peers: peers(10, 10), dwell: dwell(1), cap: 3, moves: tunnels(3), nextDwell: NO_DWELL, result: 'moving' },
  { why: 'the cap does not raise moves above the excess', own: tunnels(13), peers: peers(10, 4), dwell: dwell(1), cap: 50, moves: tunnels(4), nextDwell: NO_DWELL, result: 'moving' },
  { why: 'cap 0 is a tenth of own connections, rounded up (40 -> 4)', own: tunnels(40), peers: peers(10, 10), dwell: dwell(1), cap: 0, moves: tunnels(4), nextDwell: NO_DWELL, result: 'moving' },
  { why: 'cap 0 moves at least one (3 -> 1)', own: tunnels(3), peers: peers(0, 0), dwell: dwell(1), cap: 0, moves: tunnels(1), nextDwell: NO_DWELL, result: 'moving' },
  // Tolerance
  { why: 'a wide tolerance (0.5: 5..15) holds 14/10/6', own: tunnels(14), peers: peers(10, 6), tolerance: 0.5, dwell: dwell(1), moves: ZERO_LOAD, nextDwell: NO_DWELL, result: 'balanced' },
  { why: 'a narrow tolerance (0.1: 9..11) does not hold it', own: tunnels(14), peers: peers(10, 6), tolerance: 0.1, dwell: dwell(1), moves: tunnels(4), nextDwell: NO_DWELL, result: 'moving' },
  { why: 'the band edge is inside: 12 with band 8..12 is not above', own: tunnels(12), peers: peers(12, 6), tolerance: 0.2, moves: ZERO_LOAD, nextDwell: dwell(1), result: 'waiting' },
  // Small counts: never chase ±1
  { why: '1/1/0 (mean 0.67) is as even as whole numbers get', own: tunnels(1), peers: peers(1, 0), dwell: dwell(7), moves: ZERO_LOAD, nextDwell: NO_DWELL, result: 'balanced' },
  { why: '1/0/0 (mean 0.33) is balanced: the half-width is one connection at least', own: tunnels(1), peers: peers(0, 0), moves: ZERO_LOAD, nextDwell: NO_DWELL, result: 'balanced' },
  { why: '2/0/0 (mean 0.67, band up to 1.67) moves one', own: tunnels(2), peers: peers(0, 0), dwell: dwell(1), moves: tunnels(1), nextDwell: NO_DWELL, result: 'moving' },
  { why: '4/3/3 with a tiny tolerance: still within one connection', own: tunnels(4), peers: peers(3, 3), tolerance: 0.01, dwell: dwell(3), moves: ZERO_LOAD, nextDwell: NO_DWELL, result: 'balanced' },
  { why: 'nothing anywhere is balanced', own: ZERO_LOAD, peers: peers(0, 0), moves: ZERO_LOAD, nextDwell: NO_DWELL, result: 'balanced' },
  { why: 'alone (no peers): the mean is its own load', own: tunnels(50), peers: [], dwell: dwell(1), moves: ZERO_LOAD, nextDwell: NO_DWELL, result: 'balanced' },
  // Fail safe
  { why: 'a peer whose load is unknown: nothing moves, the dwell starts again', own: tunnels(16), peers: peers(7, 'unknown'), dwell: dwell(1), moves: ZERO_LOAD, nextDwell: NO_DWELL, result: 'peer_load_unknown' },
  { why: 'a peer whose load is stale: nothing moves either', own: tunnels(16), peers: peers(7, 'stale'), dwell: dwell(1), moves: ZERO_LOAD, nextDwell: NO_DWELL, result: 'peer_load_unknown' },
  { why: 'the first interval after start or a peer set change: nothing moves', own: tunnels(16), peers: peers(7, 7), dwell: dwell(1), settling: true, moves: ZERO_LOAD, nextDwell: NO_DWELL, result: 'settling' },
  { why: 'settling wins over an unknown peer in the result', own: tunnels(16), peers: peers('unknown'), settling: true, moves: ZERO_LOAD, nextDwell: NO_DWELL, result: 'settling' },
  // Kinds are independent
  {
    why: 'each kind has its own band, dwell and moves',
    own: { registration: 20, raw_quic: 10, webtransport: 0 },
    peers: peers({ registration: 5, raw_quic: 10, webtransport: 0 }, { registration: 5, raw_quic: 10, webtransport: 0 }),
    dwell: { registration: 1, raw_quic: 4, webtransport: 0 },
    moves: { registration: 10, raw_quic: 0, webtransport: 0 },
    nextDwell: NO_DWELL,
    result: 'moving',
  },
  {
    why: 'one kind waits while another is balanced',
    own: { registration: 20, raw_quic: 10, webtransport: 3 },
    peers: peers({ registration: 5, raw_quic: 10, webtransport: 3 }, { registration: 5, raw_quic: 10, webtransport: 3 }),
    moves: ZERO_LOAD,
    nextDwell: { registration: 1, raw_quic: 0, webtransport: 0 },
    result: 'waiting',
  },
]

for (const row of ROWS) {
  t.test(row.why, async (t) => {
    const decision = decide({
      own: row.own,
      peers: row.peers,
      tolerance: row.tolerance ?? 0.2,
      dwell: row.dwell ?? NO_DWELL,
      settling: row.settling ?? false,
      maxMovesPerInterval: row.cap ?? 100,
    })
    t.strictSame(decision.moves, row.moves, 'moves')
    t.strictSame(decision.dwell, row.nextDwell, 'next dwell')
    t.equal(decision.result, row.result, 'result')
  })
}

t.test('the trigger reason says which side of the band started the moves', async (t) => {
  const above = decide({ own: tunnels(16), peers: peers(7, 7), tolerance: 0.2, dwell: dwell(1), settling: false, maxMovesPerInterval: 0 })
  t.equal(above.kinds.raw_quic.reason, 'above_band')
  t.equal(above.kinds.raw_quic.above, 1)
  const below = decide({ own: tunnels(12), peers: peers(12, 6), tolerance: 0.2, dwell: dwell(1), settling: false, maxMovesPerInterval: 0 })
  t.equal(below.kinds.raw_quic.reason, 'below_band')
  t.same([below.kinds.raw_quic.low, below.kinds.raw_quic.mean, below.kinds.raw_quic.high, below.kinds.raw_quic.below], [8, 10, 12, 1])
  const waiting = decide({ own: tunnels(12), peers: peers(12, 6), tolerance: 0.2, dwell: NO_DWELL, settling: false, maxMovesPerInterval: 0 })
  t.equal(waiting.kinds.raw_quic.reason, null, 'no reason until the kind triggers')
})

t.test('the mean counts this replica and the peers whose load is known', async (t) => {
  const decision = decide({ own: tunnels(9), peers: peers(3, 'stale', 0), tolerance: 0.2, dwell: NO_DWELL, settling: false, maxMovesPerInterval: 0 })
  t.equal(decision.kinds.raw_quic.mean, 4, '(9 + 3 + 0) / 3: the stale peer is left out of the figure')
})

t.test('moveCap: a fixed cap, or a tenth of own connections (at least one)', async (t) => {
  t.same([moveCap(1000, 5), moveCap(0, 5), moveCap(1000, 0), moveCap(0, 0), moveCap(11, 0)], [5, 5, 100, 1, 2])
})

t.test('a balanced state stays balanced: every even placement of 0..200 connections over 1..6 replicas moves nothing', async (t) => {
  let checked = 0
  for (let replicas = 1; replicas <= 6; replicas++) {
    for (let total = 0; total <= 200; total++) {
      // floor or ceil of the mean on every replica: as even as whole numbers allow.
      const loads = Array.from({ length: replicas }, (_, i) => Math.floor(total / replicas) + (i < total % replicas ? 1 : 0))
      for (let self = 0; self < replicas; self++) {
        const others = loads.filter((_, i) => i !== self)
        const decision = decide({ own: tunnels(loads[self] as number), peers: peers(...others), tolerance: 0.2, dwell: dwell(9), settling: false, maxMovesPerInterval: 0 })
        if (decision.result !== 'balanced') t.fail(`${loads.join('/')} seen from replica ${self}: ${decision.result}`)
        checked++
      }
    }
  }
  t.equal(checked, 4221, 'every replica of every placement checked')
})
