/**
 * SPEC §7, §8, §11: how WebTransport-over-HTTP/3 sessions end. A close capsule's code
 * and reason cross the router both ways, as do drain capsules and the CONNECT stream's FIN (the
 * Rust h3 client sends it right after its request and keeps the session); a QUIC connection's
 * close code and reason reach the other leg; a Pylon that ends its session and goes silent (as
 * Chromium does, without a CONNECTION_CLOSE) does not leave the pod's connection waiting for the
 * idle timeout. The router closes sessions itself at shutdown (`router shutdown`), when the
 * upstream trust is replaced (`trust_replaced`) and when the pod starts terminating.
 */
import t from 'tap'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { H3Cluster } from '../fixtures/h3-cluster.ts'
import type { H3PylonResult } from '../fixtures/h3-pylon.ts'
import { readAll, type WtEndpointSession } from '../fixtures/h3-wt-session.ts'
import { createCa } from '../fixtures/certs.ts'
import { waitFor } from '../fixtures/wait.ts'

// The trust-change case waits out the router's 5 s grace (TRUST_CHANGE_GRACE_MS).
t.setTimeout(90_000)

async function bridged (cluster: H3Cluster, options: Parameters<H3Cluster['open']>[1] = {}): Promise<{ result: H3PylonResult, pylon: WtEndpointSession, atPod: WtEndpointSession }> {
  const result = await cluster.open('stargate-0', options)
  if (result.session === null) throw new Error(`no session: ${result.status} ${result.body}`)
  const atPod = await cluster.pods.get('stargate-0')!.nextSession()
  if (atPod === null) throw new Error('no session at the pod')
  return { result, pylon: result.session, atPod }
}

t.test('closing the session at the Pylon closes it at the pod with the same code and reason, and both connections end', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' } })
  const { pylon, atPod } = await bridged(cluster)
  pylon.close(4001, 'pylon draining: deploy v2')
  t.same(await atPod.ended, { how: 'closed', code: 4001, reason: 'pylon draining: deploy v2' })
  await waitFor(async () => await cluster.metric('completed') === 1, { message: 'outcome completed' })
  t.equal(await cluster.kube.metric('stargate_k8s_router_webtransport_sessions_active'), 0)
  await waitFor(() => cluster.pods.get('stargate-0')!.connections === 0, { message: 'the pod\'s connection closed, not left to the idle timeout' })
})

t.test('closing the session at the pod closes it at the Pylon with the same code and reason', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' } })
  const { pylon, atPod } = await bridged(cluster)
  atPod.close(0xfffffffe, 'stargate shutting down')
  t.same(await pylon.ended, { how: 'closed', code: 0xfffffffe, reason: 'stargate shutting down' })
  await waitFor(async () => await cluster.metric('completed') === 1, { message: 'outcome completed' })
})

t.test('drain capsules cross both ways', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' } })
  const { pylon, atPod } = await bridged(cluster)
  atPod.drain()
  t.equal(await pylon.drains.next(), true, 'the pod\'s drain reached the Pylon')
  pylon.drain()
  t.equal(await atPod.drains.next(), true, 'the Pylon\'s drain reached the pod')
})

t.test('a Pylon that finishes its CONNECT stream at once, as the Rust h3 client does, keeps its session', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' } })
  const { pylon, atPod } = await bridged(cluster, { finishAfterRequest: true })
  await waitFor(() => atPod.finReceived, { message: 'the FIN reached the pod' })
  const stream = await atPod.open(true)
  stream.end(Buffer.from('still bridged'))
  const incoming = await pylon.incomingBidi.next()
  t.ok(incoming !== null, 'a pod stream reached the Pylon after the FIN')
})

t.test('a QUIC close from either side reaches the other leg with its code and reason', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' } })
  const first = await bridged(cluster)
  first.result.h3?.close(0x10c, 'pylon restarting')
  t.same(await first.atPod.ended, { how: 'connection', code: 0x10c, reason: 'pylon restarting' })
  const second = await bridged(cluster)
  second.atPod.h3.close(0x102, 'stargate crashed')
  t.same(await second.pylon.ended, { how: 'connection', code: 0x102, reason: 'stargate crashed' })
})

/*
 * The pod writes a stream, waits until the router acknowledged every byte, and closes its QUIC
 * connection; the router held most of the stream (the Pylon's windows are small and it reads only
 * afterwards). The failure mode: the router closed the Pylon's leg at once and the bytes it had
 * acknowledged to the pod were lost. Now the Pylon's leg delivers them and the FIN first.
 */
t.test('a pod closing its connection after the router acknowledged a stream: the Pylon reads the whole stream, then the pod\'s close', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' } })
  const small = { maxStreamWindow: 64 * 1024, initialMaxData: 64 * 1024, maxWindow: 64 * 1024 }
  const { pylon, atPod } = await bridged(cluster, { transport: small })
  const size = 1536 * 1024
  const data = Buffer.alloc(size)
  for (let i = 0; i < size; i += 4) data.writeUInt32LE(i, i)
  const stream = await atPod.open(true)
  stream.end(data)
  const incoming = await pylon.incomingBidi.next()
  if (incoming === null) throw new Error('no stream at the Pylon')
  incoming.pause()
  const quic = atPod.h3.quic
  await waitFor(() => {
    const stats = quic.stats()
    return stats !== null && stats.txBytes >= size + 3 && stats.bytesInFlight === 0 ? true : undefined
  }, { message: 'the router acknowledged every byte of the stream' })
  atPod.h3.close(0x102, 'stargate done')
  const read = readAll(incoming)
  incoming.resume()
  const got = await read
  t.equal(got.length, size, 'the Pylon reads every byte')
  t.ok(got.equals(data), 'byte-exact')
  t.same(await pylon.ended, { how: 'connection', code: 0x102, reason: 'stargate done' }, 'then the pod\'s close code and reason')
})

t.test('a Pylon that closes its session and goes silent (no CONNECTION_CLOSE) does not hold the pod\'s connection', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' } })
  const { result, pylon } = await bridged(cluster)
  pylon.close(0, 'done')
  // As Chromium does after a session ends: the connection is dropped without telling anyone.
  await new Promise((resolve) => { setTimeout(resolve, 50) })
  result.h3?.quic.destroy()
  await waitFor(() => cluster.pods.get('stargate-0')!.connections === 0, { timeoutMs: 5000, message: 'the pod\'s connection closed within the close grace' })
})

t.test('a router shutdown closes open sessions at both ends with reason router shutdown', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' } })
  const { pylon, atPod } = await bridged(cluster)
  const shutdown = cluster.kube.router.shutdown()
  t.same(await pylon.ended, { how: 'closed', code: 0, reason: 'router shutdown' })
  t.same(await atPod.ended, { how: 'closed', code: 0, reason: 'router shutdown' })
  await shutdown
})

t.test('replacing the upstream trust bundle drains bridged sessions, closes them after the 5 s grace with outcome trust_replaced; new ones work', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' }, routerArgs: ['--tls-debounce-ms', '20'] })
  const { pylon, atPod } = await bridged(cluster)
  const next = await createCa({ name: 'next stargate ca' })
  await writeFile(join(cluster.dir, 'ca.crt'), cluster.ca.certPem + next.certPem)
  // SPEC §8: graceful first (both peers asked to drain), closed after TRUST_CHANGE_GRACE_MS.
  t.equal(await pylon.drains.next(), true, 'the Pylon is asked to drain')
  const drained = Date.now()
  t.equal(await atPod.drains.next(), true, 'and so is the pod')
  t.same(await pylon.ended, { how: 'closed', code: 0, reason: 'upstream trust changed' }, 'the Pylon is told why')
  t.ok(Date.now() - drained >= 4500, 'the close comes after the grace')
  t.same(await atPod.ended, { how: 'closed', code: 0, reason: 'upstream trust changed' }, 'and so is the pod')
  await waitFor(async () => await cluster.metric('trust_replaced') === 1, { message: 'outcome trust_replaced' })
  const again = await cluster.open('stargate-0')
  t.equal(again.status, 200, 'a new session is bridged under the new bundle')
})

t.test('a session to a pod that starts terminating is closed after --drain-grace-ms with the reason', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' }, routerArgs: ['--drain-grace-ms', '300'] })
  const { pylon, atPod } = await bridged(cluster)
  const left = Date.now()
  cluster.publish('stargate-0', { ready: false, serving: true, terminating: true })
  t.same(await pylon.ended, { how: 'closed', code: 0, reason: 'target stargate left the ready set' })
  t.ok(Date.now() - left >= 250, 'after the drain grace')
  t.same(await atPod.ended, { how: 'closed', code: 0, reason: 'target stargate left the ready set' })
})
