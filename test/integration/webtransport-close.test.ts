/**
 * SPEC §7, §8, §11: closing either side of a bridged WebTransport session closes
 * the other with the same code and reason; the router closes sessions itself with a reason
 * when it shuts down (`router shutdown`), when the upstream trust bundle is replaced
 * (outcome trust_replaced) and when a session stays idle.
 */
import t from 'tap'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { WtCluster } from '../fixtures/webtransport-cluster.ts'
import { createCa } from '../fixtures/certs.ts'
import { waitFor } from '../fixtures/wait.ts'

// A trust-change close waits out the router's 5 s grace (TRUST_CHANGE_GRACE_MS).
t.setTimeout(90_000)
import type { AcceptedSession } from '../fixtures/webtransport-stargate.ts'
import type { WtSession } from '../fixtures/webtransport-engine.ts'
import { freezableProxy } from '../fixtures/webtransport-pylon.ts'

async function bridged (cluster: WtCluster, pod = 'stargate-0'): Promise<{ pylon: WtSession, atPod: AcceptedSession }> {
  const opened = await cluster.open(pod)
  if (opened.wt === null) throw new Error(`no session: ${opened.status} ${opened.body}`)
  const atPod = await cluster.stubs.get(pod)!.nextSession()
  return { pylon: opened.wt, atPod }
}

t.test('closing the session at the Pylon closes it at the pod with the same code and reason', async (t) => {
  const cluster = await WtCluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' } })
  const { pylon, atPod } = await bridged(cluster)
  pylon.session.close({ closeCode: 4001, reason: 'pylon draining: deploy v2' })
  t.strictSame(await atPod.wt.ended, { ok: true, closeCode: 4001, reason: 'pylon draining: deploy v2' })
  await waitFor(async () => await cluster.metric('completed') === 1, { message: 'outcome completed' })
  t.equal(await cluster.kube.metric('stargate_k8s_router_webtransport_sessions_active'), 0)
  await waitFor(() => cluster.stubs.get('stargate-0')!.connections === 0, { message: 'the upstream connection closed' })
})

t.test('closing the session at the pod closes it at the Pylon with the same code and reason', async (t) => {
  const cluster = await WtCluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' } })
  const { pylon, atPod } = await bridged(cluster)
  atPod.wt.session.close({ closeCode: 0xfffffffe, reason: 'stargate shutting down' })
  t.strictSame(await pylon.ended, { ok: true, closeCode: 0xfffffffe, reason: 'stargate shutting down' })
  await waitFor(async () => await cluster.metric('completed') === 1, { message: 'outcome completed' })
})

t.test('a router shutdown closes open sessions at both ends with reason router shutdown', async (t) => {
  const cluster = await WtCluster.start(t, { pods: ['stargate-0', 'stargate-1'], stub: { mode: 'manual' } })
  const sessions = [await bridged(cluster, 'stargate-0'), await bridged(cluster, 'stargate-1')]
  await cluster.kube.router.shutdown()
  for (const [i, { pylon, atPod }] of sessions.entries()) {
    t.strictSame(await pylon.ended, { ok: true, closeCode: 0, reason: 'router shutdown' }, `session ${i} at the Pylon`)
    t.strictSame(await atPod.wt.ended, { ok: true, closeCode: 0, reason: 'router shutdown' }, `session ${i} at the pod`)
  }
})

t.test('replacing the upstream trust bundle closes bridged sessions with outcome trust_replaced; new ones work', async (t) => {
  const cluster = await WtCluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' }, routerArgs: ['--tls-debounce-ms', '20'] })
  const { pylon, atPod } = await bridged(cluster)
  // The new bundle still holds the pods' CA, plus another: a CA rotation with overlap.
  const next = await createCa({ name: 'next stargate ca' })
  const replaced = Date.now()
  await writeFile(join(cluster.dir, 'ca.crt'), cluster.ca.certPem + next.certPem)
  t.strictSame(await pylon.ended, { ok: true, closeCode: 0, reason: 'upstream trust changed' }, 'the Pylon is told why')
  t.ok(Date.now() - replaced >= 4500, 'after the 5 s trust-change grace (SPEC §8: graceful first)')
  t.strictSame(await atPod.wt.ended, { ok: true, closeCode: 0, reason: 'upstream trust changed' }, 'and so is the pod')
  await waitFor(async () => await cluster.metric('trust_replaced') === 1, { message: 'outcome trust_replaced' })
  const again = await cluster.open('stargate-0')
  t.equal(again.status, 200, 'a new session is bridged under the new bundle')
})

t.test('a session whose Pylon stops answering is closed after the idle timeout', async (t) => {
  const cluster = await WtCluster.start(t, {
    pods: ['stargate-0'],
    stub: { mode: 'manual' },
    routerArgs: ['--relay-idle-timeout-ms', '1000', '--relay-keep-alive-ms', '200'],
  })
  const proxy = await freezableProxy(t, cluster.tunnelPort)
  const opened = await cluster.open('stargate-0', {}, { port: proxy.port })
  t.equal(opened.status, 200)
  const atPod = await cluster.stubs.get('stargate-0')!.nextSession()
  // The Pylon's host hangs: nothing it is sent is answered, PINGs included.
  proxy.freeze()
  const started = Date.now()
  t.strictSame(await atPod.wt.ended, { ok: true, closeCode: 0, reason: 'idle timeout' })
  t.ok(Date.now() - started >= 700, 'not before the timeout (less one tick of the coarse clock)')
})

t.test('a session that is quiet but alive is kept open by keep-alive', async (t) => {
  const cluster = await WtCluster.start(t, {
    pods: ['stargate-0'],
    stub: { mode: 'manual' },
    routerArgs: ['--relay-idle-timeout-ms', '1000', '--relay-keep-alive-ms', '200'],
  })
  const { atPod } = await bridged(cluster)
  const outcome = await Promise.race([atPod.wt.ended.then(() => 'closed'), new Promise((resolve) => { setTimeout(resolve, 2500, 'open') })])
  t.equal(outcome, 'open', 'no data for more than twice the idle timeout, still open')
})
