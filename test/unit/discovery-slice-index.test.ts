// SPEC §3 rule 5: one pod in two EndpointSlices (the EndpointSlice controller moving it);
// the copy from the most recently observed slice event wins, whatever the slice names.
import t from 'tap'
import { SliceIndex } from '../../lib/discovery/slice-index.ts'
import { SnapshotStore } from '../../lib/discovery/snapshot-store.ts'
import type { ParsedSlice } from '../../lib/discovery/endpoint-slice.ts'
import type { PodTarget } from '../../lib/discovery/types.ts'

function target (identity: string, address: string): PodTarget {
  return { identity, namespace: 'stargate', address, host: address, grpcPort: 50051, quicPort: 50052, httpPort: null, nodeName: null, zone: null, serving: true }
}

/** A parsed slice: identity -> address (ready) or null (terminating). */
function parsed (pods: Record<string, string | null>): ParsedSlice {
  return {
    observations: Object.entries(pods).map(([identity, address]) => ({ identity, target: address === null ? null : { target: target(identity, address), ready: true } })),
    skipped: [],
  }
}

function addressOf (index: SliceIndex, identity: string): string | null {
  return index.winner(identity)?.target.address ?? null
}

t.test('the later slice event wins, in either order, whatever the slice names', async (t) => {
  for (const [first, second] of [['ns/stargate-a', 'ns/stargate-z'], ['ns/stargate-z', 'ns/stargate-a']] as const) {
    const index = new SliceIndex()
    index.upsert(first, '1', parsed({ 'stargate-0': '10.0.0.1' }))
    index.upsert(second, '2', parsed({ 'stargate-0': '10.0.0.2' }))
    t.equal(addressOf(index, 'stargate-0'), '10.0.0.2', `${first} then ${second}`)
  }
})

t.test('a new event for the older slice makes it the winner again', async (t) => {
  const index = new SliceIndex()
  index.upsert('ns/a', '1', parsed({ 'stargate-0': '10.0.0.1' }))
  index.upsert('ns/b', '2', parsed({ 'stargate-0': '10.0.0.2' }))
  index.upsert('ns/a', '3', parsed({ 'stargate-0': '10.0.0.3' }))
  t.equal(addressOf(index, 'stargate-0'), '10.0.0.3')
})

t.test('deleting the winning slice falls back to the other copy', async (t) => {
  const index = new SliceIndex()
  index.upsert('ns/a', '1', parsed({ 'stargate-0': '10.0.0.1' }))
  index.upsert('ns/b', '2', parsed({ 'stargate-0': '10.0.0.2' }))
  t.strictSame(index.delete('ns/b'), ['stargate-0'])
  t.equal(addressOf(index, 'stargate-0'), '10.0.0.1')
  t.strictSame(index.delete('ns/a'), ['stargate-0'])
  t.equal(addressOf(index, 'stargate-0'), null)
  t.equal(index.size, 0)
})

t.test('removing the pod from the winning slice falls back to the other copy', async (t) => {
  const index = new SliceIndex()
  index.upsert('ns/a', '1', parsed({ 'stargate-0': '10.0.0.1' }))
  index.upsert('ns/b', '2', parsed({ 'stargate-0': '10.0.0.2', 'stargate-1': '10.0.0.9' }))
  t.strictSame(index.upsert('ns/b', '3', parsed({ 'stargate-1': '10.0.0.9' })), ['stargate-0', 'stargate-1'])
  t.equal(addressOf(index, 'stargate-0'), '10.0.0.1')
})

t.test('a later terminating observation hides an earlier ready one', async (t) => {
  const index = new SliceIndex()
  index.upsert('ns/a', '1', parsed({ 'stargate-0': '10.0.0.1' }))
  index.upsert('ns/b', '2', parsed({ 'stargate-0': null }))
  t.equal(addressOf(index, 'stargate-0'), null)
  index.delete('ns/b')
  t.equal(addressOf(index, 'stargate-0'), '10.0.0.1')
})

t.test('an unknown identity or slice has no winner and deleting it affects nothing', async (t) => {
  const index = new SliceIndex()
  t.equal(index.winner('nobody'), null)
  t.strictSame(index.delete('ns/none'), [])
})

t.test('has() recognises only the exact applied version of a slice', async (t) => {
  const index = new SliceIndex()
  index.upsert('ns/a', '5', parsed({ 'stargate-0': '10.0.0.1' }))
  index.upsert('ns/b', '', parsed({ 'stargate-1': '10.0.0.2' }))
  t.equal(index.has('ns/a', '5'), true)
  t.equal(index.has('ns/a', '6'), false)
  t.equal(index.has('ns/c', '5'), false)
  t.equal(index.has('ns/b', ''), false, 'a slice without resourceVersion is never assumed applied')
  t.strictSame([...index.keys()].sort(), ['ns/a', 'ns/b'])
})

t.test('upsert reports every identity whose winner may have changed', async (t) => {
  const index = new SliceIndex()
  t.strictSame(index.upsert('ns/a', '1', parsed({ p1: '10.0.0.1', p2: '10.0.0.2' })), ['p1', 'p2'])
  t.strictSame(index.upsert('ns/a', '2', parsed({ p2: '10.0.0.2', p3: '10.0.0.3' })), ['p1', 'p2', 'p3'])
  t.equal(index.winner('p1'), null)
})

t.test('fed through the store, one identity always gives one target, from the latest slice event', async (t) => {
  const index = new SliceIndex()
  const store = new SnapshotStore()
  const apply = (identities: readonly string[]): void => {
    for (const identity of identities) store.stage(identity, index.winner(identity)?.target ?? null)
    store.flush()
  }
  store.markInitialized()
  apply(index.upsert('ns/stargate-z', '1', parsed({ 'stargate-0': '10.0.0.1', 'stargate-1': '10.0.0.11' })))
  apply(index.upsert('ns/stargate-a', '2', parsed({ 'stargate-0': '10.0.0.2' })))
  t.strictSame(store.current().targets.map((x) => [x.identity, x.address]), [['stargate-0', '10.0.0.2'], ['stargate-1', '10.0.0.11']])
  apply(index.delete('ns/stargate-a'))
  t.strictSame(store.current().targets.map((x) => [x.identity, x.address]), [['stargate-0', '10.0.0.1'], ['stargate-1', '10.0.0.11']])
  apply(index.upsert('ns/stargate-a', '3', parsed({ 'stargate-0': null })))
  t.strictSame(store.current().targets.map((x) => [x.identity, x.address]), [['stargate-1', '10.0.0.11']])
})
