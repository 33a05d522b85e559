/**
 * SPEC §10, replica balancing, for WebTransport over HTTP/2 (the tunnel port's TCP listener in
 * WebTransport mode): its sessions count in `/debug/load` under `webtransport`, with those over
 * HTTP/3, and a replica above the band moves its oldest one as it moves the other kinds: the
 * Pylon's HTTP/2 connection gets GOAWAY, the session is drained and closed, and the younger
 * sessions stay. The library's endpoints (@fails-components/webtransport) play the Pylon and
 * the pod.
 *
 * Failure modes: sessions over HTTP/2 invisible to the balance (a replica holding only those
 * would look empty to its peers and never give any up), the youngest moved instead of the
 * oldest, a second move once 2 against 0 is inside the band.
 */
import t from 'tap'
import { WtCluster } from '../fixtures/webtransport-cluster.ts'
import { REBALANCE_FAST, stubPeer } from '../fixtures/rebalance-peer.ts'
import { waitFor } from '../fixtures/wait.ts'
import type { PylonSession } from '../fixtures/webtransport-pylon.ts'

t.setTimeout(90_000)

interface DebugLoad {
  readonly connections: { readonly registration: number, readonly raw_quic: number, readonly webtransport: number }
}

t.test('sessions over HTTP/2 count in /debug/load, and the oldest moves when the replica is above the band', async (t) => {
  const peer = await stubPeer(t, '127.0.154.3')
  const cluster = await WtCluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' }, routerArgs: ['--enable-peer-discovery', '--peers-file', peer.peersFile, ...REBALANCE_FAST] })
  const load = async (): Promise<DebugLoad['connections']> => (await (await fetch(`http://127.0.0.1:${cluster.kube.router.health.port}/debug/load`)).json() as DebugLoad).connections

  const sessions: PylonSession[] = []
  for (let i = 0; i < 3; i++) {
    const opened = await cluster.open('stargate-0')
    if (opened.wt === null) throw new Error(`no session: ${opened.status} ${opened.body}`)
    sessions.push(opened)
  }
  await waitFor(async () => (await load()).webtransport === 3, { message: 'three sessions counted' })
  t.strictSame(await load(), { registration: 0, raw_quic: 0, webtransport: 3 }, 'each session over HTTP/2 is one webtransport connection')

  const [oldest, ...rest] = sessions as [PylonSession, ...PylonSession[]]
  let goaway = false
  oldest.connection.on('goaway', () => { goaway = true })
  const youngerGoaway = rest.map(() => false)
  rest.forEach((session, i) => { session.connection.on('goaway', () => { youngerGoaway[i] = true }) })

  peer.load({ registration: 0, raw_quic: 0, webtransport: 0 })
  await waitFor(async () => await cluster.kube.metric('stargate_k8s_router_rebalance_moves_total', { kind: 'webtransport', reason: 'above_band' }) === 1, { timeoutMs: 15_000, message: 'the session move' })
  await waitFor(() => goaway ? true : undefined, { message: 'GOAWAY on the oldest session\'s connection' })
  t.ok(goaway, 'the oldest session\'s HTTP/2 connection gets GOAWAY')
  const end = await oldest.wt?.ended
  t.ok(end !== undefined, `and its session ends (${JSON.stringify(end)})`)
  t.equal(await cluster.kube.metric('stargate_k8s_router_connections_drained_total', { kind: 'webtransport_h2', reason: 'rebalance' }), 1, 'drained for rebalancing')
  await waitFor(async () => (await load()).webtransport === 2, { message: 'two sessions left' })

  const rounds = async (): Promise<number> => await cluster.kube.metric('stargate_k8s_router_rebalance_rounds_total', { result: 'balanced' }) ?? 0
  const before = await rounds()
  await waitFor(async () => await rounds() >= before + 3, { timeoutMs: 15_000, message: 'three more balanced rounds' })
  t.equal(await cluster.kube.metric('stargate_k8s_router_rebalance_moves_total', { kind: 'webtransport', reason: 'above_band' }), 1, 'no second move: 2 against 0 is inside the band')
  t.same(youngerGoaway, [false, false], 'the younger sessions\' connections got no GOAWAY')
  const younger = await Promise.race([
    Promise.any(rest.map((session) => session.wt?.ended)).then(() => 'one ended'),
    new Promise((resolve) => { setTimeout(resolve, 300, 'both open') }),
  ])
  t.equal(younger, 'both open', 'and their sessions stay open')
})
