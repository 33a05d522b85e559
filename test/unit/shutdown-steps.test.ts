// server/shutdown-steps.ts: the last shutdown steps share what is left of the budget; a step
// still running then is named and left behind, a failed one counts as done.
import t from 'tap'
import { settleWithin } from '../../server/shutdown-steps.ts'

t.test('steps that end in time leave nothing behind, failures included', async (t) => {
  const left = await settleWithin({ tls: Promise.resolve(), health: Promise.reject(new Error('already closed')), peers: undefined }, 10_000)
  t.same(left, [])
})

t.test('a step that never ends is named once the budget is spent, and does not hold the rest', async (t) => {
  let tunnelsClosed = false
  const tunnels = new Promise<void>((resolve) => { setTimeout(() => { tunnelsClosed = true; resolve() }, 5) })
  const left = await settleWithin({ tunnels, tls: new Promise(() => {}) }, 200)
  t.same(left, ['tls'])
  t.ok(tunnelsClosed, 'the other step ran to its end')
})

t.test('a budget already spent still returns (what has not settled yet is named)', async (t) => {
  t.same(await settleWithin({ discovery: new Promise(() => {}) }, -50), ['discovery'])
})
