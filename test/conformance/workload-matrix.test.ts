// SPEC §3: Stargate may run as a Deployment or as a StatefulSet, and both give the same
// contract: one advertised identity per target pod, the Pod name, routable (registration, HTTP)
// to the pod's current IP and ports, in every intermediate state of scaling, rolling
// replacement, readiness failures and slice churn. The failure mode this guards against: the
// Rust router advertised DNS names, which for a Deployment were dashed-IP aliases no route
// matched, so Pylons retried forever. Rows, steps and checks: matrix-rows.ts, matrix.ts.
//
// This file: a readiness-respecting Service, raw QUIC tunnels. The router is the real one,
// in-process, watching a simulated cluster (test/fixtures/cluster) through the fake API server;
// pods are stub Stargates on their own loopback IPs (one subnet per row, 127.0.211/212, owned by
// this file; the other workload-matrix files own 219–224, the rest of test/conformance 213–218).
import t from 'tap'
import { ROUTE_CHECKS } from './route-checks.ts'
import { reportConvergence, runRows } from './matrix-rows.ts'

// Measured: about 3–5 s per row, 10–19 s for the file, on a 2-core machine at load 10; this
// bound only stops a broken router from hanging the run (each step waits up to 15 s).
t.setTimeout(180_000)

const measured = await runRows(t, [
  { kind: 'Deployment', service: 'readiness-respecting', tunnel: 'raw QUIC', subnet: '127.0.211', checks: ROUTE_CHECKS },
  { kind: 'StatefulSet', service: 'readiness-respecting', tunnel: 'raw QUIC', subnet: '127.0.212', checks: ROUTE_CHECKS },
])

t.test('convergence across both kinds', async (t) => { reportConvergence(t, measured) })
