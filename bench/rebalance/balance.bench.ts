/**
 * Replica balancing (SPEC §10; lib/rebalance): how long three router processes take to even out
 * 60 Pylon-like clients that all landed on the first one, and the gap a moved tunnel leaves.
 * The set-up of test/integration/rebalance-rollout.test.ts (test/fixtures/rebalance-cluster.ts):
 * a layer-4 load balancer (a random live replica per new TCP connection or UDP flow), a
 * Stargate-like pod sending a request through every tunnel every 100 ms, and Pylons that each
 * hold a registration and a raw QUIC tunnel and dial again 0–1 s after either ends. The routers
 * run with --rebalance-interval-ms 1000 (the default is 5000) and the default tolerance and cap.
 *
 * Per run: the time from the two routers joining to every replica within its share ± the
 * tolerance of each kind, and for each moved tunnel the gap from the last answer on the old
 * tunnel to the first on the new one. Baselines measured in the same run:
 * - time to balance: what the re-placement model (test/fixtures/rebalance-model.ts, decide()
 *   itself, moved connections landing at once) predicts for 60/0/0 at the same interval, over
 *   1000 seeded runs: the ratio shows what re-dials, settling and peer reads add;
 * - the gap: 20 Pylons closing their own tunnel once balanced and dialling it again with the
 *   same 0–1 s backoff, a re-dial without any move: the ratio shows what a move adds to it.
 * BENCH_REBALANCE_RUNS (default 3; 1 with BENCH_QUICK=1) scenario runs of about a minute each.
 */
import { Report, summarize, type Stats } from '../_util.ts'
import { RebalanceCluster } from '../../test/fixtures/rebalance-cluster.ts'
import { runModel, seeded } from '../../test/fixtures/rebalance-model.ts'
import { waitFor } from '../../test/fixtures/wait.ts'
import { QUIC_CLOSE_REASONS } from '../../lib/tunnel/errors.ts'

const PYLONS = 60
const INTERVAL_MS = 1000
const TOLERANCE = 0.2
const BOUNCED = 20
const RUNS = Number(process.env.BENCH_REBALANCE_RUNS ?? (process.env.BENCH_QUICK === '1' ? 1 : 3))
const BOUNCE_REASON = 'pylon redial'

interface RunResult {
  readonly balancedMs: number
  readonly movedGaps: number[]
  readonly redialGaps: number[]
  readonly moves: { readonly registration: number, readonly raw_quic: number }
  /** Requests failed after they started, while the replicas balanced. */
  readonly failures: number
  readonly unsent: number
}

async function runOnce (run: number): Promise<RunResult> {
  const closers: Array<() => unknown> = []
  const t = { teardown: (fn: () => unknown): void => { closers.push(fn) } }
  try {
    const cluster = await RebalanceCluster.start(t, { subnet: `127.0.${155 + run}`, intervalMs: INTERVAL_MS, peerTimeoutMs: 500, tolerance: TOLERANCE })
    const { fleet } = await cluster.pylonsOnOneRouter(PYLONS)
    const joined = Date.now()
    await cluster.addRouters(2)
    await waitFor(async () => RebalanceCluster.balanced(await cluster.loads(), PYLONS, TOLERANCE), { timeoutMs: 120_000, intervalMs: 250, message: 'balanced' })
    const balancedMs = Date.now() - joined
    const moves = await cluster.moves()
    // Before the baseline: a Pylon closing its own tunnel fails what is in flight on it.
    const failures = cluster.prober.failures.length
    // The baseline gap: Pylons closing their own tunnels, 150 ms apart from each other.
    const bounceStart = Date.now()
    const bounced = new Set<string>()
    for (const pylon of fleet.pylons.slice(0, BOUNCED)) {
      if (pylon.bounceTunnel(BOUNCE_REASON)) bounced.add(pylon.id)
      await new Promise((resolve) => { setTimeout(resolve, 150) })
    }
    const redials = (): number[] => cluster.prober.gaps.filter((g) => g.at > bounceStart && bounced.has(g.pylon)).map((g) => g.ms)
    await waitFor(() => redials().length >= bounced.size, { timeoutMs: 30_000, message: 'the re-dialled tunnels answered' })
    return {
      balancedMs,
      movedGaps: cluster.prober.gaps.filter((g) => g.at <= bounceStart && g.reason === QUIC_CLOSE_REASONS.rebalancing.reason).map((g) => g.ms),
      redialGaps: redials(),
      moves: { registration: moves.registration, raw_quic: moves.raw_quic },
      failures,
      unsent: cluster.prober.refused + cluster.prober.unsentAtClose,
    }
  } finally {
    for (const close of closers.reverse()) await close()
  }
}

function ms (values: readonly number[], rounds: number): Stats {
  return summarize(values.map((v) => v * 1e6), rounds, 0, true)
}

const report = new Report('rebalance/balance')
report.info('load', `${PYLONS} Pylons (a registration and a raw QUIC tunnel each, re-dial after 0–1 s) all on the first of 3 routers, then the other two join; a request per tunnel every 100 ms; --rebalance-interval-ms ${INTERVAL_MS}, tolerance ${TOLERANCE}, automatic cap; ${RUNS} runs`)

const model: number[] = []
const random = seeded(7)
for (let i = 0; i < 1000; i++) {
  const result = runModel({ initial: [PYLONS, 0, 0], tolerance: TOLERANCE, maxMovesPerInterval: 0, intervals: 120, rule: 'two-sided', random })
  if (result.balancedAt !== null) model.push(result.balancedAt * INTERVAL_MS)
}
const modelName = `time to balance predicted by the re-placement model (60/0/0, ${INTERVAL_MS} ms intervals, moves landing at once)`
report.add({ name: modelName, stats: ms(model, 1), unit: 'ms', note: `${model.length} of 1000 model runs balanced` })

const runs: RunResult[] = []
for (let run = 0; run < RUNS; run++) {
  const result = await runOnce(run)
  runs.push(result)
  console.error(`  run ${run + 1}: balanced after ${result.balancedMs} ms; moved ${result.moves.registration} registration connections and ${result.moves.raw_quic} tunnels; ${result.failures} failed requests, ${result.unsent} never relayed and sent again`)
}

report.add({
  name: 'time to balance: 3 routers, 60 Pylons, from the two joining to every replica at 20 ± 4 of each kind',
  stats: ms(runs.map((r) => r.balancedMs), runs.length),
  unit: 'ms',
  baseline: modelName,
  note: `moves per run (registrations/tunnels): ${runs.map((r) => `${r.moves.registration}/${r.moves.raw_quic}`).join(', ')}; failed requests: ${runs.reduce((n, r) => n + r.failures, 0)}`,
})
const redialName = 'gap of a tunnel its Pylon closes and dials again (0–1 s backoff): last answer on the old tunnel to the first on the new'
report.add({ name: redialName, stats: ms(runs.flatMap((r) => r.redialGaps), runs.length), unit: 'ms', note: `${runs.reduce((n, r) => n + r.redialGaps.length, 0)} re-dials` })
report.add({
  name: 'gap of a moved tunnel: last answer on the old tunnel to the first on the new',
  stats: ms(runs.flatMap((r) => r.movedGaps), runs.length),
  unit: 'ms',
  baseline: redialName,
  note: `${runs.reduce((n, r) => n + r.movedGaps.length, 0)} moved tunnels; requests never relayed and sent again: ${runs.reduce((n, r) => n + r.unsent, 0)}`,
})
const result = report.finish()
for (const c of result.cases) if (c.note !== undefined) console.error(`  ${c.name}: ${c.note}`)
process.exit(0)
