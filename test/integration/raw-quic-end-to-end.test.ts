/**
 * End to end: a Pylon watches the router, registers with a Stargate through it, and
 * dials the reverse tunnel its registration ack names (reverse_tunnel_target, the Stargate's
 * advertised host and the router's tunnel port) with that host as SNI; the Stargate's proxied
 * request reaches the Pylon through the router and the answer comes back.
 */
import t from 'tap'
import * as grpc from '@grpc/grpc-js'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { StubStargate } from '../fixtures/stub-stargate.ts'
import { Pylon } from '../fixtures/pylon.ts'
import { PylonTunnel } from '../fixtures/quic-pylon.ts'
import { waitFor } from '../fixtures/wait.ts'

t.test('a Pylon registers, dials the tunnel named in its ack, and answers the Stargate through it', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0', 'stargate-1'], subnet: '127.0.66' })
  // Each pod also serves the gRPC control plane on its IP; its acks name the router's tunnel port.
  for (const name of ['stargate-0', 'stargate-1']) {
    const quicStub = cluster.stubs.get(name)
    if (quicStub === undefined) throw new Error('no stub')
    const grpcStub = await StubStargate.start({ podName: name, ip: cluster.ipOf(name), advertisedHost: cluster.host(name), quicPort: cluster.tunnelPort })
    t.teardown(() => { grpcStub.kill() })
    cluster.list(name, cluster.ipOf(name), quicStub.port, true, grpcStub.port)
  }
  // The control plane over the cleartext front door (h2c, as a TLS-terminating Gateway forwards
  // it); the router's TLS identity is the tunnels'.
  const pylon = new Pylon({
    routerAddress: cluster.kube.address,
    credentials: grpc.credentials.createInsecure(),
    channelOptions: { 'grpc.use_local_subchannel_pool': 1 },
  })
  t.teardown(() => { pylon.close() })
  pylon.watch(() => { pylon.registerAll() })
  for (const name of ['stargate-0', 'stargate-1']) {
    const registration = await waitFor(() => pylon.registrations.get(name)?.acks[0] !== undefined && pylon.registrations.get(name), { timeoutMs: 10_000, message: `an ack from ${name}` })
    const target = registration.acks[0]?.reverseTunnelTarget ?? ''
    const host = target.slice(0, target.lastIndexOf(':'))
    const port = Number(target.slice(target.lastIndexOf(':') + 1))
    t.equal(host, cluster.host(name), `${name}: the ack names the Stargate's advertised host`)
    t.equal(port, cluster.tunnelPort, `${name}: and the router's tunnel port`)
    const tunnel = await PylonTunnel.dial(t, { port, serverName: host, caPem: cluster.tls.ca.certPem })
    await tunnel.ready()
    const stub = cluster.stubs.get(name)
    const accepted = await stub?.tunnel()
    if (stub === undefined || accepted === undefined) throw new Error('no tunnel at the pod')
    const answer = await stub.request(accepted, '{"model":"m","prompt":"hi"}')
    t.equal(answer.toString(), 'pylon:{"model":"m","prompt":"hi"}', `${name}: the Stargate's request is answered by the Pylon`)
  }
})
