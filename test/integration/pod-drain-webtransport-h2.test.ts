/**
 * SPEC §3 rule 2, §7: a WebTransport session over HTTP/2 follows its pod as every other tunnel
 * and registration does. Failure mode guarded: the HTTP/2 relay had no pod drain, so its
 * bridged sessions outlived a pod that terminated or left the Service (relaying into a pod on
 * its way out until the Pylon or the idle timeout ended them) while raw QUIC tunnels, HTTP/3
 * sessions and registrations were closed after --drain-grace-ms. Now: closed at both ends with
 * `target stargate left the ready set` after the grace; a pod that only turns unready, or comes
 * back within the grace, keeps its session. Real endpoints: the @fails-components WebTransport
 * client and server over HTTP/2 (test/fixtures/webtransport-pylon.ts, webtransport-stargate.ts).
 */
import t from 'tap'
import { WtCluster } from '../fixtures/webtransport-cluster.ts'
import type { AcceptedSession } from '../fixtures/webtransport-stargate.ts'
import type { WtSession } from '../fixtures/webtransport-engine.ts'
import { sleep, waitFor } from '../fixtures/wait.ts'
import { next, readAll, writeAll } from '../fixtures/webtransport-streams.ts'

const GRACE_MS = 300
const TERMINATING = { ready: false, serving: true, terminating: true }

async function bridged (cluster: WtCluster, pod = 'stargate-0'): Promise<{ pylon: WtSession, atPod: AcceptedSession }> {
  const opened = await cluster.open(pod)
  if (opened.wt === null) throw new Error(`no session: ${opened.status} ${opened.body}`)
  const atPod = await cluster.stubs.get(pod)!.nextSession()
  return { pylon: opened.wt, atPod }
}

/** Settles with the session's end, or 'open' if it has not ended by then. */
function endedWithin (session: WtSession, ms: number): Promise<unknown> {
  return Promise.race([session.ended, sleep(ms).then(() => 'open')])
}

t.test('a session to a pod that starts terminating is closed at both ends after --drain-grace-ms with the reason', async (t) => {
  const cluster = await WtCluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' }, routerArgs: ['--drain-grace-ms', String(GRACE_MS)] })
  const { pylon, atPod } = await bridged(cluster)
  const terminatingAt = Date.now()
  cluster.publish('stargate-0', TERMINATING)
  t.strictSame(await pylon.ended, { ok: true, closeCode: 0, reason: 'target stargate left the ready set' }, 'the Pylon is told why')
  t.ok(Date.now() - terminatingAt >= GRACE_MS - 50, 'after the grace, counted from the terminating update')
  t.strictSame(await atPod.wt.ended, { ok: true, closeCode: 0, reason: 'target stargate left the ready set' }, 'so is the pod')
  await waitFor(async () => await cluster.metric('completed') === 1, { message: 'counted as completed' })
  t.equal(await cluster.kube.metric('stargate_k8s_router_webtransport_sessions_active'), 0)
})

t.test('a session to a pod that only turns unready stays past the grace; one whose pod comes back within it stays too', async (t) => {
  const cluster = await WtCluster.start(t, { pods: ['stargate-0', 'stargate-1'], stub: { mode: 'manual' }, routerArgs: ['--drain-grace-ms', String(GRACE_MS)] })
  const unready = await bridged(cluster, 'stargate-0')
  const flapping = await bridged(cluster, 'stargate-1')
  cluster.publish('stargate-0', false)
  cluster.publish('stargate-1', TERMINATING)
  await sleep(GRACE_MS / 3)
  cluster.publish('stargate-1', true)
  t.equal(await endedWithin(unready.pylon, GRACE_MS * 3), 'open', 'the unready pod\'s session is open well past the grace')
  t.equal(await endedWithin(flapping.pylon, 0), 'open', 'and so is the session of the pod that came back in time')

  // Both still relay: a stream from each Pylon reaches its pod whole.
  for (const [name, session] of [['stargate-0', unready], ['stargate-1', flapping]] as const) {
    const arriving = next(session.atPod.wt.session.incomingUnidirectionalStreams)
    await writeAll(await session.pylon.session.createUnidirectionalStream(), Buffer.from(`still relayed to ${name}`))
    const stream = await arriving
    if (stream === null) throw new Error(`no stream at ${name}`)
    t.equal((await readAll(stream)).toString(), `still relayed to ${name}`, `${name}: the session still relays`)
  }
})
