// SPEC §10: the peer set. Changes reach listeners through one notifier, in the
// order they were applied (an add followed by a delete of the same peer arrives as add, then
// delete); this replica is never its own peer; peers() is sorted by id. A buffering listener
// records what a subscriber sees.
import t from 'tap'
import { PeerSet, diffPeers, type Peer, type PeerChange, type PeerSelf } from '../../lib/discovery/peers.ts'

const NOBODY: PeerSelf = { address: null, id: null }

function peer (name: string, address: string, port = 8080): Peer {
  return { id: `routers/${name}`, address, port }
}

function record (set: PeerSet): string[] {
  const seen: string[] = []
  set.subscribe((change) => { seen.push(describe(change)) })
  return seen
}

function describe (change: PeerChange): string {
  return change.type === 'update'
    ? `update ${change.peer.id} ${change.previous.address}->${change.peer.address}:${change.peer.port}`
    : `${change.type} ${change.peer.id}`
}

t.test('peers() is sorted by id whatever order they arrive in', async (t) => {
  const set = new PeerSet({ self: NOBODY })
  set.apply([['routers/c', peer('c', '10.0.0.3')], ['routers/a', peer('a', '10.0.0.1')]])
  set.apply([['routers/b', peer('b', '10.0.0.2')]])
  t.strictSame(set.peers().map((p) => p.id), ['routers/a', 'routers/b', 'routers/c'])
})

t.test('an add followed by a delete of the same peer reaches the listener as add, then delete', async (t) => {
  const set = new PeerSet({ self: NOBODY })
  const seen = record(set)
  for (let i = 0; i < 3; i++) {
    set.apply([['routers/x', peer('x', '10.0.0.9')]])
    set.apply([['routers/x', null]])
  }
  t.strictSame(seen, ['add routers/x', 'delete routers/x', 'add routers/x', 'delete routers/x', 'add routers/x', 'delete routers/x'])
  t.equal(set.size, 0)
})

t.test('within one batch, changes are delivered in the order given, even for the same peer', async (t) => {
  const set = new PeerSet({ self: NOBODY })
  const seen = record(set)
  set.apply([['routers/x', peer('x', '10.0.0.9')], ['routers/y', peer('y', '10.0.0.8')], ['routers/x', null]])
  t.strictSame(seen, ['add routers/x', 'add routers/y', 'delete routers/x'])
  t.strictSame(set.peers().map((p) => p.id), ['routers/y'])
})

t.test('a new address or port is one update; the same peer again is no change', async (t) => {
  const set = new PeerSet({ self: NOBODY })
  set.apply([['routers/a', peer('a', '10.0.0.1')]])
  const seen = record(set)
  set.apply([['routers/a', peer('a', '10.0.0.1')]])
  set.apply([['routers/a', peer('a', '10.0.0.5')]])
  set.apply([['routers/a', peer('a', '10.0.0.5', 9090)]])
  set.apply([['routers/missing', null]])
  t.strictSame(seen, ['add routers/a', 'update routers/a 10.0.0.1->10.0.0.5:8080', 'update routers/a 10.0.0.5->10.0.0.5:9090'])
})

t.test('a new subscriber gets the current peers at once, in id order, then only changes', async (t) => {
  const set = new PeerSet({ self: NOBODY })
  set.apply([['routers/b', peer('b', '10.0.0.2')], ['routers/a', peer('a', '10.0.0.1')]])
  const seen = record(set)
  set.apply([['routers/b', null]])
  t.strictSame(seen, ['add routers/a', 'add routers/b', 'delete routers/b'])
})

t.test('this replica is left out by POD_IP, or by POD_NAME when the address does not match', async (t) => {
  const all: Peer[] = [peer('a', '10.0.0.1'), peer('b', '10.0.0.2'), { id: 'routers/10.0.0.3', address: '10.0.0.3', port: 8080 }]
  const cases: Array<[string, PeerSelf, string[]]> = [
    ['by address', { address: '10.0.0.1', id: null }, ['routers/10.0.0.3', 'routers/b']],
    ['by name', { address: null, id: 'routers/a' }, ['routers/10.0.0.3', 'routers/b']],
    ['by name when the address changed (a restarted StatefulSet pod)', { address: '10.0.0.99', id: 'routers/a' }, ['routers/10.0.0.3', 'routers/b']],
    ['by address for an endpoint without a Pod', { address: '10.0.0.3', id: 'routers/c' }, ['routers/a', 'routers/b']],
  ]
  for (const [why, self, want] of cases) {
    const set = new PeerSet({ self })
    set.apply(all.map((p) => [p.id, p] as const))
    t.strictSame(set.peers().map((p) => p.id), want, why)
  }
})

t.test('replace diffs a complete list against the current set, in id order, leaving this replica out', async (t) => {
  const set = new PeerSet({ self: { address: '10.0.0.1', id: null } })
  set.replace([peer('a', '10.0.0.1'), peer('b', '10.0.0.2'), peer('c', '10.0.0.3')])
  const seen = record(set)
  set.replace([peer('d', '10.0.0.4'), peer('c', '10.0.0.33'), peer('a', '10.0.0.1')])
  t.strictSame(seen, ['add routers/b', 'add routers/c', 'delete routers/b', 'update routers/c 10.0.0.3->10.0.0.33:8080', 'add routers/d'])
  t.strictSame(set.peers().map((p) => p.id), ['routers/c', 'routers/d'])
})

t.test('a listener that changes the set while being notified sees its change after the current one, as every listener does', async (t) => {
  const set = new PeerSet({ self: NOBODY })
  const first: string[] = []
  const second: string[] = []
  set.subscribe((change) => {
    first.push(describe(change))
    if (change.type === 'add' && change.peer.id === 'routers/a') set.apply([['routers/a', null]])
  })
  set.subscribe((change) => { second.push(describe(change)) })
  set.apply([['routers/a', peer('a', '10.0.0.1')], ['routers/b', peer('b', '10.0.0.2')]])
  t.strictSame(first, ['add routers/a', 'add routers/b', 'delete routers/a'])
  t.strictSame(second, first, 'both listeners see one order')
  t.strictSame(set.peers().map((p) => p.id), ['routers/b'])
})

t.test('a listener that throws does not stop the others', async (t) => {
  const errors: unknown[] = []
  const set = new PeerSet({ self: NOBODY, onListenerError: (err) => { errors.push(err) } })
  set.subscribe(() => { throw new Error('boom') })
  const seen = record(set)
  set.apply([['routers/a', peer('a', '10.0.0.1')]])
  t.strictSame(seen, ['add routers/a'])
  t.equal(errors.length, 1)
})

t.test('diffPeers is empty for equal sets and lists every difference once', async (t) => {
  const a = new Map([['routers/a', peer('a', '10.0.0.1')]])
  t.strictSame(diffPeers(a, new Map(a)), [])
  t.strictSame(diffPeers(new Map(), a).map(describe), ['add routers/a'])
  t.strictSame(diffPeers(a, new Map()).map(describe), ['delete routers/a'])
})
