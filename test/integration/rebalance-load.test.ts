// SPEC §10, replica balancing: GET /debug/load on the health port reports this replica's
// Pylon-facing connections by kind — front-door HTTP/2 connections carrying registrations (two
// registrations on one connection are one), raw QUIC tunnels, WebTransport sessions — with its
// identity, whatever the flags; stargate_k8s_router_rebalance_load shows the same figures, and
// a peer's load fetcher reads them back. Real clients: @grpc/grpc-js registrations, raw QUIC
// tunnels on the project's engine, WebTransport sessions over HTTP/3, through routers in front
// of stub pods on loopback addresses. (Sessions over HTTP/2 count once their relay registers
// them with the connection registry, as the HTTP/3 relay does.)
import t, { type Test } from 'tap'
import * as grpc from '@grpc/grpc-js'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { StubStargate } from '../fixtures/stub-stargate.ts'
import { waitFor } from '../fixtures/wait.ts'
import { createPeerLoadFetcher } from '../../lib/rebalance/peer-load-fetch.ts'
import { H3Cluster } from '../fixtures/h3-cluster.ts'

const REGISTER = '/stargate.StargateControlPlane/RegisterInferenceServer'
const AUTHORITY = 'sg-0.stargate.external:50071'

interface DebugLoad {
  readonly self: { readonly address: string | null, readonly id: string | null }
  readonly draining: boolean
  readonly connections: { readonly registration: number, readonly raw_quic: number, readonly webtransport: number }
  readonly rebalance: unknown
}

/** A Pylon's gRPC connection (its own, not grpc-js's shared subchannel) with open registration streams. */
function pylonConnection (t: Test, address: string): { register (): grpc.ClientDuplexStream<Buffer, Buffer>, close (): void } {
  const client = new grpc.Client(address, grpc.credentials.createInsecure(), { 'grpc.default_authority': AUTHORITY, 'grpc.use_local_subchannel_pool': 1 })
  const calls: Array<grpc.ClientDuplexStream<Buffer, Buffer>> = []
  const close = (): void => {
    for (const call of calls) call.cancel()
    client.close()
  }
  t.teardown(close)
  return {
    register () {
      const call = client.makeBidiStreamRequest(REGISTER, (b: Buffer) => b, (b: Buffer) => b, new grpc.Metadata())
      call.on('error', () => {})
      call.on('data', () => {})
      // One registration message (field 1, a short string), as a Pylon opens with.
      call.write(Buffer.from([0x0a, 0x01, 0x70]))
      calls.push(call)
      return call
    },
    close,
  }
}

t.test('/debug/load counts registration connections and raw QUIC tunnels as Pylons open and close them', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: [], subnet: '127.0.150' })
  const quic = await cluster.addPod('sg-0')
  const grpcStub = await StubStargate.start({ podName: 'sg-0', ip: quic.ip, advertisedHost: 'sg-0.stargate.external', quicPort: 50072 })
  t.teardown(() => grpcStub.close())
  cluster.list('sg-0', quic.ip, quic.port, true, grpcStub.port)
  await cluster.waitForTargets(1)
  const health = `http://127.0.0.1:${cluster.kube.router.health.port}`
  const load = async (): Promise<DebugLoad> => await (await fetch(`${health}/debug/load`)).json() as DebugLoad

  const empty = await load()
  t.strictSame(empty, { self: { address: null, id: null }, draining: false, connections: { registration: 0, raw_quic: 0, webtransport: 0 }, rebalance: null }, 'nothing yet; identity as /debug/peers would show it; no balancing')

  const first = pylonConnection(t, cluster.kube.address)
  first.register()
  first.register()
  const second = pylonConnection(t, cluster.kube.address)
  second.register()
  await waitFor(() => grpcStub.openCalls === 3, { message: 'three registrations at the pod' })
  const tunnels = [await cluster.dial('sg-0'), await cluster.dial('sg-0')]
  for (const tunnel of tunnels) await tunnel.ready()
  await waitFor(async () => (await load()).connections.raw_quic === 2, { message: 'two tunnels counted' })
  t.strictSame((await load()).connections, { registration: 2, raw_quic: 2, webtransport: 0 }, 'two registration connections (one carries two streams), two tunnels')
  t.equal(await cluster.kube.metric('stargate_k8s_router_rebalance_load', { kind: 'registration' }), 2, 'the metric reads the same figures')
  t.equal(await cluster.kube.metric('stargate_k8s_router_rebalance_load', { kind: 'raw_quic' }), 2)

  const fetcher = createPeerLoadFetcher({ timeoutMs: 1000 })
  t.teardown(() => fetcher.close())
  const read = await fetcher.fetch({ id: 'routers/self', address: '127.0.0.1', port: cluster.kube.router.health.port })
  t.strictSame(read, { ok: true, load: { draining: false, connections: { registration: 2, raw_quic: 2, webtransport: 0 } } }, 'what a peer reads')

  first.close()
  tunnels[0]?.conn.close(0, 'bye')
  await waitFor(async () => {
    const c = (await load()).connections
    return c.registration === 1 && c.raw_quic === 1
  }, { message: 'the closed connection and tunnel leave the count' })
  t.pass('closed connections are no longer counted')

  cluster.kube.router.readiness.startDraining()
  t.equal((await load()).draining, true, 'a replica shutting down says so')
})

t.test('/debug/load counts WebTransport sessions over HTTP/3', async (t) => {
  t.setTimeout(90_000)
  const h3 = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' } })
  const h3Load = async (): Promise<DebugLoad['connections']> => (await (await fetch(`http://127.0.0.1:${h3.kube.router.health.port}/debug/load`)).json() as DebugLoad).connections
  const opened = await h3.open('stargate-0')
  t.equal(opened.status, 200, 'an HTTP/3 session is bridged')
  await waitFor(async () => (await h3Load()).webtransport === 1, { message: 'the HTTP/3 session counted' })
  t.strictSame(await h3Load(), { registration: 0, raw_quic: 0, webtransport: 1 })
  opened.session?.close(0, 'done')
  await waitFor(async () => (await h3Load()).webtransport === 0, { message: 'the closed HTTP/3 session leaves the count' })
})
