/**
 * SPEC §11: a WebTransport-over-HTTP/2 session the router drains (the HTTP/2 extra of the
 * tunnel port). The Pylon's HTTP/2 connection gets GOAWAY (no new session on it) and both ends
 * DRAIN_WEBTRANSPORT_SESSION; a bidirectional stream either end opens from then on is refused
 * at both ends with the catalogued code (the capsules pass the relay untouched, so its first
 * capsule has reached the other end, where it is reset too); a stream opened before runs to
 * completion; then the session is closed (`router shutdown`), long before the drain timeout.
 * The library's endpoints (@fails-components/webtransport) play the Pylon and the pod.
 *
 * Failure modes: sessions held until the deadline, new streams bridged into a session about
 * to be cut, a refusal without the documented code.
 */
import t from 'tap'
import { WtCluster } from '../fixtures/webtransport-cluster.ts'
import { next, readAll, writeAll } from '../fixtures/webtransport-streams.ts'
import { STREAM_REFUSALS } from '../../lib/tunnel/errors.ts'
import { parseMetric } from '../fixtures/kube-router.ts'
import { waitFor } from '../fixtures/wait.ts'

const CODE = STREAM_REFUSALS.draining.code

t.test('a draining session: GOAWAY, new streams refused at both ends with the code, the open one finishes, then router shutdown', async (t) => {
  const cluster = await WtCluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' }, routerArgs: ['--shutdown-drain-timeout-ms', '30000'] })
  const opened = await cluster.open('stargate-0')
  if (opened.wt === null) throw new Error(`no session: ${opened.status} ${opened.body}`)
  const pylon = opened.wt
  const atPod = await cluster.stubs.get('stargate-0')!.nextSession()
  let goaway = false
  opened.connection.on('goaway', () => { goaway = true })
  // A request of the Pylon's, half sent when the drain begins.
  const open = await pylon.session.createBidirectionalStream()
  const openWriter = open.writable.getWriter()
  await openWriter.write(Buffer.from('first half, '))
  const openAtPod = await next(atPod.wt.session.incomingBidirectionalStreams)
  if (openAtPod === null) throw new Error('the open stream did not reach the pod')
  const request = readAll(openAtPod.readable)

  const started = Date.now()
  const shutdown = cluster.kube.router.shutdown()
  await waitFor(() => goaway ? true : undefined, { message: 'GOAWAY on the Pylon\'s connection' })

  const late = await pylon.session.createBidirectionalStream()
  const lateWriter = late.writable.getWriter()
  await lateWriter.write(Buffer.from('a request after the drain began')).catch(() => {})
  t.match(await lateWriter.closed.then(() => 'closed', (err: unknown) => String(err)), `StopSending with code:${CODE}`, 'the Pylon\'s new stream: STOP_SENDING with the code')
  t.match(await readAll(late.readable).then(() => 'ended', (err: unknown) => String(err)), `Resetstream with code:${CODE}`, 'and RESET_STREAM with the code')
  await openWriter.write(Buffer.from('second half'))
  await openWriter.close()
  t.equal((await request).toString(), 'first half, second half', 'the open stream finished')
  const answer = readAll(open.readable)
  await writeAll(openAtPod.writable, Buffer.from('the answer'))
  t.equal((await answer).toString(), 'the answer', 'and its answer')

  // The session ends at both ends as soon as that stream did. (The library reads a close that
  // follows a drain capsule as a failed opening: its session leaves the 'connected' state on
  // DRAIN_WEBTRANSPORT_SESSION; the close capsule's reason is checked in webtransport-close.)
  await Promise.all([pylon.ended, atPod.wt.ended])
  await shutdown
  t.ok(Date.now() - started < 10_000, `shutdown done in ${Date.now() - started} ms of a 30 s drain timeout`)
  const metrics = await cluster.kube.router.metrics.registry.metrics()
  t.equal(parseMetric(metrics, 'stargate_k8s_router_drain_streams_refused_total', { kind: 'webtransport_h2', side: 'pylon' }), 1)
  t.equal(parseMetric(metrics, 'stargate_k8s_router_connections_drained_total', { kind: 'webtransport_h2', reason: 'shutdown' }), 1)
  t.equal(parseMetric(metrics, 'stargate_k8s_router_webtransport_sessions_total', { outcome: 'completed' }), 1, 'the session counted completed')
})
