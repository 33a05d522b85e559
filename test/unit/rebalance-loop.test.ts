// SPEC §10, replica balancing: the loop around decide(), with fakes for the clock, the timers,
// the peers' /debug/load answers, this replica's load and the connections. What a user sees:
// which connections are asked to move (oldest first, at most the decided number), the metrics
// (moves by kind and reason, rounds by result, the peer mean, peer read errors) and the one log
// line of a round that moved something. Nothing moves in the first round, after a peer set
// change, or while a peer's load is unknown, stale or draining.
import t, { type Test } from 'tap'
import { Registry } from 'prom-client'
import { PeerSet, type Peer } from '../../lib/discovery/peers.ts'
import { createRebalanceMetrics, type RebalanceMetrics } from '../../lib/rebalance/rebalance-metrics.ts'
import { Rebalancer, nextPeerLoadState, type ConnectionMover, type MovableConnection, type Timers } from '../../lib/rebalance/rebalancer.ts'
import { ZERO_LOAD, type PylonLoad, type PylonLoadKind } from '../../lib/rebalance/load.ts'
import type { PeerLoadResult } from '../../lib/rebalance/load-report.ts'
import type { MoveReason } from '../../lib/rebalance/decide.ts'
import { createLogSink, type LogSink } from '../fixtures/log-sink.ts'

const A: Peer = { id: 'routers/a', address: '10.0.0.1', port: 8080 }
const B: Peer = { id: 'routers/b', address: '10.0.0.2', port: 8080 }

function tunnels (n: number): PylonLoad {
  return { ...ZERO_LOAD, raw_quic: n }
}

/** A connection that records the moves asked of it. */
class FakeConnection implements MovableConnection {
  readonly openedAt: number
  readonly moves: MoveReason[] = []
  constructor (openedAt: number) { this.openedAt = openedAt }
  move (reason: MoveReason): void { this.moves.push(reason) }
}

/** This replica's connections of one kind: moved ones leave the load and the movable list. */
class FakeConnections implements ConnectionMover {
  readonly all: FakeConnection[]
  constructor (count: number) {
    // Opened at 1000, 1001, ... but listed out of order: the mover sorts, as the registry does.
    this.all = Array.from({ length: count }, (_, i) => new FakeConnection(1000 + i)).reverse()
  }

  movable (kind: PylonLoadKind): readonly MovableConnection[] {
    return kind === 'raw_quic' ? this.all.filter((c) => c.moves.length === 0).sort((a, b) => a.openedAt - b.openedAt) : []
  }

  load (): PylonLoad {
    return tunnels(this.all.filter((c) => c.moves.length === 0).length)
  }

  moved (): number[] {
    return this.all.filter((c) => c.moves.length > 0).map((c) => c.openedAt).sort((a, b) => a - b)
  }
}

interface Harness {
  readonly peers: PeerSet
  readonly own: FakeConnections
  readonly answers: Map<string, PeerLoadResult | Error>
  readonly metrics: RebalanceMetrics
  readonly registry: Registry
  readonly sink: LogSink
  readonly rebalancer: Rebalancer
  readonly clock: { now: number }
}

function ok (connections: PylonLoad, draining = false): PeerLoadResult {
  return { ok: true, load: { draining, connections } }
}

function build (t: Test, options: { own: number, peers: Record<string, PeerLoadResult | Error>, cap?: number, timers?: Timers }): Harness {
  const peers = new PeerSet({ self: { address: null, id: null } })
  peers.replace([A, B].filter((p) => p.id in options.peers))
  const own = new FakeConnections(options.own)
  const answers = new Map<string, PeerLoadResult | Error>(Object.entries(options.peers))
  const registry = new Registry()
  const metrics = createRebalanceMetrics(registry)
  const sink = createLogSink()
  const clock = { now: Date.parse('2025-01-07T10:00:00.000Z') }
  const rebalancer = new Rebalancer({
    peers,
    load: own,
    fetchLoad: async (peer) => {
      const answer = answers.get(peer.id)
      if (answer === undefined) return { ok: false, reason: 'unreachable', message: 'no answer configured' }
      if (answer instanceof Error) throw answer
      return answer
    },
    mover: own,
    tolerance: 0.2,
    intervalMs: 5000,
    maxMovesPerInterval: options.cap ?? 100,
    metrics,
    logger: sink.logger,
    now: () => clock.now,
    ...(options.timers === undefined ? {} : { timers: options.timers }),
  })
  t.teardown(() => rebalancer.close())
  return { peers, own, answers, metrics, registry, sink, rebalancer, clock }
}

async function value (registry: Registry, name: string, labels: Record<string, string>): Promise<number> {
  const metric = await registry.getSingleMetric(`stargate_k8s_router_${name}`)?.get()
  const found = metric?.values.find((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l))
  return found?.value ?? Number.NaN
}

t.test('a replica above the band moves its excess over the mean, oldest first, on the third round (settle, then two outside)', async (t) => {
  const h = build(t, { own: 30, peers: { [A.id]: ok(tunnels(0)), [B.id]: ok(tunnels(0)) } })
  const results = []
  for (let i = 0; i < 3; i++) results.push((await h.rebalancer.runRound())?.result)
  t.strictSame(results, ['settling', 'waiting', 'moving'])
  t.strictSame(h.own.moved(), Array.from({ length: 20 }, (_, i) => 1000 + i), 'the 20 oldest (30 - mean 10), in age order')
  t.ok(h.own.all.filter((c) => c.moves.length > 0).every((c) => c.moves.length === 1 && c.moves[0] === 'above_band'), 'each asked once, reason above_band')
  t.equal(await value(h.registry, 'rebalance_moves_total', { kind: 'raw_quic', reason: 'above_band' }), 20)
  t.equal(await value(h.registry, 'rebalance_rounds_total', { result: 'settling' }), 1)
  t.equal(await value(h.registry, 'rebalance_rounds_total', { result: 'waiting' }), 1)
  t.equal(await value(h.registry, 'rebalance_rounds_total', { result: 'moving' }), 1)
  t.equal(await value(h.registry, 'rebalance_peer_mean', { kind: 'raw_quic' }), 10)
  const lines = h.sink.lines().filter((l) => l.msg === 'rebalancing: moving pylon connections to even out the replicas')
  t.equal(lines.length, 1, 'one log line, for the round that moved')
  t.strictSame(lines[0]?.kinds, { raw_quic: { moved: 20, own: 30, mean: 10, band: [8, 12], reason: 'above_band' } })
})

t.test('after moving, the dwell starts again: the next moves wait two more rounds', async (t) => {
  const h = build(t, { own: 30, peers: { [A.id]: ok(tunnels(0)), [B.id]: ok(tunnels(0)) }, cap: 5 })
  const results = []
  for (let i = 0; i < 7; i++) results.push((await h.rebalancer.runRound())?.result)
  t.strictSame(results, ['settling', 'waiting', 'moving', 'waiting', 'moving', 'waiting', 'moving'])
  t.equal(h.own.moved().length, 15, 'the cap (5) each time')
  t.equal(h.sink.lines().filter((l) => l.msg === 'rebalancing: moving pylon connections to even out the replicas').length, 3)
})

t.test('12/12/6: the replicas at 12 move 2 each because one is below the band (reason below_band)', async (t) => {
  const h = build(t, { own: 12, peers: { [A.id]: ok(tunnels(12)), [B.id]: ok(tunnels(6)) } })
  for (let i = 0; i < 3; i++) await h.rebalancer.runRound()
  t.equal(h.own.moved().length, 2)
  t.equal(await value(h.registry, 'rebalance_moves_total', { kind: 'raw_quic', reason: 'below_band' }), 2)
  t.equal(await value(h.registry, 'rebalance_moves_total', { kind: 'raw_quic', reason: 'above_band' }), 0)
})

t.test('a balanced fleet never moves, round after round', async (t) => {
  const h = build(t, { own: 10, peers: { [A.id]: ok(tunnels(11)), [B.id]: ok(tunnels(9)) } })
  for (let i = 0; i < 20; i++) await h.rebalancer.runRound()
  t.strictSame(h.own.moved(), [])
  t.equal(await value(h.registry, 'rebalance_rounds_total', { result: 'balanced' }), 19)
  t.equal(h.sink.lines().filter((l) => String(l.msg).startsWith('rebalancing: moving')).length, 0, 'no log line')
})

t.test('a peer that cannot be read stops every move (stale after a success, unknown before), counted and logged once per streak', async (t) => {
  const h = build(t, { own: 30, peers: { [A.id]: ok(tunnels(0)), [B.id]: ok(tunnels(0)) } })
  await h.rebalancer.runRound()
  await h.rebalancer.runRound()
  h.answers.set(B.id, { ok: false, reason: 'timeout', message: 'no answer within 2000 ms' })
  const blocked = []
  for (let i = 0; i < 3; i++) blocked.push(await h.rebalancer.runRound())
  t.strictSame(blocked.map((r) => r?.result), ['peer_load_unknown', 'peer_load_unknown', 'peer_load_unknown'])
  t.strictSame(h.own.moved(), [], 'nothing moved')
  t.equal(blocked[0]?.peers.find((p) => p.id === B.id)?.freshness, 'stale')
  t.equal(blocked[0]?.peers.find((p) => p.id === B.id)?.lastError?.reason, 'timeout')
  t.equal(await value(h.registry, 'rebalance_peer_load_errors_total', { reason: 'timeout' }), 3)
  t.equal(h.sink.lines().filter((l) => l.msg === 'rebalancing: cannot read a peer\'s load; nothing moves until it can').length, 1, 'logged once')
  h.answers.set(B.id, ok(tunnels(0)))
  const after = []
  for (let i = 0; i < 2; i++) after.push((await h.rebalancer.runRound())?.result)
  t.strictSame(after, ['waiting', 'moving'], 'two fresh rounds outside the band before moving again')
  t.ok(h.sink.lines().some((l) => l.msg === 'rebalancing: peer load readable again' && l.failedReads === 3))
})

t.test('a fetch that throws counts as unreachable and blocks moves', async (t) => {
  const h = build(t, { own: 30, peers: { [A.id]: ok(tunnels(0)), [B.id]: new Error('boom') } })
  const results = []
  for (let i = 0; i < 3; i++) results.push(await h.rebalancer.runRound())
  t.strictSame(results.map((r) => r?.result), ['settling', 'peer_load_unknown', 'peer_load_unknown'])
  t.equal(results[2]?.peers.find((p) => p.id === B.id)?.freshness, 'unknown', 'never read: unknown')
  t.equal(await value(h.registry, 'rebalance_peer_load_errors_total', { reason: 'unreachable' }), 3)
})

t.test('a peer that is shutting down (draining) blocks moves: its load is leaving', async (t) => {
  const h = build(t, { own: 30, peers: { [A.id]: ok(tunnels(0)), [B.id]: ok(tunnels(0), true) } })
  const results = []
  for (let i = 0; i < 4; i++) results.push(await h.rebalancer.runRound())
  t.strictSame(results.map((r) => r?.result), ['settling', 'peer_load_unknown', 'peer_load_unknown', 'peer_load_unknown'])
  t.equal(results[3]?.peers.find((p) => p.id === B.id)?.draining, true)
  t.strictSame(h.own.moved(), [])
})

t.test('a peer set change settles one round and restarts the dwell', async (t) => {
  const h = build(t, { own: 30, peers: { [A.id]: ok(tunnels(0)) } })
  t.equal((await h.rebalancer.runRound())?.result, 'settling')
  t.equal((await h.rebalancer.runRound())?.result, 'waiting')
  h.answers.set(B.id, ok(tunnels(0)))
  h.peers.replace([A, B])
  const results = []
  for (let i = 0; i < 3; i++) results.push((await h.rebalancer.runRound())?.result)
  t.strictSame(results, ['settling', 'waiting', 'moving'])
  t.equal(h.own.moved().length, 20, 'to the mean of three replicas')
  h.peers.replace([A])
  t.equal((await h.rebalancer.runRound())?.result, 'settling', 'a peer leaving settles too')
  h.peers.replace([A, { ...B, address: '10.0.0.9' }])
  t.equal((await h.rebalancer.runRound())?.result, 'settling', 'and so does one joining')
  h.peers.replace([A, { ...B, address: '10.0.0.10' }])
  t.equal((await h.rebalancer.runRound())?.result, 'settling', 'and one moving to a new address')
})

t.test('a peer set change while the round reads the peers makes that round settle', async (t) => {
  const peers = new PeerSet({ self: { address: null, id: null } })
  peers.replace([A])
  const own = new FakeConnections(30)
  let changeDuringRead = false
  const rebalancer = new Rebalancer({
    peers,
    load: own,
    fetchLoad: async () => {
      if (changeDuringRead) peers.replace([A, B])
      return ok(tunnels(0))
    },
    mover: own,
    tolerance: 0.2,
    intervalMs: 5000,
    maxMovesPerInterval: 100,
    metrics: createRebalanceMetrics(new Registry()),
    logger: createLogSink().logger,
  })
  t.teardown(() => rebalancer.close())
  await rebalancer.runRound()
  t.equal((await rebalancer.runRound())?.result, 'waiting')
  changeDuringRead = true
  t.equal((await rebalancer.runRound())?.result, 'settling')
  t.strictSame(own.moved(), [])
})

t.test('a mover whose connection throws does not stop the round; the others still move', async (t) => {
  const h = build(t, { own: 30, peers: { [A.id]: ok(tunnels(0)), [B.id]: ok(tunnels(0)) }, cap: 3 })
  const broken = h.own.all.find((c) => c.openedAt === 1000) as FakeConnection
  broken.move = () => { throw new Error('session destroyed') }
  for (let i = 0; i < 3; i++) await h.rebalancer.runRound()
  t.strictSame(h.own.moved(), [1001, 1002, 1003], 'the next oldest instead')
  t.equal(await value(h.registry, 'rebalance_moves_total', { kind: 'raw_quic', reason: 'above_band' }), 3)
  t.ok(h.sink.lines().some((l) => l.msg === 'rebalancing: a connection could not be moved'))
})

t.test('fewer movable connections than decided: moves what there is', async (t) => {
  const h = build(t, { own: 30, peers: { [A.id]: ok(tunnels(0)), [B.id]: ok(tunnels(0)) } })
  // 27 of the 30 are already on their way out (another round's moves): 3 left to ask.
  for (const c of h.own.all.slice(0, 27)) c.moves.push('above_band')
  const load = h.own.load
  h.own.load = () => tunnels(30)
  for (let i = 0; i < 3; i++) await h.rebalancer.runRound()
  h.own.load = load
  t.equal(h.own.moved().length, 30)
  t.equal(await value(h.registry, 'rebalance_moves_total', { kind: 'raw_quic', reason: 'above_band' }), 3)
})

t.test('report() shows the settings and the last round for /debug/load', async (t) => {
  const h = build(t, { own: 12, peers: { [A.id]: ok(tunnels(12)), [B.id]: ok(tunnels(6)) } })
  t.equal(h.rebalancer.report().lastRound, null, 'before any round')
  await h.rebalancer.runRound()
  h.clock.now += 5000
  await h.rebalancer.runRound()
  const report = h.rebalancer.report()
  t.equal(report.intervalMs, 5000)
  t.equal(report.tolerance, 0.2)
  t.equal(report.lastRound?.at, '2025-01-07T10:00:05.000Z')
  t.equal(report.lastRound?.result, 'waiting')
  t.strictSame(report.lastRound?.dwell, { registration: 0, raw_quic: 1, webtransport: 0 })
  t.strictSame(report.lastRound?.peers.map((p) => [p.id, p.freshness, p.connections?.raw_quic]), [[A.id, 'known', 12], [B.id, 'known', 6]])
})

t.test('start() runs the first round one interval later, then one every interval; close() stops it', async (t) => {
  const pending: Array<{ callback: () => void, ms: number }> = []
  const timers: Timers = {
    setTimeout: (callback, ms) => { const entry = { callback, ms }; pending.push(entry); return entry },
    clearTimeout: (handle) => { const i = pending.indexOf(handle as { callback: () => void, ms: number }); if (i >= 0) pending.splice(i, 1) },
  }
  const h = build(t, { own: 10, peers: { [A.id]: ok(tunnels(10)) }, timers })
  h.rebalancer.start()
  h.rebalancer.start()
  t.strictSame(pending.map((p) => p.ms), [5000], 'one timer, an interval away')
  for (let i = 0; i < 3; i++) {
    const next = pending.shift()
    next?.callback()
    await new Promise((resolve) => setImmediate(resolve))
    await new Promise((resolve) => setImmediate(resolve))
  }
  t.equal(await value(h.registry, 'rebalance_rounds_total', { result: 'settling' }), 1)
  t.equal(await value(h.registry, 'rebalance_rounds_total', { result: 'balanced' }), 2)
  t.equal(pending.length, 1, 'the next round is scheduled')
  await h.rebalancer.close()
  t.equal(pending.length, 0, 'close() cancels it')
  t.equal(await h.rebalancer.runRound(), null, 'no round after close')
})

t.test('nextPeerLoadState: known on success, stale after a failure that follows one, unknown before any', async (t) => {
  const fail: PeerLoadResult = { ok: false, reason: 'http_status', message: 'HTTP 404 from /debug/load' }
  const first = nextPeerLoadState({ load: null, freshness: 'unknown', draining: false, readAt: null, lastError: null, consecutiveErrors: 0 }, fail, 1)
  t.equal(first.freshness, 'unknown')
  const good = nextPeerLoadState(first, ok(tunnels(3)), 2)
  t.strictSame([good.freshness, good.consecutiveErrors, good.readAt, good.load?.raw_quic], ['known', 0, 2, 3])
  const stale = nextPeerLoadState(good, fail, 3)
  t.strictSame([stale.freshness, stale.consecutiveErrors, stale.load?.raw_quic, stale.lastError?.at], ['stale', 1, 3, 3])
})
