// The publishNotReadyAddresses rows of the workload conformance matrix
// (workload-matrix-warming.test.ts) with WebTransport tunnels, which need a router of their
// own: warming pods take WebTransport sessions too, never LLM HTTP. Pods' subnets
// 127.0.223/224 are owned by this file.
import t from 'tap'
import { grpcRegistrationCheck, llmHttpCheck, webTransportTunnelCheck } from './route-checks.ts'
import { reportConvergence, runRows } from './matrix-rows.ts'

t.setTimeout(180_000)

const measured = await runRows(t, [
  { kind: 'Deployment', service: 'publishNotReadyAddresses', tunnel: 'WebTransport', subnet: '127.0.223', checks: [grpcRegistrationCheck, llmHttpCheck, webTransportTunnelCheck()] },
  { kind: 'StatefulSet', service: 'publishNotReadyAddresses', tunnel: 'WebTransport', subnet: '127.0.224', checks: [grpcRegistrationCheck, llmHttpCheck, webTransportTunnelCheck()] },
])

t.test('convergence across both kinds', async (t) => { reportConvergence(t, measured) })
