/**
 * The WebTransport relay (lib/tunnel/webtransport-*.ts), against a Pylon talking to
 * the Stargate pod directly, measured in one run:
 *
 * 1. 64 MiB over one bidirectional stream: direct vs through the router (target: the relay
 *    keeps at least half the direct throughput).
 * 2. 500 concurrent sessions sending small messages (1 KiB request, 1 KiB echo, one stream
 *    per message, as proxied LLM requests): round-trip latency direct and through the router,
 *    the p99 the router adds, and the router's resident memory with the sessions open. Two
 *    loads: paced (50 of the 500 sessions send at a time, in turn, so every session sends in
 *    each round and the load generator is not the bottleneck) and a burst (all 500 at once:
 *    mostly queueing in this process, shown for the tail).
 *
 * The router runs as `node server/main.ts --discovery file --tunnel-protocol webtransport`
 * in its own process (so its RSS is its own and it has a core to itself); the Pylons and stub
 * Stargate pods (the library's session engine, test/fixtures/webtransport-*.ts) run here.
 * Environment: WT_BENCH_SESSIONS (default 500), WT_BENCH_ROUNDS (default 10).
 */
import { collectGarbage, measureEach, now, Report, summarize, summarizeRounds } from '../_util.ts'
import { startWtRouterProcess } from '../../test/fixtures/webtransport-process.ts'
import { openPylonSession, type PylonTarget } from '../../test/fixtures/webtransport-pylon.ts'
import { payload, readAll, writeAll } from '../../test/fixtures/webtransport-streams.ts'
import type { EngineSession } from '../../test/fixtures/webtransport-engine.ts'

const MiB = 2 ** 20
const TRANSFER_BYTES = 64 * MiB
const CHUNK = payload(64 * 1024, 1)
const SESSIONS = Number(process.env.WT_BENCH_SESSIONS ?? 500)
const ROUNDS = Number(process.env.WT_BENCH_ROUNDS ?? (process.env.BENCH_QUICK === '1' ? 3 : 10))
const PACED = 50
const MESSAGE = payload(1024, 2)

const cleanups: Array<() => unknown> = []
const teardown = { teardown: (fn: () => unknown): void => { cleanups.push(fn) } }

async function open (target: PylonTarget): Promise<EngineSession> {
  const opened = await openPylonSession(teardown, target)
  if (opened.wt === null) throw new Error(`no session to ${target.servername}: ${opened.status} ${opened.body}`)
  return opened.wt.session
}

/** One 64 MiB upload on a new stream; the pod answers with the byte count. */
async function transfer (session: EngineSession): Promise<number> {
  const t0 = now()
  const bidi = await session.createBidirectionalStream()
  const writer = bidi.writable.getWriter()
  for (let sent = 0; sent < TRANSFER_BYTES; sent += CHUNK.length) await writer.write(CHUNK)
  await writer.close()
  const answer = (await readAll(bidi.readable)).toString()
  const elapsed = now() - t0
  if (Number(answer) !== TRANSFER_BYTES) throw new Error(`the pod counted ${answer} bytes, not ${TRANSFER_BYTES}`)
  return elapsed
}

/** Every session sends one message on a new stream at once; returns each round trip (ns). */
async function wave (sessions: readonly EngineSession[]): Promise<number[]> {
  return Promise.all(sessions.map(roundTrip))
}

/** Every session sends one message, `at` sessions at a time. */
async function paced (sessions: readonly EngineSession[], at: number): Promise<number[]> {
  const out: number[] = []
  for (let i = 0; i < sessions.length; i += at) out.push(...await wave(sessions.slice(i, i + at)))
  return out
}

async function roundTrip (session: EngineSession): Promise<number> {
  const t0 = now()
  const bidi = await session.createBidirectionalStream()
  const [, echoed] = await Promise.all([writeAll(bidi.writable, MESSAGE), readAll(bidi.readable)])
  const elapsed = now() - t0
  if (echoed.length !== MESSAGE.length) throw new Error(`echo of ${echoed.length} bytes`)
  return elapsed
}

const report = new Report('tunnel/webtransport')
const router = await startWtRouterProcess(teardown, {
  pods: ['stargate-sink', 'stargate-echo'],
  stub: { forget: true },
  stubFor: (pod) => ({ mode: pod === 'stargate-sink' ? 'sink' : 'echo' }),
})
try {
  const rssIdle = router.rss()

  // 1. Throughput, one stream.
  const direct = await open(router.directTarget('stargate-sink'))
  const relayed = await open(router.target('stargate-sink'))
  const throughput = await measureEach({
    direct: () => transfer(direct),
    relayed: () => transfer(relayed),
  }, { samplesPerRound: 2, minRounds: 3, maxRounds: 10, maxSpread: 0.1, warmupMs: 0, maxTimeMs: 120_000 })
  const directCase = report.add({ name: '64 MiB, one stream, direct (baseline)', stats: throughput.direct, unit: 'ms' })
  report.add({
    name: '64 MiB, one stream, through the router',
    stats: throughput.relayed,
    unit: 'ms',
    baseline: directCase.name,
    target: 2 * directCase.median,
    note: `target: at least half the direct throughput (≤ 2 × the direct median); ${(TRANSFER_BYTES / MiB / (throughput.direct.median / 1e9)).toFixed(0)} MiB/s direct, ` +
      `${(TRANSFER_BYTES / MiB / (throughput.relayed.median / 1e9)).toFixed(0)} MiB/s relayed (medians)`,
  })
  const rssAfterTransfers = router.rss()
  collectGarbage()

  // 2. Latency with many sessions.
  const directSessions: EngineSession[] = []
  const relayedSessions: EngineSession[] = []
  for (let i = 0; i < SESSIONS; i += 50) {
    await Promise.all(Array.from({ length: Math.min(50, SESSIONS - i) }, async () => {
      directSessions.push(await open(router.directTarget('stargate-echo')))
      relayedSessions.push(await open(router.target('stargate-echo')))
    }))
  }
  const rssSessions = router.rss()
  await paced(directSessions, PACED)
  await paced(relayedSessions, PACED)
  const rounds = { direct: [] as number[][], relayed: [] as number[][], burstDirect: [] as number[][], burstRelayed: [] as number[][] }
  for (let i = 0; i < ROUNDS; i++) {
    rounds.direct.push(await paced(directSessions, PACED))
    rounds.relayed.push(await paced(relayedSessions, PACED))
  }
  for (let i = 0; i < Math.max(3, Math.ceil(ROUNDS / 3)); i++) {
    rounds.burstDirect.push(await wave(directSessions))
    rounds.burstRelayed.push(await wave(relayedSessions))
  }
  const rssLoaded = router.rss()
  const pairs = [
    { label: `${SESSIONS} sessions, ${PACED} sending at a time`, direct: summarizeRounds(rounds.direct, 0.1), relayed: summarizeRounds(rounds.relayed, 0.1) },
    { label: `${SESSIONS} sessions, all sending at once`, direct: summarizeRounds(rounds.burstDirect, 0.1), relayed: summarizeRounds(rounds.burstRelayed, 0.1) },
  ]
  for (const pair of pairs) {
    const base = report.add({ name: `${pair.label}: 1 KiB echo, direct (baseline)`, stats: pair.direct, unit: 'ms' })
    report.add({
      name: `${pair.label}: 1 KiB echo, through the router`,
      stats: pair.relayed,
      unit: 'ms',
      baseline: base.name,
      note: `round trip of one message on a new stream; added by the router: median ${((pair.relayed.median - pair.direct.median) / 1e6).toFixed(2)} ms, ` +
        `p99 ${((pair.relayed.p99 - pair.direct.p99) / 1e6).toFixed(2)} ms`,
    })
  }
  const pacedPair = pairs[0] as (typeof pairs)[number]
  const one = (kib: number): ReturnType<typeof summarize> => summarize([kib], 1, 0, true)
  const idleCase = report.add({ name: 'router RSS, idle after start-up', stats: one(rssIdle / 1024), unit: 'KiB' })
  report.add({
    name: `router RSS, ${SESSIONS} sessions open after the load`,
    stats: one(rssLoaded / 1024),
    unit: 'KiB',
    baseline: idleCase.name,
    note: `${((rssSessions - rssAfterTransfers) / SESSIONS / 1024).toFixed(1)} KiB per session when they were opened (two TLS connections and two HTTP/2 sessions each); one sample, read from /proc`,
  })
  report.info('sessions', SESSIONS)
  report.info('rounds', ROUNDS)
  report.info('routerRssIdleMiB', Number((rssIdle / MiB).toFixed(1)))
  report.info('routerRssAfterTransfersMiB', Number((rssAfterTransfers / MiB).toFixed(1)))
  report.info(`routerRss${SESSIONS}SessionsMiB`, Number((rssSessions / MiB).toFixed(1)))
  report.info(`routerRss${SESSIONS}SessionsLoadedMiB`, Number((rssLoaded / MiB).toFixed(1)))
  report.info('routerKiBPerSession', Number(((rssSessions - rssAfterTransfers) / SESSIONS / 1024).toFixed(1)))
  report.info('pacedP99AddedMs', Number(((pacedPair.relayed.p99 - pacedPair.direct.p99) / 1e6).toFixed(2)))
  console.log(`  router RSS: ${(rssIdle / MiB).toFixed(0)} MiB idle, ${(rssAfterTransfers / MiB).toFixed(0)} MiB after the transfers, ` +
    `${(rssSessions / MiB).toFixed(0)} MiB with ${SESSIONS} sessions opened (${((rssSessions - rssAfterTransfers) / SESSIONS / 1024).toFixed(1)} KiB each), ${(rssLoaded / MiB).toFixed(0)} MiB after the load`)
  for (const pair of pairs) {
    console.log(`  ${pair.label}: the router adds ${((pair.relayed.median - pair.direct.median) / 1e6).toFixed(2)} ms at the median, ${((pair.relayed.p99 - pair.direct.p99) / 1e6).toFixed(2)} ms at p99`)
  }
} finally {
  for (const fn of cleanups.reverse()) {
    try {
      await fn()
    } catch {
      // best effort: the process exits next
    }
  }
}
report.finish()
process.exit(0)
