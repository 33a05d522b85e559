// SPEC §3 rule 2 and §5/§7: a pod that merely turns unready (its endpoint listed with
// ready=false, not terminating) is no target any more (not advertised, new registrations and
// tunnels refused), but what the router already relays to it stays, as upstream keeps it:
// --drain-grace-ms runs only for pods that are terminating or gone. The failure mode: a
// readiness probe that flaps (or a Stargate that turns unready under load) cut every Pylon's
// registration and tunnel after the grace, and they all re-registered at once.
// Real clients: @grpc/grpc-js (Pylon registrations) and the Pylon-side QUIC client of
// test/fixtures/quic-pylon.ts against stub Stargates on their own loopback IPs.
import t from 'tap'
import * as grpc from '@grpc/grpc-js'
import { StubPods } from '../fixtures/stub-pods.ts'
import type { Registration } from '../fixtures/pylon.ts'
import type { Teardown } from '../fixtures/kube-router.ts'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { sleep, waitFor } from '../fixtures/wait.ts'
import type { StargateInfo } from '../fixtures/stargate-proto.ts'

const GRACE_MS = 300
const TERMINATING = { ready: false, serving: true, terminating: true }

/** A router in front of one stub pod, and a Pylon registered with it (one ack in). */
async function registered (t: Teardown, subnet: string): Promise<{ pods: StubPods, stargate: StargateInfo, registration: Registration }> {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], subnet, args: ['--drain-grace-ms', String(GRACE_MS)] })
  const pylon = pods.pylon({ heartbeatMs: 50 })
  pylon.watch()
  const stargate = await waitFor(() => pylon.latest?.stargates[0], { message: 'advertised stargate' }) as StargateInfo
  const registration = pylon.register(stargate)
  await waitFor(() => registration.acks.length > 0, { message: 'the first ack' })
  return { pods, stargate, registration }
}

t.test('a registration to a pod that turns unready stays past the drain grace; it drains once the pod terminates', async (t) => {
  const { pods, stargate, registration } = await registered(t, '127.0.134')
  const watcher = pods.pylon()
  watcher.watch()
  pods.setReady('stargate-0', false)
  await waitFor(() => watcher.latest?.stargates.length === 0, { message: 'the unready pod no longer advertised' })
  const snapshot = await pods.kube.snapshot()
  t.same(snapshot.unready.map((x) => x.identity), ['stargate-0'], 'listed as present but not ready')
  const acks = registration.acks.length
  // A negative claim needs a fixed wait: three times the grace.
  await sleep(GRACE_MS * 3)
  t.equal(registration.status, null, 'still open well past the drain grace')
  await waitFor(() => registration.acks.length > acks + 2, { message: 'acks keep flowing from the unready pod' })

  const fresh = pods.pylon({ heartbeatMs: 50 }).register(stargate)
  const refused = await waitFor(() => fresh.status, { message: 'the new registration to end' })
  t.equal(refused.code, grpc.status.UNAVAILABLE, 'a new registration to the unready pod is refused')
  t.equal(refused.details, 'target stargate stargate-0 is not ready')

  const terminatingAt = Date.now()
  pods.setConditions('stargate-0', TERMINATING)
  const status = await waitFor(() => registration.status, { message: 'the drained stream to end', timeoutMs: 10_000 })
  t.equal(status.code, grpc.status.UNAVAILABLE)
  t.equal(status.details, 'target stargate stargate-0 left the ready set')
  t.ok(Date.now() - terminatingAt >= GRACE_MS - 50, 'after the grace, counted from the terminating update')
  t.equal(await pods.kube.metric('stargate_k8s_router_registration_streams_closed_total', { outcome: 'drained' }), 1)
})

t.test('a registration to an unready pod whose slice is deleted drains after the grace', async (t) => {
  const { pods, registration } = await registered(t, '127.0.135')
  pods.setReady('stargate-0', false)
  await waitFor(async () => (await pods.kube.snapshot()).unready.length === 1, { message: 'unready' })
  pods.removePod('stargate-0')
  const status = await waitFor(() => registration.status, { message: 'the drained stream to end', timeoutMs: 10_000 })
  t.equal(status.details, 'target stargate stargate-0 left the ready set')
})

t.test('a raw QUIC tunnel to a pod that turns unready stays past the drain grace; it is closed once the pod terminates', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.136', args: ['--drain-grace-ms', String(GRACE_MS)] })
  const stub = cluster.stubs.get('stargate-0')
  if (stub === undefined) throw new Error('no stub')
  const ip = cluster.ipOf('stargate-0')
  const pylon = await cluster.dial('stargate-0')
  await pylon.ready()
  const tunnel = await stub.tunnel()

  cluster.list('stargate-0', ip, stub.port, false)
  await cluster.waitForTargets(0)
  await sleep(GRACE_MS * 3)
  t.equal(pylon.closed, null, 'the tunnel is open well past the drain grace')
  t.equal((await stub.request(tunnel, 'still relayed')).toString(), 'pylon:still relayed', 'and still relays streams both ways')
  // Read before the dial: the refusal is counted when the Initial arrives, which may be before dial() resolves.
  const before = await cluster.outcome('target_unavailable')
  const refused = await cluster.dial('stargate-0')
  t.match(await refused.closedWith(), { initiator: 'peer', app: false, code: 0x0c, reason: '', established: false }, 'a new tunnel to the unready pod is refused from its Initial (APPLICATION_ERROR, no reason phrase)')
  t.equal(await cluster.outcome('target_unavailable'), before + 1, 'counted as target_unavailable')

  const terminatingAt = Date.now()
  cluster.list('stargate-0', ip, stub.port, TERMINATING)
  t.match(await pylon.closedWith(), { initiator: 'peer', app: true, code: 0, reason: 'target stargate left the ready set' })
  t.ok(Date.now() - terminatingAt >= GRACE_MS - 50, 'after the grace, counted from the terminating update')
})
