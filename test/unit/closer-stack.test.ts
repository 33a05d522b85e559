// server/closer-stack.ts (one lifecycle): what started is closed last-started-first,
// each closer awaited before the next, once; a closer still running at the deadline is named
// and does not keep the ones after it from being called.
import t from 'tap'
import { CloserStack } from '../../server/closer-stack.ts'

const FAR = 60_000

t.test('unwinding closes in reverse order of start, each finished before the next begins', async (t) => {
  const events: string[] = []
  const stack = new CloserStack()
  for (const name of ['tls', 'discovery', 'front door']) {
    stack.push(name, async () => {
      events.push(`${name} begins`)
      await new Promise((resolve) => { setImmediate(resolve) })
      events.push(`${name} ends`)
    })
  }
  t.same(await stack.unwind(Date.now() + FAR), [])
  t.same(events, ['front door begins', 'front door ends', 'discovery begins', 'discovery ends', 'tls begins', 'tls ends'])
})

t.test('a second unwind returns the first one\'s promise and closes nothing twice', async (t) => {
  const calls: string[] = []
  const stack = new CloserStack()
  stack.push('health', () => { calls.push('health') })
  stack.push('tunnels', async () => { calls.push('tunnels') })
  const first = stack.unwind(Date.now() + FAR)
  const second = stack.unwind(Date.now() + FAR)
  t.equal(second, first, 'the same completion')
  await Promise.all([first, second])
  t.same(calls, ['tunnels', 'health'])
})

t.test('a closer that throws or rejects counts as done and the unwinding goes on', async (t) => {
  const calls: string[] = []
  const stack = new CloserStack()
  stack.push('tls', () => { calls.push('tls') })
  stack.push('discovery', () => { throw new Error('already stopped') })
  stack.push('peers', () => Promise.reject(new Error('fetch aborted')))
  t.same(await stack.unwind(Date.now() + FAR), [])
  t.same(calls, ['tls'])
})

t.test('a closer still running at the deadline is named, and the ones after it are still called', async (t) => {
  const calls: string[] = []
  const stack = new CloserStack()
  stack.push('tls', () => { calls.push('tls'); return new Promise(() => {}) })
  stack.push('discovery', () => { calls.push('discovery') })
  stack.push('http pods', () => { calls.push('http pods'); return new Promise(() => {}) })
  stack.push('health', () => { calls.push('health') })
  const left = await stack.unwind(Date.now() + 200)
  t.same(left, ['http pods', 'tls'], 'the stuck ones, in unwinding order')
  t.same(calls, ['health', 'http pods', 'discovery', 'tls'], 'every closer was called')
})

t.test('each closer is told what is left of the budget, 0 once it is spent', async (t) => {
  let now = 1000
  const budgets: number[] = []
  const stack = new CloserStack(() => now)
  stack.push('discovery', (remainingMs) => { budgets.push(remainingMs) })
  stack.push('http pods', (remainingMs) => { budgets.push(remainingMs); now += 700 })
  stack.push('front door', (remainingMs) => { budgets.push(remainingMs); now += 200 })
  await stack.unwind(1500)
  t.same(budgets, [500, 300, 0])
})

t.test('a closer pushed once unwinding has begun is refused', async (t) => {
  const stack = new CloserStack()
  await stack.unwind(Date.now() + FAR)
  t.throws(() => { stack.push('tunnels', () => {}) }, { message: "closer 'tunnels' pushed after the lifecycle began to unwind" })
})
