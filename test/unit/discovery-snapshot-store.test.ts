// SPEC §3 rule 6: snapshot states, sorted array + Map, generation, digest, publish only on
// change; and the reader contract (current state at once, then every change, never mutated).
import t from 'tap'
import { setImmediate as nextMacrotask } from 'node:timers/promises'
import { SnapshotStore } from '../../lib/discovery/snapshot-store.ts'
import { presentTarget, type PodTarget, type TargetSnapshot } from '../../lib/discovery/types.ts'

function target (identity: string, extra: Partial<PodTarget> = {}): PodTarget {
  const address = extra.address ?? '10.0.0.1'
  return {
    identity,
    namespace: 'stargate',
    address,
    host: address.includes(':') ? `[${address}]` : address,
    grpcPort: 50051,
    quicPort: 50052,
    httpPort: 8000,
    nodeName: 'node-a',
    zone: 'zone-1',
    serving: true,
    ...extra,
  }
}

function stageAll (store: SnapshotStore, targets: readonly PodTarget[]): void {
  for (const x of targets) store.stage(x.identity, x)
}

function ids (snapshot: TargetSnapshot): string[] {
  return snapshot.targets.map((x) => x.identity)
}

t.test('a new store is uninitialized: generation 0, empty digest, no targets', async (t) => {
  const store = new SnapshotStore()
  const s = store.current()
  t.equal(s.initialized, false)
  t.equal(s.generation, 0)
  t.equal(s.digest, '')
  t.strictSame(s.targets, [])
  t.equal(s.byIdentity.size, 0)
})

t.test('staged targets are not published until the source marks the view complete', async (t) => {
  const store = new SnapshotStore()
  const seen: TargetSnapshot[] = []
  store.subscribe((s) => { seen.push(s) })
  stageAll(store, [target('stargate-1'), target('stargate-0')])
  t.equal(store.flush(), false)
  await nextMacrotask()
  t.equal(store.current().initialized, false)
  t.equal(seen.length, 1, 'only the initial call with the uninitialized snapshot')

  store.markInitialized()
  await nextMacrotask()
  const s = store.current()
  t.equal(s.initialized, true)
  t.equal(s.generation, 1)
  t.strictSame(ids(s), ['stargate-0', 'stargate-1'])
  t.equal(seen.length, 2)
  t.equal(seen[1], s)
})

t.test('an empty complete view publishes an initialized empty snapshot', async (t) => {
  const store = new SnapshotStore()
  store.markInitialized()
  await nextMacrotask()
  const s = store.current()
  t.equal(s.initialized, true)
  t.equal(s.generation, 1)
  t.equal(s.digest, '0'.repeat(32))
  t.strictSame(s.targets, [])
})

t.test('marking an initialized store initialized again publishes nothing', async (t) => {
  const store = new SnapshotStore()
  store.markInitialized()
  store.flush()
  store.markInitialized()
  t.equal(store.flush(), false)
  t.equal(store.current().generation, 1)
})

t.test('changes staged in one tick are published as one snapshot at the end of the tick', async (t) => {
  const store = new SnapshotStore()
  store.markInitialized()
  await nextMacrotask()
  const generations: number[] = []
  store.subscribe((s) => { generations.push(s.generation) })
  stageAll(store, [target('c'), target('a'), target('b')])
  store.stage('b', null)
  t.strictSame(generations, [1], 'nothing published synchronously')
  await nextMacrotask()
  t.strictSame(generations, [1, 2])
  t.strictSame(ids(store.current()), ['a', 'c'])
})

t.test('the sorted array and the Map hold the same targets', async (t) => {
  const store = new SnapshotStore()
  store.markInitialized()
  stageAll(store, ['stargate-10', 'stargate-2', 'stargate-1', 'stargate-7d9f8b6c4-x2x7q', 'a'].map((id) => target(id)))
  store.flush()
  const s = store.current()
  t.strictSame(ids(s), ['a', 'stargate-1', 'stargate-10', 'stargate-2', 'stargate-7d9f8b6c4-x2x7q'])
  t.strictSame([...s.byIdentity.keys()].sort(), ids(s))
  for (const x of s.targets) t.equal(s.byIdentity.get(x.identity), x)
})

t.test('generation increases by exactly one per published change', async (t) => {
  const store = new SnapshotStore()
  const generations: number[] = []
  store.subscribe((s) => { generations.push(s.generation) })
  store.markInitialized()
  store.flush()
  store.stage('a', target('a'))
  store.flush()
  store.stage('b', target('b'))
  store.flush()
  store.stage('a', null)
  store.flush()
  store.stage('b', target('b', { address: '10.0.0.2' }))
  store.flush()
  t.strictSame(generations, [0, 1, 2, 3, 4, 5])
})

t.test('re-staging identical targets publishes nothing', async (t) => {
  const store = new SnapshotStore()
  store.markInitialized()
  stageAll(store, [target('a'), target('b')])
  store.flush()
  const before = store.current()
  let calls = 0
  store.subscribe(() => { calls++ })
  stageAll(store, [target('a'), target('b')]) // equal values, new objects
  t.equal(store.flush(), false)
  store.stage('zzz', null) // removing what is not there
  t.equal(store.flush(), false)
  store.stage('c', target('c'))
  store.stage('c', null) // added and removed within one tick
  t.equal(store.flush(), false)
  t.equal(store.current(), before)
  t.equal(calls, 1, 'only the initial call')
})

t.test('the digest depends only on the set, not on the order targets arrived in', async (t) => {
  const all = ['e', 'a', 'd', 'b', 'c'].map((id, i) => target(id, { address: `10.0.0.${i + 1}` }))
  const one = new SnapshotStore()
  one.markInitialized()
  stageAll(one, all)
  one.flush()

  const other = new SnapshotStore()
  other.markInitialized()
  for (const x of [...all].reverse()) {
    other.stage(x.identity, x)
    other.flush()
  }
  // and a detour: an extra target added then removed, one target changed and changed back
  other.stage('f', target('f'))
  other.flush()
  other.stage('f', null)
  other.stage('a', target('a', { address: '10.9.9.9' }))
  other.flush()
  other.stage('a', all.find((x) => x.identity === 'a') ?? null)
  other.flush()

  t.not(one.current().generation, other.current().generation)
  t.equal(one.current().digest, other.current().digest)
  t.match(one.current().digest, /^[0-9a-f]{32}$/)
  t.strictSame(one.current().targets, other.current().targets)
})

t.test('the digest changes when any field of any target changes', async (t) => {
  const changes: Array<[string, Partial<PodTarget>]> = [
    ['namespace', { namespace: 'other' }],
    ['address', { address: '10.0.0.99', host: '10.0.0.99' }],
    ['grpcPort', { grpcPort: 50061 }],
    ['quicPort', { quicPort: 50062 }],
    ['httpPort', { httpPort: 8001 }],
    ['httpPort removed', { httpPort: null }],
    ['nodeName', { nodeName: 'node-b' }],
    ['nodeName removed', { nodeName: null }],
    ['zone', { zone: 'zone-2' }],
    ['zone removed', { zone: null }],
    ['serving', { serving: false }],
  ]
  const digests = new Set<string>()
  for (const [why, change] of changes) {
    const store = new SnapshotStore()
    store.markInitialized()
    stageAll(store, [target('a'), target('b')])
    store.flush()
    const before = store.current()
    digests.add(before.digest)
    store.stage('b', target('b', change))
    t.equal(store.flush(), true, why)
    const after = store.current()
    t.equal(after.generation, before.generation + 1, why)
    t.not(after.digest, before.digest, why)
    digests.add(after.digest)
  }
  t.equal(digests.size, changes.length + 1, 'every variant has its own digest')
})

t.test('a removed identity changes the digest, and adding it back restores it', async (t) => {
  const store = new SnapshotStore()
  store.markInitialized()
  stageAll(store, [target('a'), target('b')])
  store.flush()
  const full = store.current().digest
  store.stage('b', null)
  store.flush()
  t.not(store.current().digest, full)
  store.stage('b', target('b'))
  store.flush()
  t.equal(store.current().digest, full)
})

t.test('a subscriber gets the current snapshot at once, then each change in order', async (t) => {
  const store = new SnapshotStore()
  store.markInitialized()
  store.stage('a', target('a'))
  store.flush()
  const seen: Array<[number, string[]]> = []
  const unsubscribe = store.subscribe((s) => { seen.push([s.generation, ids(s)]) })
  t.strictSame(seen, [[1, ['a']]])
  store.stage('b', target('b'))
  store.flush()
  store.stage('a', null)
  store.flush()
  t.strictSame(seen, [[1, ['a']], [2, ['a', 'b']], [3, ['b']]])
  unsubscribe()
  store.stage('c', target('c'))
  store.flush()
  t.equal(seen.length, 3, 'nothing after unsubscribing')
})

t.test('a subscriber that throws does not stop the others', async (t) => {
  const errors: unknown[] = []
  const store = new SnapshotStore({ onListenerError: (err) => { errors.push(err) } })
  store.subscribe((s) => { if (s.initialized) throw new Error('boom') })
  const seen: number[] = []
  store.subscribe((s) => { seen.push(s.generation) })
  store.markInitialized()
  store.flush()
  t.strictSame(seen, [0, 1])
  t.equal(errors.length, 1)
  t.equal((errors[0] as Error).message, 'boom')
})

t.test('a snapshot handed out is never changed by later changes', async (t) => {
  const store = new SnapshotStore()
  store.markInitialized()
  stageAll(store, ['a', 'b', 'c', 'd'].map((id) => target(id)))
  store.flush()
  store.stage('u', target('u'), 'unready')
  store.flush()
  const kept = store.current()
  const copy = structuredClone({ ...kept, byIdentity: [...kept.byIdentity], unready: [...kept.unready] })

  store.stage('a', null)
  store.stage('b', target('b', { address: '10.0.0.2' }))
  store.stage('e', target('e'))
  store.stage('c', target('c'), 'unready')
  store.stage('u', null)
  store.flush()
  stageAll(store, Array.from({ length: 100 }, (_, i) => target(`bulk-${i}`))) // the bulk path
  store.flush()

  t.strictSame({ ...kept, byIdentity: [...kept.byIdentity], unready: [...kept.unready] }, copy)
  t.ok(Object.isFrozen(kept))
  t.ok(Object.isFrozen(kept.targets))
  t.equal(store.current().targets.length, 103)
})

// A pod that merely turns unready (listed, not ready, not terminating) is no target,
// but the snapshot keeps it apart from a terminating or gone one, so that registrations and
// tunnels already relayed to it are kept while only terminating or gone pods are drained.
t.test('an unready pod leaves the targets for the unready pods, and comes back; a terminating one leaves both', async (t) => {
  const store = new SnapshotStore()
  store.markInitialized()
  stageAll(store, [target('a'), target('b', { address: '10.0.0.2' })])
  store.flush()
  const full = store.current()

  store.stage('b', target('b', { address: '10.0.0.2' }), 'unready')
  t.equal(store.flush(), true)
  const unready = store.current()
  t.strictSame(ids(unready), ['a'])
  t.equal(unready.byIdentity.has('b'), false, 'not routable')
  t.strictSame([...unready.unready.keys()], ['b'])
  t.equal(presentTarget(unready, 'b')?.address, '10.0.0.2', 'present for the drains')
  t.equal(presentTarget(unready, 'a')?.address, '10.0.0.1')
  t.equal(unready.generation, full.generation + 1)

  store.stage('b', target('b', { address: '10.0.0.2' }))
  store.flush()
  t.strictSame(ids(store.current()), ['a', 'b'])
  t.equal(store.current().unready.size, 0)
  t.equal(store.current().digest, full.digest, 'the same targets, the same digest')

  store.stage('b', target('b', { address: '10.0.0.2' }), 'unready')
  store.flush()
  store.stage('b', null)
  t.equal(store.flush(), true, 'terminating or gone: a change although the targets stay the same')
  t.strictSame(ids(store.current()), ['a'])
  t.equal(store.current().unready.size, 0)
  t.equal(presentTarget(store.current(), 'b'), undefined)
})

t.test('a change of the unready pods alone publishes the same targets, map and digest', async (t) => {
  const store = new SnapshotStore()
  store.markInitialized()
  stageAll(store, [target('a')])
  store.flush()
  const before = store.current()
  store.stage('x', target('x'), 'unready')
  t.equal(store.flush(), true)
  const after = store.current()
  t.equal(after.generation, before.generation + 1)
  t.equal(after.targets, before.targets, 'the same frozen array')
  t.equal(after.byIdentity, before.byIdentity, 'the same map')
  t.equal(after.digest, before.digest)
  store.stage('x', target('x'), 'unready')
  t.equal(store.flush(), false, 'the same unready pod again is no change')
  store.stage('x', target('x', { address: '10.0.0.9' }), 'unready')
  t.equal(store.flush(), true, 'an unready pod that moved is a change (its tunnels follow its address)')
})

t.test('the first published snapshot may hold only unready pods: initialized, no targets, the empty digest', async (t) => {
  const store = new SnapshotStore()
  store.stage('x', target('x'), 'unready')
  store.markInitialized()
  store.flush()
  const s = store.current()
  t.equal(s.initialized, true)
  t.strictSame(ids(s), [])
  t.equal(s.unready.size, 1)
  t.equal(s.digest, '0'.repeat(32))
})

t.test('a warming target (not serving) is a target; its digest differs from the serving one', async (t) => {
  const store = new SnapshotStore()
  store.markInitialized()
  store.stage('a', target('a', { serving: false }))
  store.flush()
  const warming = store.current()
  t.strictSame(ids(warming), ['a'])
  t.equal(warming.byIdentity.get('a')?.serving, false)
  store.stage('a', target('a'))
  t.equal(store.flush(), true, 'turning serving is a change')
  t.not(store.current().digest, warming.digest)
})
