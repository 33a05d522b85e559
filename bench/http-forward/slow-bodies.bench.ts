/**
 * Benchmark: a legitimate LLM request to a pod while 2,000 clients trickle request
 * bodies at the same pod through the same router, against the same request with no attack.
 *
 *   bench (the legitimate client) ──▶ router A ──┐
 *   _trickler.ts (2,000 uploads) ───▶ router A ──┼──▶ upstream (_upstream.ts): the pod
 *   bench (the legitimate client) ──▶ router B ──┘   (B: the same router, never attacked)
 *
 * The attack: POST with `Content-Length: 100000`, one byte every 2 s, each upload
 * replaced at once when the router answers it, so 2,000 stay open (BENCH_TRICKLERS), from
 * 127.0.99.1. Both routers run at their defaults: 1,024 connections and 1,024 queue places per
 * pod, a 64 KiB body buffer, 1 KiB/s over 60 s, 25 % per client. The legitimate client sends a
 * 1 KiB JSON POST naming the pod (Host) on one kept-alive connection per router, alternating
 * between A and B, one request every 20 ms.
 *
 * Why two routers: the machine is 2 shared cores, whose load swings the tail of a 2 ms request
 * from 20 to 50 ms between two 15-s stretches with nothing else changed (p99, measured while
 * writing this). Router B, measured in the same instants as A, is the unloaded latency of that
 * moment; A before the attack is reported too (its unloaded latency in time), and B = A
 * before the attack shows the two routers alike.
 *
 * Phases: no attack (20 s), then the attack on A for 75 s (BENCH_SLOW_BODIES_LOADED_MS: past the
 * end of the tricklers' first rate window, so the wave of 2,000 408s and reconnects is inside
 * it). Then, for contrast, the same attack against a router with the body buffer and the
 * per-client share off (a request takes its pod connection at its head):
 * how many of 20 legitimate requests are answered within 5 s.
 *
 * Target: under the attack, A's p99 ≤ 2 × B's p99 in the same instants.
 */
import http from 'node:http'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { Report, now, summarizeRounds } from '../_util.ts'
import { CpuMeter, ROOT, spawnNode, startRouter, stop, stopAll, tempDir, writeTargetsFile, type Child, type RouterChild } from '../_children.ts'

const QUICK = process.env.BENCH_QUICK === '1'
const TRICKLERS = Number(process.env.BENCH_TRICKLERS ?? 2000)
const TRICKLE_INTERVAL_MS = 2000
const UNLOADED_MS = QUICK ? 3000 : 20_000
const LOADED_MS = Number(process.env.BENCH_SLOW_BODIES_LOADED_MS ?? (QUICK ? 10_000 : 75_000))
const PAIRS_PER_ROUND = 25
const GAP_MS = 20
const HOST = 'stargate-0.stargate.external'
const ATTACKER = '127.0.99.1'

const report = new Report('http-forward/slow-bodies')
const dir = tempDir('slow-bodies')

const upstream = spawnNode(join(ROOT, 'bench/http-forward/_upstream.ts'), ['127.0.0.1'])
const upstreamPort = (await upstream.next<{ port: number }>((v) => typeof v.port === 'number')).port
const targetsFile = writeTargetsFile(dir, [{ identity: 'stargate-0', address: '127.0.0.1', grpcPort: 9, httpPort: upstreamPort }])

const body = (() => {
  const head = '{"model":"bench","stream":false,"messages":[{"role":"user","content":"'
  const tail = '"}]}'
  return head + 'x'.repeat(1024 - head.length - tail.length) + tail
})()

function sleep (ms: number): Promise<void> {
  return new Promise((resolve) => { setTimeout(resolve, ms) })
}

/** One legitimate request; resolves with its status, or 0 when no answer came within timeoutMs. */
function request (agent: http.Agent, port: number, timeoutMs: number): Promise<number> {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/chat/completions', method: 'POST', agent, headers: { host: HOST, 'content-type': 'application/json', 'content-length': body.length } }, (res) => {
      res.resume()
      res.on('end', () => { resolve(res.statusCode ?? 0) })
    })
    req.setTimeout(timeoutMs, () => { req.destroy(); resolve(0) })
    req.on('error', () => { resolve(0) })
    req.end(body)
  })
}

/** A sample of the router's /metrics: the first line of the metric whose labels include these. */
async function metric (router: RouterChild, name: string, labels: Record<string, string> = {}): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${router.healthPort}/metrics`)).text()
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`)
  for (const line of text.split('\n')) {
    if (!line.startsWith(name + '{') && !line.startsWith(name + ' ')) continue
    if (wanted.every((label) => line.includes(label))) return Number(line.slice(line.lastIndexOf(' ') + 1))
  }
  return 0
}

/** Established TCP connections to the upstream's port, from /proc/net/tcp (the pod's view). */
function upstreamConnections (): number {
  const hexPort = upstreamPort.toString(16).toUpperCase().padStart(4, '0')
  return readFileSync('/proc/net/tcp', 'utf8').split('\n').slice(1).filter((line) => {
    const fields = line.trim().split(/\s+/)
    return fields[1]?.endsWith(`:${hexPort}`) === true && fields[3] === '01'
  }).length
}

/** One router as the legitimate client sees it over a phase. */
class Path {
  readonly router: RouterChild
  readonly agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  readonly rounds: number[][] = []
  failures = 0
  #cpu: CpuMeter
  cpuSeconds = 0
  wallSeconds = 0
  #started = 0

  constructor (router: RouterChild) {
    this.router = router
    this.#cpu = new CpuMeter(() => [router.pid])
  }

  start (): void {
    this.#cpu.start()
    this.#started = Date.now()
  }

  stop (): void {
    this.cpuSeconds += this.#cpu.stop()
    this.wallSeconds += (Date.now() - this.#started) / 1000
  }

  /** Times one request (ns) into round; a failure is counted instead. */
  async once (round: number[]): Promise<void> {
    await sleep(GAP_MS)
    const t0 = now()
    const status = await request(this.agent, this.router.frontDoorPort, 10_000)
    const elapsed = now() - t0
    if (status === 200) round.push(elapsed)
    else this.failures++
  }

  cpuShare (): string {
    return `${(100 * this.cpuSeconds / this.wallSeconds).toFixed(0)} % of a core`
  }
}

/** Rounds of request pairs, one to each path, in alternating order, for at least ms. */
async function alternate (a: Path, b: Path, ms: number): Promise<void> {
  a.start()
  b.start()
  const until = Date.now() + ms
  while (Date.now() < until) {
    const roundA: number[] = []
    const roundB: number[] = []
    for (let i = 0; i < PAIRS_PER_ROUND; i++) {
      if (i % 2 === 0) { await a.once(roundA); await b.once(roundB) } else { await b.once(roundB); await a.once(roundA) }
    }
    a.rounds.push(roundA)
    b.rounds.push(roundB)
  }
  a.stop()
  b.stop()
}

interface TricklerStatus {
  readonly open: number
  readonly answered: Record<string, number>
}

function startTrickler (router: RouterChild): Child {
  return spawnNode(join(ROOT, 'bench/http-forward/_trickler.ts'), [String(router.frontDoorPort), String(TRICKLERS), String(TRICKLE_INTERVAL_MS), ATTACKER, HOST])
}

/** Waits until the attacker holds its uploads open and their heads reached the router. */
async function attackUnderWay (trickler: Child, router: RouterChild): Promise<void> {
  for (;;) {
    const status = await trickler.next<TricklerStatus>((v) => typeof v.open === 'number')
    if (status.open >= TRICKLERS && await metric(router, 'stargate_k8s_router_http_requests_in_flight') >= TRICKLERS) return
  }
}

/** The attacker's current status: its next line printed after the ones already queued. */
async function currentStatus (trickler: Child): Promise<TricklerStatus> {
  for (;;) {
    const asked = Date.now()
    const status = await trickler.next<TricklerStatus>((v) => typeof v.open === 'number', 5000)
    if (Date.now() - asked > 100) return status
  }
}

// --- two routers at their defaults; the attack on A ------------------------------------

const [routerA, routerB] = await Promise.all([startRouter({ targetsFile }), startRouter({ targetsFile })]) as [RouterChild, RouterChild]
const before = { a: new Path(routerA), b: new Path(routerB) }
const during = { a: new Path(routerA), b: new Path(routerB) }
// Warm-up: connections open, code paths compiled.
await alternate(new Path(routerA), new Path(routerB), QUICK ? 500 : 2000)
console.log(`  no attack: ${UNLOADED_MS} ms of alternating requests to A and B`)
await alternate(before.a, before.b, UNLOADED_MS)

console.log(`  starting ${TRICKLERS} trickling uploads against A`)
const trickler = startTrickler(routerA)
const rampStarted = Date.now()
await attackUnderWay(trickler, routerA)
const rampMs = Date.now() - rampStarted
const buffering = await metric(routerA, 'stargate_k8s_router_http_request_bodies_buffering')
const podConnectionsBefore = upstreamConnections()
console.log(`  attack under way after ${rampMs} ms: ${buffering} bodies being read by router A, ${podConnectionsBefore} pod connection(s); measuring for ${LOADED_MS} ms`)
let podConnectionsMax = podConnectionsBefore
const watch = setInterval(() => { podConnectionsMax = Math.max(podConnectionsMax, upstreamConnections()) }, 250)
await alternate(during.a, during.b, LOADED_MS)
clearInterval(watch)
const attack = await currentStatus(trickler)
const refusedSlow = await metric(routerA, 'stargate_k8s_router_http_client_limit_refusals_total', { reason: 'body_rate_too_low' })
await stop(trickler)
for (const path of [before.a, before.b, during.a, during.b]) path.agent.destroy()
await Promise.all([stop(routerA), stop(routerB)])

// --- contrast: the body buffer and the per-client share off ----------------------------

const legacy = await startRouter({ targetsFile, args: ['--http-body-buffer-bytes', '0', '--http-upstream-max-client-share-percent', '0'] })
const legacyTrickler = startTrickler(legacy)
await attackUnderWay(legacyTrickler, legacy)
const legacyPodConnections = upstreamConnections()
const outcomes: Record<string, number> = {}
await Promise.all(Array.from({ length: 20 }, async () => {
  const status = await request(new http.Agent({ keepAlive: false }), legacy.frontDoorPort, 5000)
  const key = status === 0 ? 'no answer in 5 s' : String(status)
  outcomes[key] = (outcomes[key] ?? 0) + 1
}))
await stopAll()

// --- report ---------------------------------------------------------------------------

const answered = Object.entries(attack.answered).map(([status, n]) => `${n} × ${status}`).join(', ')
report.info('attack', `${TRICKLERS} uploads from ${ATTACKER} to router A, POST Content-Length 100000, one byte every ${TRICKLE_INTERVAL_MS / 1000} s, each replaced when answered; ${rampMs} ms to open them all`)
report.info('routers', 'A and B alike, at their defaults: 1,024 connections + 1,024 queue places per pod, 64 KiB body buffer, 1 KiB/s over 60 s, 25 % per client')
report.info('legitimate client', `POST of ${body.length} B JSON naming the pod, one kept-alive connection per router, alternating A and B, one request every ${GAP_MS} ms`)
const B0 = 'router B, no attack'
const A0 = 'router A, no attack (its unloaded latency)'
const B1 = 'router B during the attack on A (the unloaded latency of the same instants)'
report.add({ name: B0, stats: summarizeRounds(before.b.rounds, 0.1), unit: 'ms', note: `router CPU ${before.b.cpuShare()}` })
report.add({ name: A0, stats: summarizeRounds(before.a.rounds, 0.1), unit: 'ms', baseline: B0, note: `router CPU ${before.a.cpuShare()}; ${before.a.failures} failed` })
const b1 = report.add({ name: B1, stats: summarizeRounds(during.b.rounds, 0.1), unit: 'ms', note: `router CPU ${during.b.cpuShare()}; ${during.b.failures} failed` })
report.add({
  name: `router A under ${TRICKLERS} trickling uploads`,
  stats: summarizeRounds(during.a.rounds, 0.1),
  unit: 'ms',
  baseline: [B1, A0],
  target: 2 * b1.p99,
  targetStat: 'p99',
  note: `target: p99 ≤ 2 × B's p99 in the same instants (${b1.p99.toFixed(2)} ms); ${during.a.failures} of the legitimate requests failed; ` +
    `${buffering} bodies being read by the router once the attack was under way; pod connections ${podConnectionsBefore} then at most ${podConnectionsMax} (the legitimate client's to A and B); ` +
    `uploads answered ${answered === '' ? 'none' : answered} (${refusedSlow} counted body_rate_too_low); router CPU ${during.a.cpuShare()}`,
})
report.info('buffer and share off', `the same attack against --http-body-buffer-bytes 0 --http-upstream-max-client-share-percent 0 (a request takes its pod connection at its head): ${legacyPodConnections} pod connections held by the attack; 20 legitimate requests: ${Object.entries(outcomes).map(([k, n]) => `${n} × ${k}`).join(', ')}`)
report.finish()
