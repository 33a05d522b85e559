// Issue 8, SPEC §3: Stargate may run as a Deployment or as a StatefulSet, and both give the same
// contract: one advertised identity per ready pod, the Pod name, routable (registration, HTTP)
// to the pod's current IP and ports, in every intermediate state of scaling, rolling
// replacement, readiness failures and slice churn. One table of rows (workload kinds) runs the same
// steps; each step is checked in every phase and once more when it settled (matrix.ts lists the
// checks). The failure mode this guards against: the Rust router advertised DNS names, which for
// a Deployment were dashed-IP aliases no route matched, so Pylons retried forever.
//
// The router is the real one, in-process, watching a simulated cluster
// (test/fixtures/cluster) through the fake API server; pods are stub Stargates on their own
// loopback IPs (one subnet per row, 127.0.211/212, owned by this file; 213–218 belong to the
// other files of test/conformance).
import t from 'tap'
import { startKubeRouter } from '../fixtures/kube-router.ts'
import { Pylon } from '../fixtures/pylon.ts'
import { SimulatedCluster, type Operation, type WorkloadKind } from '../fixtures/cluster/cluster.ts'
import { MatrixRun, PYLON_ID, percentile, type Convergence } from './matrix.ts'
import { ReconcilingPylon } from './reconciling-pylon.ts'
import { ROUTE_CHECKS, grpcRegistrationCheck, llmHttpCheck, prepareRouteChecks, webTransportTunnelCheck, type RouteChecker } from './route-checks.ts'

// Measured: about 3–5 s per row, 10–19 s for the file, on a 2-core machine at load 10; this
// bound only stops a broken router from hanging the run (each step waits up to 15 s).
t.setTimeout(180_000)

/** Generous bound on advertised-set convergence (API write → WatchStargates message). */
const CONVERGENCE_BOUND_MS = 5000
const DRAIN_GRACE_MS = 300
/** Small, so three pods need two slices and churn moves endpoints between several. */
const MAX_ENDPOINTS_PER_SLICE = 2

/** One row of the matrix: a workload kind, its pods' subnet, the route checkers it runs. */
interface Row {
  readonly kind: WorkloadKind
  /** Which reverse tunnel the row's router serves. */
  readonly tunnel: 'raw QUIC' | 'WebTransport'
  readonly subnet: string
  readonly checks: readonly RouteChecker[]
}

const ROWS: readonly Row[] = [
  { kind: 'Deployment', tunnel: 'raw QUIC', subnet: '127.0.211', checks: ROUTE_CHECKS },
  { kind: 'StatefulSet', tunnel: 'raw QUIC', subnet: '127.0.212', checks: ROUTE_CHECKS },
  // WebTransport needs --tunnel-protocol webtransport, hence a router (and rows) of its own.
  { kind: 'Deployment', tunnel: 'WebTransport', subnet: '127.0.219', checks: [grpcRegistrationCheck, llmHttpCheck, webTransportTunnelCheck()] },
  { kind: 'StatefulSet', tunnel: 'WebTransport', subnet: '127.0.220', checks: [grpcRegistrationCheck, llmHttpCheck, webTransportTunnelCheck()] },
]

interface Step {
  readonly name: string
  run (cluster: SimulatedCluster): Operation
}

function secondReadyPod (cluster: SimulatedCluster): string {
  const pod = cluster.readyPods()[1]
  if (pod === undefined) throw new Error(`no second ready pod: ${cluster.describe()}`)
  return pod.name
}

const STEPS: readonly Step[] = [
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

const measured: Convergence[] = []

for (const { kind, tunnel, subnet, checks: rowChecks } of ROWS) {
  t.test(`${kind} (${tunnel} tunnels): one routable identity per ready pod through every step`, async (t) => {
    const checks = await prepareRouteChecks(t, rowChecks)
    const cluster = await SimulatedCluster.start(t, { kind, subnet, maxEndpointsPerSlice: MAX_ENDPOINTS_PER_SLICE, runtime: checks.runtime })
    const kube = await startKubeRouter(t, {
      fake: cluster.fake,
      args: ['--target-service-name', cluster.service, '--drain-grace-ms', String(DRAIN_GRACE_MS), '--reverse-tunnel-listen-addr', '127.0.0.1:0', ...checks.routerArgs],
    })
    const pylon = new ReconcilingPylon(new Pylon({ routerAddress: kube.address, heartbeatMs: 250, inferenceServerId: PYLON_ID }), {
      isReady: (id) => cluster.pod(id)?.state === 'ready',
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
    measured.push(...run.convergence)
    t.comment(`${kind}: advertised set converged ${times.length} times, p50 ${percentile(times, 50).toFixed(1)} ms, max ${Math.max(...times).toFixed(1)} ms (API write → WatchStargates message)`)
    const slow = run.convergence.filter((c) => c.ms > CONVERGENCE_BOUND_MS).map((c) => `${c.phase}: ${c.ms.toFixed(0)} ms`)
    t.strictSame(slow, [], `${kind}: every change reached the Pylon within ${CONVERGENCE_BOUND_MS} ms`)
    t.ok(times.length >= 10, `${kind}: enough changes measured (${times.length})`)
    t.equal(pylon.attempts.filter((a) => !a.succeeded).length, 0, `${kind}: all ${pylon.attempts.length} registration streams the Pylon opened succeeded`)
  })
}

t.test('convergence across both kinds', async (t) => {
  const times = measured.map((c) => c.ms)
  t.ok(times.length > 0, 'measured')
  t.comment(`both kinds: ${times.length} changes, p50 ${percentile(times, 50).toFixed(1)} ms, p90 ${percentile(times, 90).toFixed(1)} ms, max ${Math.max(...times).toFixed(1)} ms`)
})
