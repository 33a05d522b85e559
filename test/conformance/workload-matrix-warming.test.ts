// SPEC §3 rule 2: upstream keeps each new Stargate unready for its first 60 s so that
// Pylons register before gateway traffic, and points the router at its headless Service with
// publishNotReadyAddresses: true, where Kubernetes lists a warming pod ready=true,
// serving=false. The failure mode: a router that required `serving` dropped every warming
// Stargate, which then turned ready with no Pylon registered. Here the workload conformance
// matrix (matrix-rows.ts, matrix.ts) runs Deployment and StatefulSet behind such a Service with
// raw QUIC tunnels: through every warm-up (each created pod), a rollout and a scale-down, a
// warming pod is advertised, takes registrations and tunnels, and never LLM HTTP until it is
// Ready. Pods' subnets 127.0.221/222 are owned by this file.
import t from 'tap'
import { ROUTE_CHECKS } from './route-checks.ts'
import { reportConvergence, runRows } from './matrix-rows.ts'

t.setTimeout(180_000)

const measured = await runRows(t, [
  { kind: 'Deployment', service: 'publishNotReadyAddresses', tunnel: 'raw QUIC', subnet: '127.0.221', checks: ROUTE_CHECKS },
  { kind: 'StatefulSet', service: 'publishNotReadyAddresses', tunnel: 'raw QUIC', subnet: '127.0.222', checks: ROUTE_CHECKS },
])

t.test('convergence across both kinds', async (t) => { reportConvergence(t, measured) })
