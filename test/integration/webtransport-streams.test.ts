/**
 * SPEC §7: a bridged session carries bidirectional and unidirectional streams
 * opened by either side, and datagrams, with backpressure; a stream whose reader stalls does
 * not hold up the others. Payloads are compared by SHA-256 at the far end.
 *
 * In a reverse tunnel the Stargate pod opens the streams (one per proxied LLM request) and the
 * Pylon answers them; the Pylon opens streams of its own less often. Both are tested.
 */
import t, { type Test } from 'tap'
import { WtCluster } from '../fixtures/webtransport-cluster.ts'
import { next, payload, readAll, sha256, writeAll } from '../fixtures/webtransport-streams.ts'
import type { AcceptedSession } from '../fixtures/webtransport-stargate.ts'
import type { EngineSession } from '../fixtures/webtransport-engine.ts'
import { waitFor } from '../fixtures/wait.ts'

/**
 * @fails-components/webtransport 1.6.8 loses bytes on stream id 0 — the first bidirectional
 * stream a server opens — whenever a stream capsule spans two HTTP/2 DATA frames
 * (http2/node/capsuleparser.js tests the BigInt stream id for truthiness, and 0n is falsy, so
 * the continuation is dropped). It happens without the router as well; the pod burns stream
 * 0 on a one-byte exchange before the streams under test.
 */
async function burnStreamZero (pylon: EngineSession, pod: AcceptedSession): Promise<void> {
  const stream = await pod.wt.session.createBidirectionalStream()
  await writeAll(stream.writable, Buffer.from('0'))
  const atPylon = await next(pylon.incomingBidirectionalStreams)
  if (atPylon === null) throw new Error('stream 0 did not arrive')
  await readAll(atPylon.readable)
  await writeAll(atPylon.writable, Buffer.from('0'))
  await readAll(stream.readable)
}

async function bridged (t: Test): Promise<{ cluster: WtCluster, pylon: EngineSession, pod: AcceptedSession }> {
  const cluster = await WtCluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' } })
  const opened = await cluster.open('stargate-0')
  if (opened.wt === null) throw new Error(`no session: ${opened.status} ${opened.body}`)
  const pod = await cluster.stubs.get('stargate-0')!.nextSession()
  t.ok(await pod.wt.ready, 'the pod side is ready')
  return { cluster, pylon: opened.wt.session, pod }
}

t.test('streams the Pylon opens reach the pod intact, and the answers come back intact', async (t) => {
  const { pylon, pod } = await bridged(t)
  const request = payload(512 * 1024, 1)
  const answer = payload(768 * 1024, 2)
  const bidi = await pylon.createBidirectionalStream()
  const sent = writeAll(bidi.writable, request)
  const atPod = await next(pod.wt.session.incomingBidirectionalStreams)
  t.ok(atPod !== null, 'the pod got the stream')
  t.equal(sha256(await readAll(atPod!.readable)), sha256(request), 'request bytes intact at the pod')
  await sent
  const [back] = await Promise.all([readAll(bidi.readable), writeAll(atPod!.writable, answer)])
  t.equal(sha256(back), sha256(answer), 'answer bytes intact at the Pylon')

  const upload = payload(300 * 1024, 3)
  const uni = await pylon.createUnidirectionalStream()
  const uploaded = writeAll(uni, upload)
  const uniAtPod = await next(pod.wt.session.incomingUnidirectionalStreams)
  t.ok(uniAtPod !== null, 'the pod got the unidirectional stream')
  t.equal(sha256(await readAll(uniAtPod!)), sha256(upload), 'unidirectional bytes intact at the pod')
  await uploaded
})

t.test('streams the pod opens reach the Pylon intact, as proxied LLM requests do', async (t) => {
  const { pylon, pod } = await bridged(t)
  await burnStreamZero(pylon, pod)
  // The Pylon serves every stream the pod opens: reads the request, streams back an answer
  // derived from it (the request's hash, then 200 KiB of tokens seeded by its size).
  const served = (async () => {
    for (;;) {
      const stream = await next(pylon.incomingBidirectionalStreams)
      if (stream === null) return
      void (async () => {
        const request = await readAll(stream.readable)
        await writeAll(stream.writable, Buffer.concat([Buffer.from(sha256(request)), payload(200 * 1024, request.length)]))
      })().catch(() => {})
    }
  })()
  const sizes = [1, 1000, 64 * 1024, 333 * 1024]
  await Promise.all(sizes.map(async (size, i) => {
    const request = payload(size, 10 + i)
    const stream = await pod.wt.session.createBidirectionalStream()
    const [, response] = await Promise.all([writeAll(stream.writable, request), readAll(stream.readable)])
    t.equal(response.subarray(0, 64).toString(), sha256(request), `request of ${size} bytes intact at the Pylon`)
    t.equal(sha256(response.subarray(64)), sha256(payload(200 * 1024, size)), `its answer intact at the pod (${size})`)
  }))
  const push = payload(100 * 1024, 99)
  const uni = await pod.wt.session.createUnidirectionalStream()
  const pushed = writeAll(uni, push)
  const atPylon = await next(pylon.incomingUnidirectionalStreams)
  t.ok(atPylon !== null)
  t.equal(sha256(await readAll(atPylon!)), sha256(push), 'unidirectional bytes intact at the Pylon')
  await pushed
  pod.wt.session.close({ closeCode: 0, reason: 'done' })
  await served
})

t.test('datagrams cross the router in both directions intact', async (t) => {
  const { pylon, pod } = await bridged(t)
  const sizes = [0, 1, 100, 1200, 4096, 16_000]
  const up = sizes.map((size, i) => payload(size, 100 + i))
  const down = sizes.map((size, i) => payload(size, 200 + i))
  const receive = async (session: EngineSession, count: number): Promise<string[]> => {
    const reader = session.datagrams.readable.getReader()
    const got: string[] = []
    try {
      while (got.length < count) {
        const { value, done } = await reader.read()
        if (done) break
        got.push(sha256(value))
      }
    } finally {
      reader.releaseLock()
    }
    return got
  }
  // Zero-length datagrams are legal but some readers drop them; count what can arrive.
  const atPod = receive(pod.wt.session, up.length)
  const atPylon = receive(pylon, down.length)
  const pylonWriter = pylon.datagrams.createWritable().getWriter()
  const podWriter = pod.wt.session.datagrams.createWritable().getWriter()
  for (const d of up) await pylonWriter.write(d)
  for (const d of down) await podWriter.write(d)
  t.strictSame(await atPod, up.map(sha256), 'the pod got the Pylon\'s datagrams, in order')
  t.strictSame(await atPylon, down.map(sha256), 'the Pylon got the pod\'s datagrams, in order')
})

t.test('a stream whose reader stalls does not hold up the other streams of the session', async (t) => {
  const { pylon, pod } = await bridged(t)
  const stalledStream = await pylon.createBidirectionalStream()
  // The pod does not read this stream. (The library's receiver takes what arrives into its
  // stream queue and returns the credit, so the sender may well finish: what matters here is
  // that the relay, which sees only capsules, keeps the session's other streams moving.)
  const stalledData = payload(2 * 1024 * 1024, 5)
  const stalled = writeAll(stalledStream.writable, stalledData).then(() => 'finished', () => 'failed')
  const first = await next(pod.wt.session.incomingBidirectionalStreams)
  t.ok(first !== null, 'the stalled stream reached the pod')
  const flowing = payload(3 * 1024 * 1024, 6)
  const moving = await pylon.createBidirectionalStream()
  const sent = writeAll(moving.writable, flowing)
  const second = await next(pod.wt.session.incomingBidirectionalStreams)
  t.ok(second !== null)
  t.equal(sha256(await readAll(second!.readable)), sha256(flowing), '3 MiB passed next to the unread stream')
  await sent
  // Read late, the stalled stream is intact.
  t.equal(sha256(await readAll(first!.readable)), sha256(stalledData), 'the unread stream is intact once read')
  t.equal(await stalled, 'finished')
})

t.test('a stream reset or refused by one side reaches the other with its code', async (t) => {
  const { pylon, pod } = await bridged(t)
  // RESET_STREAM: the Pylon abandons what it was sending.
  const reset = await pylon.createBidirectionalStream()
  const writer = reset.writable.getWriter()
  await writer.write(payload(1000, 1))
  const atPod = await next(pod.wt.session.incomingBidirectionalStreams)
  t.ok(atPod !== null)
  await writer.abort({ code: 42 })
  const read = await readAll(atPod!.readable).then(() => 'ended', (err: unknown) => String(err))
  t.match(read, 'Resetstream with code:42', 'the pod\'s read fails with the reset code')

  // STOP_SENDING: the pod refuses what the Pylon sends on another stream.
  const refused = await pylon.createBidirectionalStream()
  const refusedWriter = refused.writable.getWriter()
  await refusedWriter.write(payload(1000, 2))
  const refusedAtPod = await next(pod.wt.session.incomingBidirectionalStreams)
  t.ok(refusedAtPod !== null)
  await refusedAtPod!.readable.cancel({ code: 7 })
  const closed = await refusedWriter.closed.then(() => 'closed', (err: unknown) => String(err))
  t.match(closed, 'StopSending with code:7', 'the Pylon\'s writer fails with the stop-sending code')
})

t.test('bytes bridged are counted in both directions', async (t) => {
  const { cluster, pylon, pod } = await bridged(t)
  const bidi = await pylon.createBidirectionalStream()
  const data = payload(256 * 1024, 7)
  const sent = writeAll(bidi.writable, data)
  const atPod = await next(pod.wt.session.incomingBidirectionalStreams)
  await readAll(atPod!.readable)
  await sent
  await writeAll(atPod!.writable, data)
  await readAll(bidi.readable)
  // The relay adds its counts to the metric once a second.
  await waitFor(async () => {
    const up = await cluster.kube.metric('stargate_k8s_router_webtransport_bridged_bytes_total', { direction: 'to_upstream' }) ?? 0
    const down = await cluster.kube.metric('stargate_k8s_router_webtransport_bridged_bytes_total', { direction: 'to_downstream' }) ?? 0
    return up >= data.length && down >= data.length
  }, { timeoutMs: 5000, message: 'bytes counted both ways' })
  t.pass('at least the payload counted each way (capsule framing adds a little)')
})
