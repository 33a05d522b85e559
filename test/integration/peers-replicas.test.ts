// SPEC §10: router replicas find each other through the EndpointSlices of their own
// Service. Three real routers (startRouter) run against the fake kube-apiserver, each with its
// health listener on its own loopback "pod IP"; the test writes the router Service's slice as
// the EndpointSlice controller would and reads each replica's /debug/peers and /metrics.
import t from 'tap'
import { waitFor } from '../fixtures/wait.ts'
import { pod, stargateSlice } from '../fixtures/kube-router.ts'
import {
  freePort, idOf, replicaEndpoint, routerSlice, startFake, startReplicas,
  type Replica, type ReplicaSpec,
} from '../fixtures/peer-cluster.ts'

function specs (block: number): ReplicaSpec[] {
  return [
    // One replica per way of knowing itself: POD_IP only, POD_NAME only, both.
    { name: 'stargate-router-7d9f8b6c4-aaaaa', ip: `127.0.${block}.11`, env: 'ip' },
    { name: 'stargate-router-7d9f8b6c4-bbbbb', ip: `127.0.${block}.12`, env: 'name' },
    { name: 'stargate-router-7d9f8b6c4-ccccc', ip: `127.0.${block}.13`, env: 'both' },
  ]
}

function othersOf (all: readonly ReplicaSpec[], self: ReplicaSpec): string[] {
  return all.filter((s) => s !== self).map(idOf).sort()
}

async function waitForPeers (replica: Replica, want: readonly string[], message: string): Promise<void> {
  await waitFor(async () => JSON.stringify(await replica.peerIds()) === JSON.stringify(want), { timeoutMs: 10000, message })
}

t.test('each replica sees exactly the two others, leaving itself out by POD_IP or, without it, by POD_NAME', async (t) => {
  const all = specs(61)
  const port = await freePort(all[0]!.ip)
  const fake = await startFake(t)
  fake.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.61.50')]))
  fake.apply(routerSlice(port, all.map((s) => replicaEndpoint(s))))
  const replicas = await startReplicas(t, fake, all, { healthPort: port })

  for (const replica of replicas) {
    const want = othersOf(all, replica.spec)
    await waitForPeers(replica, want, `${replica.spec.name} to see the two others`)
    // Every peer answered a check with the same digest: the replicas agree (a replica still
    // listing reports the uninitialized digest, so wait for agreement, then look at it).
    const report = await waitFor(async () => {
      const r = await replica.peers()
      // A check can time out on a loaded machine; wait for a round of successful ones.
      return r.peers.every((p) => p.checkedAt !== null && p.digest === r.ours.digest && p.lastError === null) ? r : null
    }, { message: `${replica.spec.name} to check both peers`, timeoutMs: 15_000 })
    t.strictSame(report.peers.map((p) => [p.id, p.address, p.port]), want.map((id) => {
      const spec = all.find((s) => idOf(s) === id)!
      return [id, spec.ip, port]
    }), `${replica.spec.name}: peers sorted by id, at their pod IP and health port`)
    for (const peer of report.peers) {
      t.equal(peer.digest, report.ours.digest, `${replica.spec.name} agrees with ${peer.id}`)
      t.equal(peer.divergent, false)
      t.equal(peer.lastError, null)
    }
    t.equal(await replica.metric('stargate_k8s_router_peers'), 2, `${replica.spec.name}: peers gauge`)
    t.equal(await replica.metric('stargate_k8s_router_peer_snapshot_divergent'), 0)
  }
})

t.test('a replica that becomes not ready, or starts terminating, leaves the other replicas\' peer sets', async (t) => {
  const all = specs(62)
  const [a, b, c] = all as [ReplicaSpec, ReplicaSpec, ReplicaSpec]
  const port = await freePort(a.ip)
  const fake = await startFake(t)
  fake.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.62.50')]))
  fake.apply(routerSlice(port, all.map((s) => replicaEndpoint(s))))
  const replicas = await startReplicas(t, fake, all, { healthPort: port })
  const [ra, , rc] = replicas as [Replica, Replica, Replica]
  await waitForPeers(ra, [idOf(b), idOf(c)].sort(), 'a to see b and c')

  // The controller writes ready=false, serving=false for a pod whose readiness probe fails.
  fake.apply(routerSlice(port, [replicaEndpoint(a), replicaEndpoint(b, { ready: false }), replicaEndpoint(c)]))
  await waitForPeers(ra, [idOf(c)], 'a to drop the not-ready b')
  await waitForPeers(rc, [idOf(a)], 'c to drop the not-ready b')

  fake.apply(routerSlice(port, all.map((s) => replicaEndpoint(s))))
  await waitForPeers(ra, [idOf(b), idOf(c)].sort(), 'a to see b again once ready')

  // Deletion started: still serving while it drains, but terminating, so not a peer.
  fake.apply(routerSlice(port, [replicaEndpoint(a), replicaEndpoint(b, { ready: false, serving: true, terminating: true }), replicaEndpoint(c)]))
  await waitForPeers(ra, [idOf(c)], 'a to drop the terminating b')
  await waitForPeers(rc, [idOf(a)], 'c to drop the terminating b')
  t.equal(await ra.metric('stargate_k8s_router_peers'), 1)
})

t.test('under rapid churn of one replica\'s endpoint every replica ends with the set the slices last said', async (t) => {
  const all = specs(63)
  const port = await freePort(all[0]!.ip)
  const fake = await startFake(t)
  fake.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.63.50')]))
  fake.apply(routerSlice(port, all.map((s) => replicaEndpoint(s))))
  const replicas = await startReplicas(t, fake, all, { healthPort: port })
  for (const replica of replicas) await waitForPeers(replica, othersOf(all, replica.spec), `${replica.spec.name} to settle`)

  // A fourth replica comes and goes 25 times in its own slice, in bursts with no pause: each
  // add is followed by its delete, and the last word is "gone".
  const extra = { pod: 'stargate-router-7d9f8b6c4-ddddd', ip: '127.0.63.14' }
  for (let i = 0; i < 25; i++) {
    fake.apply(routerSlice(port, [extra], 'stargate-router-churn'))
    fake.remove('routers', 'stargate-router-churn')
  }
  const marker = { pod: 'stargate-router-7d9f8b6c4-eeeee', ip: '127.0.63.15' }
  fake.apply(routerSlice(port, [marker], 'stargate-router-marker'))
  for (const replica of replicas) {
    const want = [...othersOf(all, replica.spec), `routers/${marker.pod}`].sort()
    await waitForPeers(replica, want, `${replica.spec.name} to end with the marker and without the churned replica`)
  }
})

t.test('a slice that briefly lacks the health port keeps every peer, at --peer-health-port', async (t) => {
  const all = specs(64)
  const port = await freePort(all[0]!.ip)
  const fake = await startFake(t)
  fake.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.64.50')]))
  fake.apply(routerSlice(port, all.map((s) => replicaEndpoint(s))))
  const replicas = await startReplicas(t, fake, all, { healthPort: port })
  const ra = replicas[0]!
  await waitForPeers(ra, othersOf(all, ra.spec), 'a to see b and c')

  fake.apply(routerSlice(null, all.map((s) => replicaEndpoint(s))))
  await waitFor(() => ra.logs.lines().some((l) => l.msg === 'peer endpointslice has no health port by that name; using --peer-health-port'), { message: 'the fallback to be logged' })
  const after = await ra.peers()
  t.strictSame(after.peers.map((p) => p.id), othersOf(all, ra.spec), 'the set is not emptied')
  t.ok(after.peers.every((p) => p.port === port), 'peers keep the fallback port')
  // Checks keep succeeding on the fallback port.
  const checkedSince = Date.now()
  await waitFor(async () => (await ra.peers()).peers.every((p) => p.checkedAt !== null && Date.parse(p.checkedAt) > checkedSince && p.lastError === null), { message: 'fresh successful checks' })
})

t.test('a replica whose API access is cut off while the others see a scale-up is reported divergent after the grace period, and no longer once it catches up', async (t) => {
  const all = specs(65)
  const [a, b, c] = all as [ReplicaSpec, ReplicaSpec, ReplicaSpec]
  const port = await freePort(a.ip)
  const graceMs = 1200
  const fake = await startFake(t)
  // c reaches "the API server" through its own fake, so its access alone can be cut.
  const fakeC = await startFake(t)
  const before = stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.65.50')])
  const routers = routerSlice(port, all.map((s) => replicaEndpoint(s)))
  for (const f of [fake, fakeC]) {
    f.apply(before)
    f.apply(routers)
  }
  const replicas = await startReplicas(t, fake, [a, b, { ...c, fake: fakeC }], { healthPort: port, graceMs, intervalMs: 150 })
  const [ra, rb, rc] = replicas as [Replica, Replica, Replica]
  for (const replica of replicas) {
    await waitFor(async () => {
      const r = await replica.peers()
      return r.peers.length === 2 && r.peers.every((p) => p.checkedAt !== null && p.differingSince === null)
    }, { message: `${replica.spec.name} to agree with both peers`, timeoutMs: 10000 })
  }

  await fakeC.goDown()
  fake.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.65.50'), pod('stargate-1', '127.0.65.51')]))
  const scaledUp = await waitFor(async () => {
    const s = await ra.snapshot()
    return s.targets.length === 2 ? s : null
  }, { message: 'a to see the scale-up' })
  t.equal((await rc.snapshot()).targets.length, 1, 'c still has the old set')

  for (const observer of [ra, rb]) {
    const report = await waitFor(async () => {
      const r = await observer.peers()
      return r.peers.find((p) => p.id === idOf(c) && p.divergent) !== undefined ? r : null
    }, { message: `${observer.spec.name} to report c divergent`, timeoutMs: graceMs + 8000 })
    const seen = report.peers.find((p) => p.id === idOf(c))!
    t.not(seen.digest, scaledUp.digest, 'c advertises another set')
    t.ok(Date.parse(seen.checkedAt!) - Date.parse(seen.differingSince!) >= graceMs, 'not before the grace period has passed')
    t.equal(report.divergent, 1, `${observer.spec.name}: only c diverges`)
    t.notOk(report.peers.find((p) => p.id !== idOf(c))?.divergent, 'the replica that agrees is not reported')
    t.equal(await observer.metric('stargate_k8s_router_peer_snapshot_divergent'), 1)
  }
  // From c's side both others differ: divergence is symmetric, which replica is wrong shows
  // in its own discovery metrics (its watch is failing).
  await waitFor(async () => (await rc.peers()).divergent === 2, { message: 'c to report both others', timeoutMs: graceMs + 8000 })

  // c's API server comes back with the scale-up: its watch restarts, relists, catches up.
  fakeC.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.65.50'), pod('stargate-1', '127.0.65.51')]))
  await fakeC.comeBack()
  await waitFor(async () => (await rc.snapshot()).digest === scaledUp.digest, { message: 'c to catch up', timeoutMs: 10000 })
  for (const observer of [ra, rb]) {
    await waitFor(async () => {
      const seen = (await observer.peers()).peers.find((p) => p.id === idOf(c))
      return seen !== undefined && !seen.divergent && seen.differingSince === null
    }, { message: `${observer.spec.name} to stop reporting c`, timeoutMs: 5000 })
    t.equal(await observer.metric('stargate_k8s_router_peer_snapshot_divergent'), 0)
  }
  t.ok(ra.logs.lines().some((l) => l.msg === 'peer advertises a different stargate set for longer than the grace period' && l.peer === idOf(c)), 'a logged the divergence')
  t.ok(ra.logs.lines().some((l) => l.msg === 'peer snapshot agrees with ours again' && l.peer === idOf(c)), 'and the recovery')
})
