/**
 * 500 concurrent WebTransport-over-HTTP/3 sessions through one router, each used, then
 * closed (sessions opened and abandoned: webtransport-h3-abandon.test.ts).
 */
import t from 'tap'
import { H3Cluster } from '../fixtures/h3-cluster.ts'
import { endWith, readAll } from '../fixtures/h3-wt-session.ts'
import { inBatches, type H3PylonResult } from '../fixtures/h3-pylon.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(180_000)

t.test('500 concurrent sessions are bridged, each carries a stream, and all close cleanly', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0', 'stargate-1'], routerArgs: ['--connect-timeout-ms', '20000'] })
  const pods = ['stargate-0', 'stargate-1']
  const sessions = await inBatches(500, 25, (i) => cluster.open(pods[i % 2] as string, { timeoutMs: 30_000 }))
  t.equal(sessions.filter((s) => s.status === 200).length, 500, 'all 500 accepted')
  t.equal(await cluster.kube.metric('stargate_k8s_router_webtransport_sessions_active'), 500)
  const echoed = await inBatches(500, 50, async (i) => {
    const session = (sessions[i] as H3PylonResult).session!
    const stream = await session.open(true)
    const reply = readAll(stream)
    await endWith(stream, Buffer.from(`session ${i}`))
    return (await reply).toString() === `session ${i}`
  })
  t.equal(echoed.filter(Boolean).length, 500, 'every session echoed its own bytes')
  for (const s of sessions) s.session?.close(0, 'done')
  await waitFor(async () => await cluster.kube.metric('stargate_k8s_router_webtransport_sessions_active') === 0, { timeoutMs: 30_000, message: 'no session left' })
  await waitFor(() => [...cluster.pods.values()].every((pod) => pod.connections === 0), { timeoutMs: 30_000, message: 'no upstream connection left' })
  t.equal(await cluster.metric('completed'), 500)
})
