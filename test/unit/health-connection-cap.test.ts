// lib/health/connection-cap.ts: at the health port's cap a new connection is always
// taken, and the one closed to make room is the oldest without a request in flight, else the
// oldest of all; below the cap nothing is closed. Table-driven over the accept order.
import t from 'tap'
import { ConnectionCap } from '../../lib/health/connection-cap.ts'

interface Case {
  readonly what: string
  /** Accepted in this order; the number is the requests in flight on each. */
  readonly open: ReadonlyArray<readonly [string, number]>
  readonly evicted: { connection: string, state: 'idle' | 'busy' } | null
}

const CASES: readonly Case[] = [
  { what: 'under the cap nothing is closed', open: [['a', 0], ['b', 1]], evicted: null },
  { what: 'at the cap the oldest idle connection goes', open: [['a', 0], ['b', 0], ['c', 0]], evicted: { connection: 'a', state: 'idle' } },
  { what: 'connections with a request in flight are passed over', open: [['a', 1], ['b', 2], ['c', 0]], evicted: { connection: 'c', state: 'idle' } },
  { what: 'when every connection has a request in flight the oldest goes', open: [['a', 1], ['b', 1], ['c', 1]], evicted: { connection: 'a', state: 'busy' } },
]

for (const { what, open, evicted } of CASES) {
  t.test(what, async (t) => {
    const cap = new ConnectionCap<string>(3)
    for (const [name, requests] of open) {
      t.equal(cap.admit(name), null)
      for (let i = 0; i < requests; i++) cap.requestStarted(name)
    }
    t.same(cap.admit('new'), evicted)
    t.equal(cap.size, Math.min(open.length + 1, 3), 'never over the cap')
  })
}

t.test('a finished request makes its connection idle again, a closed one leaves the count', async (t) => {
  const cap = new ConnectionCap<string>(2)
  cap.admit('a')
  cap.requestStarted('a')
  cap.admit('b')
  cap.requestStarted('b')
  cap.requestFinished('b')
  t.same(cap.admit('c'), { connection: 'b', state: 'idle' }, 'b, idle again, goes before a')
  cap.closed('a')
  t.equal(cap.size, 1)
  t.equal(cap.admit('d'), null, 'room again after a close')
  cap.requestFinished('gone') // a connection already evicted: ignored
  cap.closed('gone')
  t.equal(cap.size, 2)
})

t.test('the cap is a whole number above 0', async (t) => {
  t.throws(() => new ConnectionCap(0), /connection cap must be a whole number above 0, got 0/)
})
