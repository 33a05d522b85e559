/**
 * The rows of the workload conformance matrix (SPEC §3) and how one row runs: a
 * simulated cluster of one workload kind behind one flavour of Service, the real router
 * in-process watching it, a reconciling Pylon, and the steps below, each checked in every phase
 * and once more when it settled (matrix.ts lists the checks). The workload-matrix*.test.ts files
 * each run a few rows, so that every file stays well inside tap's per-file timeout on a loaded
 * machine.
 *
 * Flavours: a readiness-respecting Service, and a publishNotReadyAddresses one as upstream's
 * chart points the router at (its headless Service `llm-request-router-headless`).
 * Behind the latter a created pod is a target from the start (warming: advertised, registrable,
 * tunnelled, but no LLM HTTP until it is Ready), so every step's "created (not ready)" phase
 * is a warm-up, and a rollout and a scale-down run through it.
 */
import type { Test } from 'tap'
import { startKubeRouter } from '../fixtures/kube-router.ts'
import { Pylon } from '../fixtures/pylon.ts'
import { SimulatedCluster, type Operation, type WorkloadKind } from '../fixtures/cluster/cluster.ts'
import { MatrixRun, PYLON_ID, percentile, type Convergence } from './matrix.ts'
import { ReconcilingPylon } from './reconciling-pylon.ts'
import { prepareRouteChecks, type RouteChecker } from './route-checks.ts'

/** Generous bound on advertised-set convergence (API write → WatchStargates message). */
const CONVERGENCE_BOUND_MS = 5000
export const DRAIN_GRACE_MS = 300
/** Small, so three pods need two slices and churn moves endpoints between several. */
const MAX_ENDPOINTS_PER_SLICE = 2

export type ServiceFlavour = 'readiness-respecting' | 'publishNotReadyAddresses'

/** One row of the matrix: a workload kind behind a Service flavour, its pods' subnet, its route checkers. */
export interface Row {
  readonly kind: WorkloadKind
  readonly service: ServiceFlavour
  /** Which reverse tunnel the row's router serves. */
  readonly tunnel: 'raw QUIC' | 'WebTransport'
  /** First three octets of the pods' IPs, owned by one row of one file. */
  readonly subnet: string
  readonly checks: readonly RouteChecker[]
}

interface Step {
  readonly name: string
  run (cluster: SimulatedCluster): Operation
}

function secondReadyPod (cluster: SimulatedCluster): string {
  const pod = cluster.readyPods()[1]
  if (pod === undefined) throw new Error(`no second ready pod: ${cluster.describe()}`)
  return pod.name
}

export const STEPS: readonly Step[] = [
  { name: 'fresh install with one replica', run: (c) => c.install(1) },
  { name: 'scale 1 → 3', run: (c) => c.scale(3) },
  { name: 'rolling replacement of every pod', run: (c) => c.rollingUpdate() },
  {
    name: 'a pod fails readiness, then recovers',
    run: async function * (c) {
      const name = secondReadyPod(c)
      yield * c.failReadiness(name)
      yield * c.recoverReadiness(name)
    },
  },
  { name: 'slice churn', run: (c) => c.churnSlices() },
  { name: 'scale 3 → 1', run: (c) => c.scale(1) },
]

/** Runs one subtest per row; returns every convergence time measured. */
export async function runRows (t: Test, rows: readonly Row[]): Promise<Convergence[]> {
  const measured: Convergence[] = []
  for (const row of rows) {
    await t.test(`${row.kind} behind a ${row.service} Service (${row.tunnel} tunnels): one routable identity per target pod through every step`, async (t) => {
      measured.push(...await runRow(t, row))
    })
  }
  return measured
}

async function runRow (t: Test, row: Row): Promise<Convergence[]> {
  const { kind, subnet, checks: rowChecks } = row
  const checks = await prepareRouteChecks(t, rowChecks)
  const cluster = await SimulatedCluster.start(t, { kind, subnet, maxEndpointsPerSlice: MAX_ENDPOINTS_PER_SLICE, runtime: checks.runtime, publishNotReadyAddresses: row.service === 'publishNotReadyAddresses' })
  const kube = await startKubeRouter(t, {
    fake: cluster.fake,
    args: ['--target-service-name', cluster.service, '--drain-grace-ms', String(DRAIN_GRACE_MS), '--reverse-tunnel-listen-addr', '127.0.0.1:0', ...checks.routerArgs],
  })
  const pylon = new ReconcilingPylon(new Pylon({ routerAddress: kube.address, heartbeatMs: 250, inferenceServerId: PYLON_ID }), {
    isTarget: (id) => cluster.isTarget(id),
    isServing: (id) => cluster.pod(id)?.state === 'ready',
  })
  t.teardown(() => { pylon.close() })
  pylon.start()
  const run = new MatrixRun({ cluster, kube, pylon, drainGraceMs: DRAIN_GRACE_MS, checks: rowChecks })
  await run.begin()
  t.equal(pylon.latest?.ids.length, 0, 'before the install the router advertises nothing')

  for (const step of STEPS) {
    if (run.failed) {
      t.fail(`${step.name}: not run, the advertised set stopped converging in an earlier step`)
      continue
    }
    await t.test(step.name, async (t) => {
      let phases = 0
      for await (const phase of step.run(cluster)) {
        phases++
        await run.checkPhase(t, phase)
      }
      t.ok(phases > 0, `${phases} phases checked`)
      await run.checkSettled(t, step.name)
    })
  }

  await run.fence()
  run.finish(t)
  const times = run.convergence.map((c) => c.ms)
  t.comment(`${kind} (${row.service}): advertised set converged ${times.length} times, p50 ${percentile(times, 50).toFixed(1)} ms, max ${Math.max(...times).toFixed(1)} ms (API write → WatchStargates message)`)
  const slow = run.convergence.filter((c) => c.ms > CONVERGENCE_BOUND_MS).map((c) => `${c.phase}: ${c.ms.toFixed(0)} ms`)
  t.strictSame(slow, [], `${kind}: every change reached the Pylon within ${CONVERGENCE_BOUND_MS} ms`)
  // Behind a publishNotReadyAddresses Service turning Ready changes nothing advertised: fewer changes.
  const enough = row.service === 'publishNotReadyAddresses' ? 7 : 10
  t.ok(times.length >= enough, `${kind}: enough changes measured (${times.length}, at least ${enough})`)
  t.equal(pylon.attempts.filter((a) => !a.succeeded).length, 0, `${kind}: all ${pylon.attempts.length} registration streams the Pylon opened succeeded`)
  if (row.service === 'publishNotReadyAddresses') {
    // The warm-up: streams were opened to pods that were not Ready yet.
    const warming = pylon.attempts.filter((a) => a.servingAtOpen === false).length
    t.ok(warming > 0, `${kind}: ${warming} registration streams were opened to warming pods`)
  }
  return run.convergence
}

/** One line on the convergence times of a file's rows. */
export function reportConvergence (t: Test, measured: readonly Convergence[]): void {
  const times = measured.map((c) => c.ms)
  t.ok(times.length > 0, 'measured')
  t.comment(`all rows: ${times.length} changes, p50 ${percentile(times, 50).toFixed(1)} ms, p90 ${percentile(times, 90).toFixed(1)} ms, max ${Math.max(...times).toFixed(1)} ms`)
}
