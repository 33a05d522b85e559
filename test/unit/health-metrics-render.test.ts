// /metrics renderings shared between scrapes (lib/health/metrics-render.ts: pipelined
// scrapes that were never read made the router render thousands of times in a row and starved
// /livez). Renderings start at most once per interval, scrapes waiting for one share it, and
// a scrape never gets a rendering that started before it arrived.
import t from 'tap'
import { MetricsRender } from '../../lib/health/metrics-render.ts'
import { sleep } from '../fixtures/wait.ts'

function counting (): { render: () => Promise<string>, count: () => number } {
  let n = 0
  return { render: async () => `rendering ${++n}`, count: () => n }
}

t.test('a scrape with no other in sight renders at once', async (t) => {
  const c = counting()
  const metrics = new MetricsRender({ render: c.render, minIntervalMs: 100 })
  t.equal(await metrics.get(), 'rendering 1')
})

t.test('1,000 scrapes within one interval cost two renderings, and each gets one that started after it arrived', async (t) => {
  let clock = 0
  const c = counting()
  const metrics = new MetricsRender({ render: c.render, minIntervalMs: 50, now: () => clock })
  const first = metrics.get()
  const rest = Array.from({ length: 999 }, () => metrics.get())
  t.equal(c.count(), 1, 'the first started at once; the others wait for the next')
  clock = 50
  t.equal(await first, 'rendering 1')
  const bodies = await Promise.all(rest)
  t.equal(c.count(), 2, 'one more rendering for all of them')
  t.ok(bodies.every((b) => b === 'rendering 2'), 'shared')
})

t.test('renderings start at most once per interval under a steady stream of scrapes', async (t) => {
  const c = counting()
  const metrics = new MetricsRender({ render: c.render, minIntervalMs: 50 })
  const started = performance.now()
  const pending: Array<Promise<string>> = []
  while (performance.now() - started < 300) {
    pending.push(metrics.get())
    await sleep(1)
  }
  await Promise.all(pending)
  const elapsed = performance.now() - started
  t.ok(c.count() <= Math.ceil(elapsed / 50) + 1, `${c.count()} renderings for ${pending.length} scrapes in ${Math.round(elapsed)} ms`)
})

t.test('a failed rendering fails the scrapes that shared it, and the next scrape renders again', async (t) => {
  // The clock stands still, so the second scrape always waits its turn (a real clock on a
  // loaded machine could pass the interval before it arrives and render while still failing).
  let fail = true
  let renderings = 0
  const metrics = new MetricsRender({
    render: async () => { renderings++; if (fail) throw new Error('collector failed'); return 'ok' },
    minIntervalMs: 10,
    now: () => 0
  })
  await t.rejects(metrics.get(), /collector failed/)
  const waiting = metrics.get()
  t.equal(renderings, 1, 'the next scrape waits for its turn')
  fail = false
  t.equal(await waiting, 'ok')
  t.equal(renderings, 2)
})

t.test('an interval below 0 is refused at construction', async (t) => {
  t.throws(() => new MetricsRender({ render: async () => '', minIntervalMs: -1 }), /interval must be 0 or more/)
})
