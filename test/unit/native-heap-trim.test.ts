// When the router gives malloc's free pages back (lib/native-heap-trim.ts): the decision as a
// table, the trimmer over a scripted process, and one trim of this process's real heap through
// the addon after a burst of freed allocations.
import t from 'tap'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { Registry } from 'prom-client'
import { NativeHeapTrimmer, decideTrim, idleBytes, type NativeHeap } from '../../lib/native-heap-trim.ts'
import { createNativeHeapMetrics } from '../../lib/metrics/native-heap-metrics.ts'
import { loadNative } from '../../lib/quic/native.ts'

const MiB = 2 ** 20

// The addon test frees its buffers with a full GC, so what malloc holds is known.
setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc') as () => void

t.test('idle is what is resident but neither malloc\'d nor V8\'s heap, never negative', async (t) => {
  t.equal(idleBytes({ rss: 300 * MiB, mallocInUse: 40 * MiB, v8Resident: 60 * MiB }), 200 * MiB)
  t.equal(idleBytes({ rss: 50 * MiB, mallocInUse: 40 * MiB, v8Resident: 60 * MiB }), 0)
})

t.test('the decision, case by case', async (t) => {
  const T = 64 * MiB
  const cases: Array<[string, number, number | null, number, { trim: boolean, baseline: number }]> = [
    ['the first check sets the baseline and never trims', 900 * MiB, null, T, { trim: false, baseline: 900 * MiB }],
    ['growth below the threshold waits', 100 * MiB + T - 1, 100 * MiB, T, { trim: false, baseline: 100 * MiB }],
    ['growth of exactly the threshold trims', 100 * MiB + T, 100 * MiB, T, { trim: true, baseline: 100 * MiB }],
    ['a wave\'s worth of growth trims', 700 * MiB, 100 * MiB, T, { trim: true, baseline: 100 * MiB }],
    ['the baseline follows the estimate down', 80 * MiB, 100 * MiB, T, { trim: false, baseline: 80 * MiB }],
    ['threshold 0 never trims', 5000 * MiB, 100 * MiB, 0, { trim: false, baseline: 100 * MiB }],
  ]
  for (const [name, idle, baseline, threshold, expected] of cases) t.same(decideTrim(idle, baseline, threshold), expected, name)
})

interface Scripted {
  heap: NativeHeap
  process: { rss: number, v8Resident: number, inUse: number, trimmable: number }
  trims: number
}

/** A process whose trim gives back `trimmable` bytes of RSS. */
function scripted (): Scripted {
  const s: Scripted = {
    process: { rss: 150 * MiB, v8Resident: 30 * MiB, inUse: 20 * MiB, trimmable: 0 },
    trims: 0,
    heap: {
      heapStats: () => ({ inUse: s.process.inUse }),
      heapTrim: () => {
        s.trims++
        s.process.rss -= s.process.trimmable
        const released = s.process.trimmable > 0
        s.process.trimmable = 0
        return released
      },
    },
  }
  return s
}

function trimmer (s: Scripted, thresholdBytes = 64 * MiB): { trimmer: NativeHeapTrimmer, registry: Registry, logs: Array<{ level: string, fields: object, msg: string }> } {
  const registry = new Registry()
  const logs: Array<{ level: string, fields: object, msg: string }> = []
  const logger = {
    info: (fields: object, msg: string) => { logs.push({ level: 'info', fields, msg }) },
    error: (fields: object, msg: string) => { logs.push({ level: 'error', fields, msg }) },
  }
  let now = 0
  return {
    trimmer: new NativeHeapTrimmer({
      heap: s.heap,
      thresholdBytes,
      intervalMs: 1000,
      metrics: createNativeHeapMetrics(registry),
      logger,
      readProcess: () => ({ rss: s.process.rss, v8Resident: s.process.v8Resident }),
      now: () => (now += 40),
    }),
    registry,
    logs,
  }
}

async function metric (registry: Registry, name: string, labels = ''): Promise<number> {
  const text = await registry.metrics()
  const line = text.split('\n').find((l) => l.startsWith(`stargate_k8s_router_${name}${labels} `))
  if (line === undefined) throw new Error(`no ${name}${labels} in the registry`)
  return Number(line.split(' ')[1])
}

t.test('a wave that opens, holds and closes connections is trimmed once after it closed, not while it held', async (t) => {
  const s = scripted()
  const { trimmer: trim, registry, logs } = trimmer(s)
  t.equal(trim.check(), null, 'idle router: baseline')
  // 9,900 connections open: RSS and malloc's allocation grow together.
  s.process.rss += 400 * MiB
  s.process.inUse += 400 * MiB
  t.equal(trim.check(), null, 'while the connections are open, what is resident is allocated')
  // They close: malloc frees, RSS stays.
  s.process.inUse -= 400 * MiB
  s.process.trimmable = 380 * MiB
  const outcome = trim.check()
  t.same(outcome, { rssBefore: 550 * MiB, rssAfter: 170 * MiB, durationMs: 40 }, 'trimmed once the memory was free')
  t.equal(s.trims, 1)
  t.equal(await metric(registry, 'native_heap_trims_total'), 1)
  t.equal(await metric(registry, 'native_heap_released_bytes_total'), 380 * MiB)
  t.equal(await metric(registry, 'native_heap_bytes', '{state="in_use"}'), 20 * MiB)
  t.equal(await metric(registry, 'native_heap_bytes', '{state="idle"}'), 120 * MiB)
  t.match(logs, [{ level: 'info', msg: 'native heap: free malloc pages given back to the kernel', fields: { rssBeforeBytes: 550 * MiB, rssAfterBytes: 170 * MiB, durationMs: 40 } }])
  t.equal(trim.check(), null, 'the next check finds nothing new')
  t.equal(s.trims, 1)
})

t.test('start() takes the baseline at once: a wave before the first interval is trimmed at it', async (t) => {
  const s = scripted()
  const { trimmer: trim } = trimmer(s)
  trim.start()
  trim.stop()
  s.process.rss += 400 * MiB
  s.process.trimmable = 380 * MiB
  t.same(trim.check(), { rssBefore: 550 * MiB, rssAfter: 170 * MiB, durationMs: 40 })
})

t.test('pages a trim cannot release do not set off a trim every interval', async (t) => {
  const s = scripted()
  const { trimmer: trim, registry } = trimmer(s)
  trim.check()
  s.process.rss += 300 * MiB // freed, but every page still holds a live chunk
  t.not(trim.check(), null, 'one trim')
  for (let i = 0; i < 5; i++) t.equal(trim.check(), null, `check ${i + 2}: the baseline is what the trim left`)
  t.equal(s.trims, 1)
  t.equal(await metric(registry, 'native_heap_released_bytes_total'), 0, 'nothing released is counted as nothing')
  s.process.rss += 64 * MiB
  t.not(trim.check(), null, 'growth past that baseline trims again')
})

t.test('threshold 0: the gauges follow, nothing is trimmed', async (t) => {
  const s = scripted()
  const { trimmer: trim, registry } = trimmer(s, 0)
  trim.check()
  s.process.rss += 900 * MiB
  t.equal(trim.check(), null)
  t.equal(s.trims, 0)
  t.equal(await metric(registry, 'native_heap_bytes', '{state="idle"}'), 1000 * MiB)
})

t.test('an addon that fails is logged once and no longer asked, and no check throws', async (t) => {
  const s = scripted()
  s.heap.heapStats = () => { throw new Error('addon gone') }
  const { trimmer: trim, logs } = trimmer(s)
  t.equal(trim.check(), null)
  t.equal(trim.check(), null)
  t.match(logs, [{ level: 'error', msg: 'native heap: reading or trimming malloc\'s heap failed; trimming stopped', fields: { err: { message: 'addon gone' } } }])
})

t.test('the addon: freed allocations leave malloc resident until heapTrim gives them back', async (t) => {
  const heap = loadNative()
  // 20,000 buffers of 20 KiB, each in malloc's arena (below its mmap threshold), and all
  // but every 50th freed: the survivors keep the arena's top where it was.
  const keep: Buffer[] = []
  const chunks: { all: Buffer[] | null } = { all: null }
  chunks.all = Array.from({ length: 20_000 }, (_, i) => {
    const b = Buffer.allocUnsafeSlow(20 * 1024).fill(i & 0xff)
    if (i % 50 === 49) keep.push(b)
    return b
  })
  const allocated = heap.heapStats().inUse
  chunks.all = null
  for (let i = 0; i < 3; i++) {
    gc()
    await new Promise((resolve) => { setImmediate(resolve) })
  }
  const freed = heap.heapStats()
  t.ok(freed.inUse < allocated - 300 * MiB, `malloc freed the buffers (${Math.round(allocated / MiB)} → ${Math.round(freed.inUse / MiB)} MiB allocated)`)
  const rssBefore = process.memoryUsage.rss()
  t.equal(heap.heapTrim(), true, 'the trim released pages')
  const rssAfter = process.memoryUsage.rss()
  t.ok(rssBefore - rssAfter > 200 * MiB, `RSS fell by ${Math.round((rssBefore - rssAfter) / MiB)} MiB`)
  t.ok(heap.heapStats().inUse >= keep.length * 20 * 1024, 'the buffers still alive are still counted allocated')
})
