// SPEC §10, §11: the connection registry (lib/drain/connection-registry.ts) as replica
// balancing and the shutdown use it: counts and oldest-first lists by kind (kinds may change
// while a connection lives), one drain per connection however often asked, drainAll that also
// drains connections added later and resolves once none is left, and the drained metric.
import t from 'tap'
import { Registry } from 'prom-client'
import { ConnectionRegistry } from '../../lib/drain/connection-registry.ts'
import type { ConnectionKind, DrainableConnection } from '../../lib/drain/connection-kinds.ts'
import { createDrainMetrics } from '../../lib/drain/drain-metrics.ts'
import type { DrainReason } from '../../lib/drain/drain-reasons.ts'

class Fake implements DrainableConnection {
  kind: ConnectionKind
  readonly openedAt: number
  drains: DrainReason[] = []
  aborted = 0
  release: () => void = () => {}
  #finish: (() => void) | null = null

  constructor (kind: ConnectionKind, openedAt: number) {
    this.kind = kind
    this.openedAt = openedAt
  }

  drain (reason: DrainReason): Promise<void> {
    this.drains.push(reason)
    return new Promise((resolve) => { this.#finish = resolve })
  }

  abort (): void {
    this.aborted++
    this.close()
  }

  /** Its open work ended: it closes. */
  close (): void {
    this.release()
    this.#finish?.()
  }
}

function add (registry: ConnectionRegistry, kind: ConnectionKind, openedAt: number): Fake {
  const fake = new Fake(kind, openedAt)
  fake.release = registry.add(fake)
  return fake
}

t.test('counts and lists live connections by kind, oldest first; a released one is gone', async (t) => {
  const registry = new ConnectionRegistry()
  const newer = add(registry, 'raw_quic', 300)
  const oldest = add(registry, 'raw_quic', 100)
  const middle = add(registry, 'raw_quic', 200)
  add(registry, 'registration', 50)
  t.same(registry.list('raw_quic'), [oldest, middle, newer])
  t.equal(registry.count('raw_quic'), 3)
  t.same(registry.counts(), { registration: 1, raw_quic: 3, webtransport_h3: 0, webtransport_h2: 0, http: 0 })
  middle.release()
  middle.release()
  t.same(registry.list('raw_quic'), [oldest, newer], 'released once, whatever the calls')
  t.equal(registry.size, 3)
})

t.test('a connection whose kind changes is counted under its kind of the moment', async (t) => {
  const registry = new ConnectionRegistry()
  const connection = add(registry, 'http', 1)
  connection.kind = 'registration'
  t.equal(registry.count('registration'), 1)
  t.equal(registry.count('http'), 0)
})

t.test('draining one connection twice drains it once, counts it once, and leaves it out of the lists', async (t) => {
  const metrics = createDrainMetrics(new Registry())
  const registry = new ConnectionRegistry({ metrics })
  const a = add(registry, 'raw_quic', 1)
  const b = add(registry, 'raw_quic', 2)
  const first = registry.drain(a, 'shutdown')
  const second = registry.drain(a, 'shutdown')
  t.equal(first, second, 'the same promise')
  t.same(a.drains, ['shutdown'])
  t.ok(registry.isDraining(a))
  t.same(registry.list('raw_quic'), [b], 'a connection already draining is not offered again')
  t.equal(registry.count('raw_quic'), 2, 'but is counted until it closed')
  const drained = (await metrics.drained.get()).values.find((v) => v.labels.kind === 'raw_quic' && v.labels.reason === 'shutdown')
  t.equal(drained?.value, 1)
  a.close()
  await first
  t.equal(registry.count('raw_quic'), 1)
})

t.test('drainAll drains every connection and those added later, and resolves once none is left', async (t) => {
  const registry = new ConnectionRegistry()
  const a = add(registry, 'registration', 1)
  const b = add(registry, 'raw_quic', 2)
  let done = false
  const all = registry.drainAll('shutdown').then(() => { done = true })
  t.same([a.drains, b.drains], [['shutdown'], ['shutdown']])
  const late = add(registry, 'http', 3)
  t.same(late.drains, ['shutdown'], 'a connection added while draining is drained at once')
  a.close()
  b.close()
  await new Promise((resolve) => { setImmediate(resolve) })
  t.equal(done, false, 'one is still open')
  late.close()
  await all
  t.equal(registry.size, 0)
})

t.test('abortAll closes what is left; whenEmpty resolves at once on an empty registry', async (t) => {
  const registry = new ConnectionRegistry()
  await registry.whenEmpty()
  const a = add(registry, 'webtransport_h3', 1)
  void registry.drainAll('shutdown')
  registry.abortAll('shutdown')
  t.equal(a.aborted, 1)
  await registry.whenEmpty()
  t.equal(registry.size, 0)
})

t.test('a drain that throws counts as over, not as a crash', async (t) => {
  const registry = new ConnectionRegistry()
  const broken: DrainableConnection = { kind: 'http', openedAt: 0, drain () { throw new Error('gone') }, abort () {} }
  const release = registry.add(broken)
  await registry.drain(broken, 'shutdown')
  release()
  t.equal(registry.size, 0)
})

t.test('connections_open reports the counts by kind at scrape time', async (t) => {
  const metrics = createDrainMetrics(new Registry())
  const registry = new ConnectionRegistry({ metrics })
  add(registry, 'raw_quic', 1)
  add(registry, 'raw_quic', 2)
  const values = (await metrics.open.get()).values
  t.equal(values.find((v) => v.labels.kind === 'raw_quic')?.value, 2)
  t.equal(values.find((v) => v.labels.kind === 'webtransport_h2')?.value, 0)
})
