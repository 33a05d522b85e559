// SPEC §10, replica balancing wired into real routers: three in-process replicas with peer
// discovery through the fake API server and --rebalance (200 ms intervals) read each other's
// /debug/load every interval; with nothing to balance every round is balanced. The fail safe, as
// an operator sees it on /debug/load and in the metrics: a replica whose health port is gone,
// or one that is shutting down, makes the others stop (peer_load_unknown) until it is out of
// the peer set, and the change settles one round. A replica without --rebalance has no loop
// (no rounds) but still serves its load to its peers. Replicas on 127.0.151.x.
import t from 'tap'
import { freePort, idOf, replicaEndpoint, routerSlice, startFake, startReplica, type Replica, type ReplicaSpec } from '../fixtures/peer-cluster.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(90_000)

const SPECS: readonly ReplicaSpec[] = [
  { name: 'stargate-router-0', ip: '127.0.151.1', env: 'both' },
  { name: 'stargate-router-1', ip: '127.0.151.2', env: 'both' },
  { name: 'stargate-router-2', ip: '127.0.151.3', env: 'both' },
]

const REBALANCE = ['--rebalance', '--rebalance-interval-ms', '200', '--peer-check-timeout-ms', '150']

interface LoadDoc {
  readonly self: { readonly id: string | null }
  readonly draining: boolean
  readonly rebalance: null | {
    readonly intervalMs: number
    readonly lastRound: null | {
      readonly result: string
      readonly peers: ReadonlyArray<{ readonly id: string, readonly freshness: string, readonly draining: boolean, readonly lastError: { readonly reason: string } | null }>
    }
  }
}

async function load (replica: Replica): Promise<LoadDoc> {
  return await (await fetch(`${replica.healthUrl}/debug/load`)).json() as LoadDoc
}

t.test('replicas with --rebalance read each other every interval and stay put when balanced; the fail safe stops them', async (t) => {
  const fake = await startFake(t)
  const port = await freePort('127.0.151.1')
  fake.apply(routerSlice(port, SPECS.map((spec) => replicaEndpoint(spec))))
  const [a, b, c] = await Promise.all(SPECS.map((spec) => startReplica(t, fake, spec, { healthPort: port, args: REBALANCE }))) as [Replica, Replica, Replica]

  await waitFor(async () => {
    const doc = await load(a)
    return doc.rebalance?.lastRound?.result === 'balanced' && doc.rebalance.lastRound.peers.every((p) => p.freshness === 'known') && doc.rebalance.lastRound.peers.length === 2
  }, { timeoutMs: 15_000, message: 'a balanced round with both peers known' })
  const doc = await load(a)
  t.equal(doc.self.id, idOf(SPECS[0]!), 'its identity')
  t.strictSame(doc.rebalance?.lastRound?.peers.map((p) => p.id), [idOf(SPECS[1]!), idOf(SPECS[2]!)])
  t.ok((await a.metric('stargate_k8s_router_rebalance_rounds_total', { result: 'balanced' }) ?? 0) >= 1, 'balanced rounds counted')
  t.ok((await a.metric('stargate_k8s_router_rebalance_rounds_total', { result: 'settling' }) ?? 0) >= 1, 'the first round settled')
  t.equal(await a.metric('stargate_k8s_router_rebalance_moves_total', { kind: 'raw_quic', reason: 'above_band' }), 0, 'nothing moved')

  // A replica that is shutting down: the others stop until it is out of the set.
  b.router.readiness.startDraining()
  await waitFor(async () => (await load(a)).rebalance?.lastRound?.result === 'peer_load_unknown', { timeoutMs: 10_000, message: 'a stops for the draining peer' })
  t.equal((await load(a)).rebalance?.lastRound?.peers.find((p) => p.id === idOf(SPECS[1]!))?.draining, true, 'and says which peer drains')

  // Its health port gone while it is still listed: unknown, counted by reason.
  await b.router.shutdown()
  await waitFor(async () => (await load(a)).rebalance?.lastRound?.peers.find((p) => p.id === idOf(SPECS[1]!))?.lastError?.reason === 'unreachable', { timeoutMs: 10_000, message: 'the unreachable peer' })
  t.equal((await load(c)).rebalance?.lastRound?.result, 'peer_load_unknown', 'every other replica stops too')
  t.ok((await a.metric('stargate_k8s_router_rebalance_peer_load_errors_total', { reason: 'unreachable' }) ?? 0) >= 1)

  // Out of the peer set: one settling round, then balanced again between the two left.
  const settledBefore = await a.metric('stargate_k8s_router_rebalance_rounds_total', { result: 'settling' }) ?? 0
  fake.apply(routerSlice(port, [replicaEndpoint(SPECS[0]!), replicaEndpoint(SPECS[2]!)]))
  await waitFor(async () => {
    const round = (await load(a)).rebalance?.lastRound
    return round?.result === 'balanced' && round.peers.length === 1
  }, { timeoutMs: 10_000, message: 'balanced between the two left' })
  t.ok((await a.metric('stargate_k8s_router_rebalance_rounds_total', { result: 'settling' }) ?? 0) > settledBefore, 'the change settled a round first')
})

t.test('without --rebalance a replica runs no loop but serves its load to its peers', async (t) => {
  const fake = await startFake(t)
  const port = await freePort('127.0.151.11')
  const specs: ReplicaSpec[] = [{ name: 'plain-0', ip: '127.0.151.11', env: 'both' }, { name: 'balancing-1', ip: '127.0.151.12', env: 'both' }]
  fake.apply(routerSlice(port, specs.map((spec) => replicaEndpoint(spec))))
  const plain = await startReplica(t, fake, specs[0]!, { healthPort: port })
  const balancing = await startReplica(t, fake, specs[1]!, { healthPort: port, args: REBALANCE })
  await waitFor(async () => (await load(balancing)).rebalance?.lastRound?.result === 'balanced', { timeoutMs: 15_000, message: 'the balancing replica reads the plain one' })
  t.equal((await load(plain)).rebalance, null, 'no loop on the plain replica')
  t.equal(await plain.metric('stargate_k8s_router_rebalance_rounds_total', { result: 'balanced' }), 0)
  t.equal(await plain.metric('stargate_k8s_router_rebalance_rounds_total', { result: 'settling' }), 0)
})
