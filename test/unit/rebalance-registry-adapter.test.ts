// SPEC §10, §11: replica balancing reads its load from, and moves connections through, the
// connection registry. A WebTransport kind is both transports' sessions, oldest first across
// them; a connection already draining (moved, or shut down) is neither counted nor offered; a
// move drains with the reason `rebalance`, and a move whose open work outlives the deadline is
// closed then (a stream that never ends must not keep a Pylon unreachable).
import t from 'tap'
import { ConnectionRegistry } from '../../lib/drain/connection-registry.ts'
import type { ConnectionKind, DrainableConnection } from '../../lib/drain/connection-kinds.ts'
import type { DrainReason } from '../../lib/drain/drain-reasons.ts'
import { registryLoadSource, registryMover } from '../../lib/rebalance/registry-adapter.ts'

class Fake implements DrainableConnection {
  readonly kind: ConnectionKind
  readonly openedAt: number
  readonly drains: DrainReason[] = []
  readonly aborts: DrainReason[] = []
  /** Ends the drain (the connection's open work finished and it closed). */
  finish: () => void = () => {}
  constructor (kind: ConnectionKind, openedAt: number) {
    this.kind = kind
    this.openedAt = openedAt
  }

  drain (reason: DrainReason): Promise<void> {
    this.drains.push(reason)
    return new Promise((resolve) => { this.finish = resolve })
  }

  abort (reason: DrainReason): void {
    this.aborts.push(reason)
    this.finish()
  }
}

function registryWith (...connections: Fake[]): ConnectionRegistry {
  const registry = new ConnectionRegistry()
  for (const c of connections) registry.add(c)
  return registry
}

t.test('the load counts each Pylon-facing kind, WebTransport over both transports, and no plain HTTP', async (t) => {
  const registry = registryWith(new Fake('registration', 1), new Fake('raw_quic', 2), new Fake('raw_quic', 3), new Fake('webtransport_h3', 4), new Fake('webtransport_h2', 5), new Fake('http', 6))
  t.strictSame(registryLoadSource(registry).load(), { registration: 1, raw_quic: 2, webtransport: 2 })
})

t.test('the mover offers the oldest first across both WebTransport transports, and a move drains with reason rebalance', async (t) => {
  const h2 = new Fake('webtransport_h2', 10)
  const h3old = new Fake('webtransport_h3', 5)
  const h3new = new Fake('webtransport_h3', 20)
  const registry = registryWith(h3new, h2, h3old)
  const movable = registryMover(registry, { deadlineMs: 60_000 }).movable('webtransport')
  t.strictSame(movable.map((c) => c.openedAt), [5, 10, 20])
  movable[0]?.move('below_band')
  t.strictSame(h3old.drains, ['rebalance'])
  t.ok(registry.isDraining(h3old))
})

t.test('a connection already draining is neither counted nor offered again', async (t) => {
  const moved = new Fake('raw_quic', 1)
  const staying = new Fake('raw_quic', 2)
  const registry = registryWith(moved, staying)
  registryMover(registry, { deadlineMs: 60_000 }).movable('raw_quic')[0]?.move('above_band')
  t.strictSame(registryLoadSource(registry).load(), { registration: 0, raw_quic: 1, webtransport: 0 })
  t.strictSame(registryMover(registry, { deadlineMs: 60_000 }).movable('raw_quic').map((c) => c.openedAt), [2])
  void registry.drainAll('shutdown')
  t.strictSame(registryLoadSource(registry).load(), { registration: 0, raw_quic: 0, webtransport: 0 }, 'a replica shutting down holds nothing to balance')
  t.strictSame(moved.drains, ['rebalance'], 'the moved one is not drained twice')
})

t.test('a moved connection whose open work has not ended by the deadline is closed then; one that ends in time is not', async (t) => {
  const stuck = new Fake('raw_quic', 1)
  const quick = new Fake('raw_quic', 2)
  const registry = registryWith(stuck, quick)
  for (const c of registryMover(registry, { deadlineMs: 50 }).movable('raw_quic')) c.move('above_band')
  quick.finish()
  await new Promise((resolve) => { setTimeout(resolve, 200) })
  t.strictSame(stuck.aborts, ['rebalance'], 'closed at the deadline')
  t.strictSame(quick.aborts, [], 'the one that finished is left alone')
})

t.test('an abort that throws (the connection went meanwhile) is contained', async (t) => {
  const gone = new Fake('registration', 1)
  gone.abort = () => { throw new Error('socket destroyed') }
  const registry = registryWith(gone)
  registryMover(registry, { deadlineMs: 10 }).movable('registration')[0]?.move('below_band')
  await new Promise((resolve) => { setTimeout(resolve, 100) })
  t.pass('no uncaught exception')
})
