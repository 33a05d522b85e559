/**
 * SPEC §10, replica balancing: what a moved Pylon sees. A router with --rebalance holds three
 * registration connections (@grpc/grpc-js) and three raw QUIC tunnels (quinn-peer as the Pylon
 * and the Stargate, configured as the real ones); its one peer (a stub health port) reports no
 * load. The band around the mean 1.5 is 0.5..2.5, so after the settle and two intervals outside
 * it the router moves one connection of each kind, the oldest: the registration ends with
 * UNAVAILABLE `router is moving this connection to another replica`, the tunnel refuses the
 * Stargate's new stream with the documented code, lets the open request finish byte-exact, then
 * closes with `router rebalancing`. The others stay, and nothing moves again (2/0 is inside the
 * band).
 *
 * The same for WebTransport over HTTP/3: the oldest session gets the drain capsule and is closed
 * with `router rebalancing`; the others stay.
 *
 * Failure modes: a move that cuts a request in flight, a refused stream without the code (the
 * Stargate could not tell it may retry elsewhere), the youngest connection moved instead of the
 * oldest, moves while the peer's load is unknown, a replica that keeps moving once balanced.
 */
import t from 'tap'
import * as grpc from '@grpc/grpc-js'
import { QuinnPeer, quinnPeerSkip } from '../fixtures/quinn-peer.ts'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { StubStargate } from '../fixtures/stub-stargate.ts'
import { REBALANCE_FAST, stubPeer } from '../fixtures/rebalance-peer.ts'
import { waitFor } from '../fixtures/wait.ts'
import { QUIC_CLOSE_REASONS, STREAM_REFUSALS } from '../../lib/tunnel/errors.ts'
import { GRPC_ERRORS } from '../../lib/control-plane/errors.ts'
import { H3Cluster } from '../fixtures/h3-cluster.ts'
import type { WtEndpointSession } from '../fixtures/h3-wt-session.ts'

const skip = await quinnPeerSkip(t)
const SUBNET = '127.0.153'
const POD_IP = `${SUBNET}.10`
const PEER_IP = `${SUBNET}.2`
const AUTHORITY = 'stargate-0.stargate.external:50071'
const REGISTER = '/stargate.StargateControlPlane/RegisterInferenceServer'
const MIB = 1 << 20

t.setTimeout(120_000)

interface Registration {
  status (): grpc.StatusObject | null
  readonly call: grpc.ClientDuplexStream<Buffer, Buffer>
}

/** One Pylon's own HTTP/2 connection with one open registration stream. */
function register (t: Parameters<typeof QuicCluster.start>[0], address: string): Registration {
  const client = new grpc.Client(address, grpc.credentials.createInsecure(), { 'grpc.default_authority': AUTHORITY, 'grpc.use_local_subchannel_pool': 1 })
  const call = client.makeBidiStreamRequest(REGISTER, (b: Buffer) => b, (b: Buffer) => b, new grpc.Metadata())
  let status: grpc.StatusObject | null = null
  call.on('error', () => {})
  call.on('data', () => {})
  call.on('status', (s: grpc.StatusObject) => { status = s })
  call.write(Buffer.from([0x0a, 0x01, 0x70]))
  t.teardown(() => { call.cancel(); client.close() })
  return { status: () => status, call }
}

t.test('a replica above the band moves its oldest registration connection and tunnel; open work finishes, then nothing moves again', { skip }, async (t) => {
  // The peer: unknown (503) until everything is in place, then no load at all.
  const peer = await stubPeer(t, PEER_IP)
  const cluster = await QuicCluster.start(t, { pods: [], subnet: SUBNET, args: ['--enable-peer-discovery', '--peers-file', peer.peersFile, ...REBALANCE_FAST] })
  const stargate = await cluster.addQuinnPod('stargate-0', POD_IP, { accept: 'echo' })
  const grpcPod = await StubStargate.start({ podName: 'stargate-0', ip: POD_IP, advertisedHost: 'stargate-0.stargate.external' })
  t.teardown(() => grpcPod.close())
  cluster.list('stargate-0', POD_IP, stargate.port, true, grpcPod.port)

  // Oldest first: tunnel 1 and registration 0 are the ones that must move.
  const pylon = await QuinnPeer.client(t, { connect: `127.0.0.1:${cluster.tunnelPort}`, sni: 'stargate-0.stargate.external', caPath: cluster.tls.caPath, accept: 'echo' })
  await pylon.established(1)
  for (let i = 0; i < 2; i++) await pylon.established(await pylon.connect())
  const atPod = await stargate.waitEvents('connected', {}, 3)
  const sc = atPod[0]?.conn as number
  const registrations: Registration[] = []
  for (let i = 0; i < 3; i++) {
    registrations.push(register(t, cluster.kube.address))
    await waitFor(() => grpcPod.openCalls === i + 1, { message: `registration ${i + 1} at the pod` })
  }
  const health = `http://127.0.0.1:${cluster.kube.router.health.port}`
  await waitFor(async () => {
    const body = await (await fetch(`${health}/debug/load`)).json() as { connections: { registration: number, raw_quic: number } }
    return body.connections.registration === 3 && body.connections.raw_quic === 3
  }, { message: 'three of each counted' })
  // Rounds while the peer answers 503: they say why and move nothing.
  await waitFor(async () => (await cluster.kube.metric('stargate_k8s_router_rebalance_rounds_total', { result: 'peer_load_unknown' }) ?? 0) >= 2, { message: 'two rounds with the peer unknown' })
  t.equal(await cluster.kube.metric('stargate_k8s_router_rebalance_moves_total', { kind: 'raw_quic', reason: 'above_band' }), 0, 'nothing moved while the peer\'s load was unknown')
  t.equal(await cluster.kube.metric('stargate_k8s_router_rebalance_moves_total', { kind: 'registration', reason: 'above_band' }), 0)

  // A request of the Stargate's, half sent on the oldest tunnel when the move begins.
  const open = await stargate.open(sc)
  await stargate.write(sc, open, { bytes: 2 * MIB, seed: 3 })
  await pylon.waitEvent('stream', { conn: 1, stream: open })
  peer.load({ registration: 0, raw_quic: 0, webtransport: 0 })
  await waitFor(async () => await cluster.kube.metric('stargate_k8s_router_rebalance_moves_total', { kind: 'raw_quic', reason: 'above_band' }) === 1, { timeoutMs: 15_000, message: 'the tunnel move' })

  // The moved tunnel: a new stream from the Stargate is refused with the code, never relayed.
  const refused = await stargate.open(sc)
  await stargate.write(sc, refused, 'a request opened after the move began').catch(() => {})
  t.equal((await stargate.recvDone(sc, refused)).reset, STREAM_REFUSALS.draining.code, 'the Stargate\'s new stream: RESET_STREAM with the drain code')
  // The open request finishes, byte-exact, then the tunnel closes with the move's reason.
  await stargate.write(sc, open, { bytes: 2 * MIB, seed: 3 })
  await stargate.finish(sc, open)
  const echoed = await stargate.recvDone(sc, open, 60_000)
  t.match(echoed, { fin: true, bytes: 4 * MIB, reset: null }, 'the request in flight ran to completion')
  t.equal(echoed.sha256, (await pylon.recvDone(1, open)).sha256, 'byte-exact')
  t.match(await pylon.closed(1), { kind: 'application', by: 'peer', code: 0, reason: 'router rebalancing' }, 'the Pylon is told router rebalancing')

  // The oldest registration connection: UNAVAILABLE with the move's message; the others stay.
  const first = await waitFor(() => registrations[0]?.status(), { message: 'the oldest registration ends' })
  t.equal(first.code, grpc.status.UNAVAILABLE)
  t.equal(first.details, GRPC_ERRORS.rebalancing.message)
  t.equal(await cluster.kube.metric('stargate_k8s_router_rebalance_moves_total', { kind: 'registration', reason: 'above_band' }), 1)
  t.equal(await cluster.kube.metric('stargate_k8s_router_connections_drained_total', { kind: 'raw_quic', reason: 'rebalance' }), 1)
  t.equal(await cluster.kube.metric('stargate_k8s_router_connections_drained_total', { kind: 'registration', reason: 'rebalance' }), 1)
  const line = cluster.kube.logs.lines().find((l) => l.msg === 'rebalancing: moving pylon connections to even out the replicas')
  t.match(line, { kinds: { registration: { moved: 1, own: 3, mean: 1.5, band: [0.5, 2.5], reason: 'above_band' }, raw_quic: { moved: 1, own: 3, mean: 1.5 } } }, 'one line says what moved and why')

  // 2 against 0 is inside the band (1 ± 1): nothing moves again.
  const rounds = async (): Promise<number> => await cluster.kube.metric('stargate_k8s_router_rebalance_rounds_total', { result: 'balanced' }) ?? 0
  const before = await rounds()
  await waitFor(async () => await rounds() >= before + 5, { timeoutMs: 15_000, message: 'five more balanced rounds' })
  t.equal(await cluster.kube.metric('stargate_k8s_router_rebalance_moves_total', { kind: 'raw_quic', reason: 'above_band' }), 1, 'no second tunnel moved')
  t.equal(await cluster.kube.metric('stargate_k8s_router_rebalance_moves_total', { kind: 'registration', reason: 'above_band' }), 1, 'no second registration moved')
  t.same([registrations[1]?.status(), registrations[2]?.status()], [null, null], 'the younger registrations are still open')
  t.notOk(pylon.events.some((e) => e.ev === 'closed' && e.conn !== 1), 'the younger tunnels are still open')
})

t.test('a replica above the band moves its oldest WebTransport session over HTTP/3: the drain capsule, then router rebalancing', async (t) => {
  const peer = await stubPeer(t, `${SUBNET}.3`)
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' }, routerArgs: ['--enable-peer-discovery', '--peers-file', peer.peersFile, ...REBALANCE_FAST] })
  const sessions: WtEndpointSession[] = []
  for (let i = 0; i < 3; i++) {
    const opened = await cluster.open('stargate-0')
    if (opened.session === null) throw new Error(`no session: ${opened.status}`)
    sessions.push(opened.session)
  }
  await waitFor(async () => (await cluster.kube.metric('stargate_k8s_router_rebalance_load', { kind: 'webtransport' })) === 3, { message: 'three sessions counted' })
  peer.load({ registration: 0, raw_quic: 0, webtransport: 0 })
  await waitFor(async () => await cluster.kube.metric('stargate_k8s_router_rebalance_moves_total', { kind: 'webtransport', reason: 'above_band' }) === 1, { timeoutMs: 15_000, message: 'the session move' })
  const [oldest, ...rest] = sessions as [WtEndpointSession, ...WtEndpointSession[]]
  t.equal(await oldest.drains.next(), true, 'the oldest session gets the WebTransport drain signal')
  t.same(await oldest.ended, { how: 'closed', code: 0, reason: QUIC_CLOSE_REASONS.rebalancing.reason }, 'and is closed with router rebalancing (nothing was open on it)')
  t.equal(await cluster.kube.metric('stargate_k8s_router_connections_drained_total', { kind: 'webtransport_h3', reason: 'rebalance' }), 1)
  const rounds = async (): Promise<number> => await cluster.kube.metric('stargate_k8s_router_rebalance_rounds_total', { result: 'balanced' }) ?? 0
  const before = await rounds()
  await waitFor(async () => await rounds() >= before + 3, { timeoutMs: 15_000, message: 'three more balanced rounds' })
  t.equal(await cluster.kube.metric('stargate_k8s_router_rebalance_moves_total', { kind: 'webtransport', reason: 'above_band' }), 1, 'no second move: 2 against 0 is inside the band')
  t.equal(await cluster.kube.metric('stargate_k8s_router_rebalance_load', { kind: 'webtransport' }), 2, 'two sessions left')
  const younger = await Promise.race([
    Promise.any(rest.map((session) => session.ended)).then(() => 'one ended'),
    new Promise((resolve) => { setTimeout(resolve, 300, 'both open') }),
  ])
  t.equal(younger, 'both open', 'the younger sessions stay')
})
