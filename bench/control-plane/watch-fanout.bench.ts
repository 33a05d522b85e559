/**
 * Benchmark: WatchStargates fan-out (lib/control-plane/watch-stargates.ts) to 2,000
 * concurrent watch streams on loopback, with the router in its own process and discovery
 * driven through the fake Kubernetes API server (test/fixtures/kube-apiserver.ts, in this
 * process; the router reads it through KUBECONFIG as it would a real one).
 *
 *   fake API server ──watch──▶ router (server/main.ts) ──2,000 × WatchStargates──▶ this process
 *
 * Watchers: 2,000 HTTP/2 connections with one WatchStargates stream each (node:http2 client,
 * the gRPC request frame written by hand), because every Pylon keeps its own connection to
 * the router: per-connection costs (a socket, an nghttp2 session, one write per watcher per
 * change) are what fan-out and memory hinge on; 200 connections × 10 streams would hide most
 * of them.
 *
 * A change: a probe pod joins the target Service (a slice with its endpoint is applied to
 * the fake API server), then leaves again (the slice is applied with no endpoints), in
 * turn. The clock starts just before the fake API server writes the watch event and stops,
 * per watcher, when that watcher has received a whole message advertising the new set (the
 * set size changes by one, so a message of the other length; a heartbeat of the old set does
 * not count). Per change: the first watcher, the median watcher, and every watcher (the
 * last). 100 pods are advertised besides the probe; heartbeat at the default 5 s.
 *
 * Memory: the router's VmRSS before the watchers connect and with all 2,000 open.
 *
 * Target: every watcher has the new set within 250 ms, p99 over changes.
 */
import http2, { type ClientHttp2Session, type ClientHttp2Stream } from 'node:http2'
import { setTimeout as sleep } from 'node:timers/promises'
import { now, Report, summarize, summarizeRounds } from '../_util.ts'
import { rssKiB, startRouter, stopAll, tempDir } from '../_children.ts'
import { FakeKubeApiServer } from '../../test/fixtures/kube-apiserver.ts'
import { endpointSlice, type EndpointSpec } from '../../test/fixtures/endpoint-slices.ts'
import { WATCH_STARGATES_PATH } from '../../lib/control-plane/grpc.ts'

const QUICK = process.env.BENCH_QUICK === '1'
const WATCHERS = Number(process.env.BENCH_WATCHERS ?? (QUICK ? 200 : 2000))
const PODS = 100
const CHANGES_PER_ROUND = 10
const ROUNDS = QUICK ? 1 : 6
const NAMESPACE = 'stargate'
const SERVICE = 'stargate-headless'

const report = new Report('control-plane/watch-fanout')
const dir = tempDir('watch-fanout')

const fake = await FakeKubeApiServer.start({ namespaces: [NAMESPACE] })
const pods: EndpointSpec[] = Array.from({ length: PODS }, (_, i) => ({ pod: `stargate-${i}`, ip: `10.0.${i >> 8}.${(i & 255) + 1}` }))
fake.apply(endpointSlice({ namespace: NAMESPACE, service: SERVICE, name: `${SERVICE}-main`, endpoints: pods }))
const probeSlice = (endpoints: readonly EndpointSpec[]): Record<string, unknown> =>
  endpointSlice({ namespace: NAMESPACE, service: SERVICE, name: `${SERVICE}-probe`, endpoints })
fake.apply(probeSlice([]))
const kubeconfig = await fake.writeKubeconfig(dir)
const router = await startRouter({ args: ['--discovery', 'kubernetes', '--target-namespace', NAMESPACE], env: { KUBECONFIG: kubeconfig } })

/** One WatchStargates stream: follows the length prefixes and reports whole messages. */
class Watcher {
  readonly stream: ClientHttp2Stream
  #headerSeen = 0
  #length = 0
  #left = 0
  /** Length of the last whole message. */
  lastLength = -1
  /** Waiting for a message whose length differs from this one (the old set's); -1: not waiting. */
  waitingFor = -1
  arrivedAt = 0

  constructor (session: ClientHttp2Session, onSet: (watcher: Watcher) => void) {
    this.stream = session.request({
      ':method': 'POST',
      ':path': WATCH_STARGATES_PATH,
      'content-type': 'application/grpc',
      te: 'trailers',
    })
    // The request: one empty WatchStargatesRequest, then the client half-closes.
    this.stream.end(Buffer.alloc(5))
    this.stream.on('data', (chunk: Buffer) => {
      let i = 0
      while (i < chunk.length) {
        if (this.#left > 0) {
          const take = Math.min(this.#left, chunk.length - i)
          this.#left -= take
          i += take
          if (this.#left === 0) this.#complete(onSet)
          continue
        }
        if (this.#headerSeen > 0) this.#length = this.#length * 256 + (chunk[i] as number)
        this.#headerSeen++
        i++
        if (this.#headerSeen === 5) {
          this.#headerSeen = 0
          this.#left = this.#length
          if (this.#left === 0) this.#complete(onSet)
        }
      }
    })
    this.stream.on('error', () => {})
  }

  #complete (onSet: (watcher: Watcher) => void): void {
    const length = this.#length
    this.#length = 0
    if (this.waitingFor >= 0 && length !== this.waitingFor) {
      this.waitingFor = -1
      this.arrivedAt = now()
      this.lastLength = length
      onSet(this)
      return
    }
    this.lastLength = length
  }
}

function connect (port: number): Promise<ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`)
    session.once('remoteSettings', () => { session.off('error', reject); resolve(session) })
    session.once('error', reject)
  })
}

await sleep(1000)
const rssBefore = rssKiB(router.pid)
let pending = 0
let allArrived: (() => void) | null = null
const onSet = (): void => {
  pending--
  if (pending === 0) allArrived?.()
}
const sessions: ClientHttp2Session[] = []
const watchers: Watcher[] = []
for (let i = 0; i < WATCHERS; i += 200) {
  const batch = await Promise.all(Array.from({ length: Math.min(200, WATCHERS - i) }, () => connect(router.frontDoorPort)))
  sessions.push(...batch)
  for (const session of batch) watchers.push(new Watcher(session, onSet))
}
// Every watcher has the initial set.
const deadline = Date.now() + 30_000
while (watchers.some((w) => w.lastLength < 0)) {
  if (Date.now() > deadline) throw new Error(`${watchers.filter((w) => w.lastLength < 0).length} watchers got no initial set`)
  await sleep(50)
}
await sleep(1000)
const rssWatching = [rssKiB(router.pid)]

/** Applies one change and resolves with each watcher's delay (ns) until it had the new set. */
async function change (probe: number): Promise<number[]> {
  const arrived = new Promise<void>((resolve) => { allArrived = resolve })
  pending = watchers.length
  for (const w of watchers) w.waitingFor = w.lastLength
  const t0 = now()
  fake.apply(probeSlice(probe % 2 === 1 ? [{ pod: `probe-${String(probe).padStart(6, '0')}`, ip: '10.1.0.1' }] : []))
  const timeout = setTimeout(() => { throw new Error(`change ${probe}: ${pending} watchers still without the new set after 30 s`) }, 30_000)
  await arrived
  clearTimeout(timeout)
  return watchers.map((w) => w.arrivedAt - t0)
}

const first: number[][] = []
const middle: number[][] = []
const every: number[][] = []
let probe = 0
// Warm-up: two changes, thrown away.
for (let i = 0; i < 2; i++) { await change(++probe); await sleep(200) }
for (let r = 0; r < ROUNDS; r++) {
  const f: number[] = []
  const m: number[] = []
  const e: number[] = []
  for (let i = 0; i < CHANGES_PER_ROUND; i++) {
    const delays = (await change(++probe)).sort((a, b) => a - b)
    f.push(delays[0] as number)
    m.push(delays[Math.floor(delays.length / 2)] as number)
    e.push(delays[delays.length - 1] as number)
    rssWatching.push(rssKiB(router.pid))
    await sleep(200 + Math.floor(Math.random() * 100))
  }
  first.push(f)
  middle.push(m)
  every.push(e)
}

report.info('watchers', `${WATCHERS} WatchStargates streams on ${WATCHERS} HTTP/2 connections (one per Pylon)`)
report.info('set', `${PODS} pods + a probe pod that joins and leaves in turn; ${ROUNDS * CHANGES_PER_ROUND} changes after 2 of warm-up`)
const FIRST = 'slice change → first watcher has the new set'
report.add({ name: FIRST, stats: summarizeRounds(first, 0.2), unit: 'ms', note: 'the floor: discovery, snapshot, one encode, one write' })
report.add({ name: 'slice change → median watcher has the new set', stats: summarizeRounds(middle, 0.2), unit: 'ms', baseline: FIRST })
report.add({ name: `slice change → every watcher has the new set (${WATCHERS})`, stats: summarizeRounds(every, 0.2), unit: 'ms', baseline: FIRST, target: 250, targetStat: 'p99' })
const rssMedian = [...rssWatching].sort((a, b) => a - b)[Math.floor(rssWatching.length / 2)] as number
report.add({
  name: `router RSS with ${WATCHERS} watchers`,
  stats: summarize([rssMedian], 1, 0, true),
  unit: 'KiB',
  note: `${(rssBefore / 1024).toFixed(0)} MiB before the watchers connected: ${((rssMedian - rssBefore) / WATCHERS).toFixed(1)} KiB per watcher (median of ${rssWatching.length} samples taken during the changes)`,
})

for (const w of watchers) w.stream.close()
for (const s of sessions) s.destroy()
await stopAll()
await fake.close()
report.finish()
