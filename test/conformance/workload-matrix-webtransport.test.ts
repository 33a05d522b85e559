// SPEC §3 and §7: the workload conformance matrix (matrix-rows.ts, matrix.ts) with
// WebTransport tunnels, which need --tunnel-protocol webtransport and so a router (and rows) of
// their own: Deployment and StatefulSet behind a readiness-respecting Service. Pods' subnets
// 127.0.219/220 are owned by this file.
import t from 'tap'
import { grpcRegistrationCheck, llmHttpCheck, webTransportTunnelCheck } from './route-checks.ts'
import { reportConvergence, runRows } from './matrix-rows.ts'

t.setTimeout(180_000)

const measured = await runRows(t, [
  { kind: 'Deployment', service: 'readiness-respecting', tunnel: 'WebTransport', subnet: '127.0.219', checks: [grpcRegistrationCheck, llmHttpCheck, webTransportTunnelCheck()] },
  { kind: 'StatefulSet', service: 'readiness-respecting', tunnel: 'WebTransport', subnet: '127.0.220', checks: [grpcRegistrationCheck, llmHttpCheck, webTransportTunnelCheck()] },
])

t.test('convergence across both kinds', async (t) => { reportConvergence(t, measured) })
