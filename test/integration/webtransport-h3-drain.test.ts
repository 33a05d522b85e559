/**
 * SPEC §11: a WebTransport-over-HTTP/3 session the router drains. The Pylon's connection gets
 * an HTTP/3 GOAWAY naming the first request stream after its session, and both sessions the
 * WebTransport drain signal (DRAIN_WEBTRANSPORT_SESSION); a new bidirectional stream from
 * either side is refused with the catalogued code (as a WebTransport stream error); a stream
 * opened before runs to completion; then the session is closed with `router shutdown`, long
 * before the drain timeout. A session not bridged yet when the drain begins is refused 503.
 *
 * Failure modes: sessions held until the deadline, new streams bridged into a session about
 * to be cut, a refusal a Stargate cannot tell from a failure, a Pylon never told to move.
 */
import t from 'tap'
import { H3Cluster } from '../fixtures/h3-cluster.ts'
import { endWith, readAll } from '../fixtures/h3-wt-session.ts'
import { waitFor } from '../fixtures/wait.ts'
import { STREAM_REFUSALS } from '../../lib/tunnel/errors.ts'
import { webTransportCodeToHttp3 } from '../../lib/quic/h3/errors.ts'
import { parseMetric } from '../fixtures/kube-router.ts'
import { createHash } from 'node:crypto'
import { chromiumSkip, launchChromium, openPage } from '../fixtures/chromium.ts'

const chromium = await chromiumSkip()

// Chromium's side: a stream opened and half sent, then (once the test drained the router) a new
// stream, the rest of the first, and how the session ended. Chromium 156 has no drain attribute
// (WebTransport.draining): what it shows is that it opens no new stream, and the close.
const PAGE = `
const enc = (s) => new TextEncoder().encode(s)
async function readText (readable) {
  const reader = readable.getReader(); let text = ''
  for (;;) { const { value, done } = await reader.read(); if (done) return text; text += new TextDecoder().decode(value) }
}
let go
globalThis.drained = new Promise((resolve) => { go = resolve })
globalThis.go = () => go()
async function session (url, hash) {
  const log = {}
  const wt = new WebTransport(url, { serverCertificateHashes: [{ algorithm: 'sha-256', value: new Uint8Array(hash) }] })
  wt.closed.then((info) => { log.closed = info }, (err) => { log.closed = { error: String(err) } })
  await wt.ready
  const open = await wt.createBidirectionalStream()
  const w = open.writable.getWriter(); await w.write(enc('first half, '))
  globalThis.stage = 'open'
  await globalThis.drained
  try {
    await w.write(enc('second half')); await w.close()
    log.answer = await readText(open.readable)
  } catch (err) {
    log.openFailed = { name: err.name, message: err.message, source: err.source, streamErrorCode: err.streamErrorCode }
  }
  // A new stream after the GOAWAY: Chromium holds it back (and fails it when the session ends);
  // a stream creation it holds also holds the writes of its other streams, hence this order.
  log.late = await Promise.race([
    wt.createBidirectionalStream().then(() => 'opened', (err) => err.name),
    new Promise((resolve) => setTimeout(() => resolve('held back'), 1000)),
  ])
  await wt.closed.catch(() => {})
  return log
}`

const CODE = webTransportCodeToHttp3(STREAM_REFUSALS.draining.code)

t.test('a draining session: GOAWAY and drain capsules, new streams refused both ways, the open one finishes, then router shutdown', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' }, routerArgs: ['--shutdown-drain-timeout-ms', '30000'] })
  const result = await cluster.open('stargate-0')
  const pylon = result.session
  if (pylon === null) throw new Error(`no session: ${result.status} ${result.body}`)
  const atPod = await cluster.pods.get('stargate-0')!.nextSession()
  if (atPod === null) throw new Error('no session at the pod')
  // A request of the Pylon's, half sent when the drain begins.
  const open = await pylon.open(true)
  open.write(Buffer.from('first half, '))
  const openAtPod = await atPod.incomingBidi.next()
  if (openAtPod === null) throw new Error('the open stream did not reach the pod')

  const started = Date.now()
  const shutdown = cluster.kube.router.shutdown()
  t.equal(await pylon.goaways.next(), open.stream.id + 4, 'the Pylon gets GOAWAY naming the stream id after its last one (WebTransport streams share the request id space)')
  t.equal(await pylon.drains.next(), true, 'and the drain capsule')
  t.equal(await atPod.drains.next(), true, 'so does the pod')

  const fromPylon = await pylon.open(true)
  fromPylon.write(Buffer.from('a request after the drain began'))
  t.equal(await waitFor(() => fromPylon.stream.resetCode ?? undefined, { message: 'the Pylon\'s new stream refused' }), CODE, 'the Pylon\'s new stream: RESET_STREAM with the code')
  t.equal(await waitFor(() => fromPylon.stream.stopCode ?? undefined), CODE, 'and STOP_SENDING')
  const fromPod = await atPod.open(true)
  fromPod.write(Buffer.from('a request after the drain began'))
  t.equal(await waitFor(() => fromPod.stream.resetCode ?? undefined, { message: 'the pod\'s new stream refused' }), CODE, 'the pod\'s new stream: the same')
  t.equal(await atPod.incomingBidi.next(300), null, 'nothing new reached the pod')

  const request = readAll(openAtPod)
  await endWith(open, Buffer.from('second half'))
  t.equal((await request).toString(), 'first half, second half', 'the open stream finished')
  const answer = readAll(open)
  await endWith(openAtPod, Buffer.from('the answer'))
  t.equal((await answer).toString(), 'the answer', 'and its answer')

  t.same(await pylon.ended, { how: 'closed', code: 0, reason: 'router shutdown' }, 'then the session is closed with router shutdown')
  t.same(await atPod.ended, { how: 'closed', code: 0, reason: 'router shutdown' })
  await shutdown
  t.ok(Date.now() - started < 10_000, `shutdown done in ${Date.now() - started} ms of a 30 s drain timeout`)
  const metrics = await cluster.kube.router.metrics.registry.metrics()
  t.equal(parseMetric(metrics, 'stargate_k8s_router_drain_streams_refused_total', { kind: 'webtransport_h3', side: 'pylon' }), 1)
  t.equal(parseMetric(metrics, 'stargate_k8s_router_drain_streams_refused_total', { kind: 'webtransport_h3', side: 'stargate' }), 1)
  t.equal(parseMetric(metrics, 'stargate_k8s_router_connections_drained_total', { kind: 'webtransport_h3', reason: 'shutdown' }), 1)
})

t.test('a session request still waiting for its pod when the drain begins is refused 503 router is shutting down', async (t) => {
  // The pod never answers: the session is still being set up when the router drains.
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual', silent: true }, routerArgs: ['--shutdown-drain-timeout-ms', '30000', '--connect-timeout-ms', '10000'] })
  const opening = cluster.open('stargate-0', { timeoutMs: 10_000 })
  await waitFor(() => cluster.pods.get('stargate-0')!.requests.length === 1 ? true : undefined, { message: 'the request at the pod' })
  void cluster.kube.router.connections.drainAll('shutdown')
  const result = await opening
  t.equal(result.status, 503)
  t.ok(result.fields.some(([name, value]) => name === 'x-stargate-error-code' && value === 'shutting_down'), 'x-stargate-error-code: shutting_down')
  t.equal(result.body, 'router is shutting down\n')
})

t.test('Chromium: its open stream finishes end to end, it opens no new stream after the GOAWAY, and the drain deadline ends the session', { skip: chromium }, async (t) => {
  // Chromium 156 (draft-02) stops acknowledging the session's stream data once it has read an
  // HTTP/3 GOAWAY: its open stream is delivered whole both ways, but the router never sees the
  // acknowledgement of its last bytes to Chromium, so the session is only closed at the drain
  // deadline (without a GOAWAY it closes as soon as the stream ends). Hence a short timeout here.
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' }, routerArgs: ['--shutdown-drain-timeout-ms', '4000'] })
  const pod = cluster.pods.get('stargate-0')!
  const browser = await launchChromium(t, [cluster.host('stargate-0')])
  const page = await openPage(t, browser, PAGE)
  const hash = [...createHash('sha256').update(cluster.routerLeaf.x509.raw).digest()]
  const url = `https://${cluster.host('stargate-0')}:${cluster.port}/_stargate/webtransport`
  const inPage = page.evaluate(([u, h]) => (globalThis as unknown as { session: (u: string, h: number[]) => Promise<Record<string, unknown>> }).session(u as string, h as number[]), [url, hash] as const)
  const atPod = await pod.nextSession(20_000)
  if (atPod === null) return t.fail(`no session reached the pod: ${JSON.stringify(await inPage.catch((e: Error) => e.message))}`)
  const openAtPod = await atPod.incomingBidi.next()
  if (openAtPod === null) return t.fail('Chromium\'s stream did not reach the pod')
  await waitFor(async () => await page.evaluate(() => (globalThis as unknown as { stage?: string }).stage) === 'open' ? true : undefined, { message: 'the page\'s open stream' })
  const started = Date.now()
  const shutdown = cluster.kube.router.shutdown()
  t.equal(await atPod.drains.next(), true, 'the pod gets the drain capsule')
  await page.evaluate(() => { (globalThis as unknown as { go: () => void }).go() })
  const request = readAll(openAtPod)
  t.equal((await request).toString(), 'first half, second half', 'Chromium\'s open stream reached the pod whole')
  await endWith(openAtPod, Buffer.from('the answer'))
  const log = await inPage
  t.comment(`Chromium: ${JSON.stringify(log)}`)
  t.equal(log.answer, 'the answer', 'and its answer reached Chromium whole')
  t.not(log.late, 'opened', `Chromium opens no new stream on the draining session (${String(log.late)})`)
  t.ok(log.closed !== undefined, 'the session ended')
  t.equal(await atPod.incomingBidi.next(300), null, 'no new stream reached the pod')
  await shutdown
  t.ok(Date.now() - started < 4000 + 1000 + 3000, `shutdown done in ${Date.now() - started} ms (drain timeout 4 s)`)
})
