/**
 * SPEC §7: WebTransport over HTTP/3 on the tunnel's UDP port, as the Rust router,
 * the real Pylon and the real Stargate speak it. A Pylon (the HTTP/3 client on the QUIC engine)
 * reaches the pod its SNI names with every CONNECT field as sent; streams opened by either side,
 * bidirectional and unidirectional, cross intact in both directions, with FIN and reset codes;
 * datagrams cross both ways; a stream whose reader stalls, or whose header stalls, holds up no
 * other stream.
 */
import t from 'tap'
import { H3Cluster } from '../fixtures/h3-cluster.ts'
import { endWith, readAll } from '../fixtures/h3-wt-session.ts'
import type { H3PylonResult } from '../fixtures/h3-pylon.ts'
import { QuicStreamError } from '../../lib/quic/stream-duplex.ts'
import { webTransportCodeToHttp3 } from '../../lib/quic/h3/errors.ts'
import { waitFor } from '../fixtures/wait.ts'

function pattern (bytes: number, seed: number): Buffer {
  const out = Buffer.allocUnsafe(bytes)
  for (let i = 0; i < bytes; i++) out[i] = (i * 31 + seed) & 0xff
  return out
}

function session (result: H3PylonResult): NonNullable<H3PylonResult['session']> {
  if (result.session === null) throw new Error(`no session: ${result.status} ${result.body} ${result.close?.reasonText ?? ''}`)
  return result.session
}

async function greeting (result: H3PylonResult): Promise<string> {
  const hello = await session(result).incomingUni.next()
  if (hello === null) throw new Error('the pod sent no greeting')
  return (await readAll(hello)).toString()
}

t.test('every pod is reached over HTTP/3 by its SNI, and sees that SNI and every CONNECT field in order', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0', 'stargate-1'] })
  for (const pod of ['stargate-0', 'stargate-1']) {
    const result = await cluster.open(pod, {
      path: '/_stargate/webtransport?pylon=eu-1',
      fields: [['x-inference-server-id', 'inference-server-42'], ['x-stargate-auth-token', 'pylon-token-Zm9vYmFy'], ['x-stargate-capability', 'chat'], ['x-stargate-capability', 'embeddings'], ['user-agent', 'pylon/1.2.3']],
    })
    t.equal(result.status, 200, `${pod}: accepted`)
    t.same(result.fields, [['sec-webtransport-http3-draft', 'draft02']], 'a draft-02 answer, as Chromium needs it')
    t.equal(await greeting(result), pod, `${pod}: reached ${pod}`)
    const seen = cluster.pods.get(pod)?.requests.at(-1)
    t.equal(seen?.sni, cluster.host(pod), 'the pod saw the same SNI')
    t.strictSame(seen?.fields, [
      [':method', 'CONNECT'], [':protocol', 'webtransport'], [':scheme', 'https'], [':authority', `${cluster.host(pod)}:${cluster.port}`],
      [':path', '/_stargate/webtransport?pylon=eu-1'],
      ['x-inference-server-id', 'inference-server-42'], ['x-stargate-auth-token', 'pylon-token-Zm9vYmFy'],
      ['x-stargate-capability', 'chat'], ['x-stargate-capability', 'embeddings'], ['user-agent', 'pylon/1.2.3'],
    ], 'every field, repeated ones repeated, in order')
  }
  t.equal(await cluster.metric('accepted'), 2)
  t.notMatch(cluster.kube.logs.text(), 'pylon-token-Zm9vYmFy', 'the token is never logged')
})

t.test('streams the Pylon opens reach the pod intact both ways: bidi echoed, uni answered', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'] })
  const result = await cluster.open('stargate-0')
  const pylon = session(result)
  await greeting(result)
  const data = pattern(3 * 1024 * 1024 + 17, 5)
  const bidi = await pylon.open(true)
  const echoed = readAll(bidi)
  await endWith(bidi, data)
  t.ok((await echoed).equals(data), '3 MiB echoed byte for byte')
  const uni = await pylon.open(false)
  await endWith(uni, Buffer.from('a uni stream from the pylon'))
  const answer = await pylon.incomingUni.next()
  t.equal(answer === null ? null : (await readAll(answer)).toString(), 'a uni stream from the pylon')
})

t.test('streams the pod opens reach the Pylon intact, bidi and uni', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' } })
  const result = await cluster.open('stargate-0')
  const pylon = session(result)
  const atPod = await cluster.pods.get('stargate-0')!.nextSession()
  if (atPod === null) return t.fail('no session at the pod')
  // The reverse tunnel's main direction: the Stargate opens bidi streams to the Pylon.
  const replies: Promise<Buffer>[] = []
  for (let i = 0; i < 3; i++) {
    const stream = await atPod.open(true)
    replies.push(readAll(stream))
    void endWith(stream, pattern(200_000 + i, i))
  }
  for (let i = 0; i < 3; i++) {
    const incoming = await pylon.incomingBidi.next()
    if (incoming === null) return t.fail('no stream at the pylon')
    const got = await readAll(incoming)
    t.ok(got.equals(pattern(200_000 + i, i)), `stream ${i} arrived intact`)
    await endWith(incoming, Buffer.from(`answer ${i}`))
  }
  t.same((await Promise.all(replies)).map((b) => b.toString()), ['answer 0', 'answer 1', 'answer 2'])
  const uni = await atPod.open(false)
  await endWith(uni, Buffer.from('a uni stream from the pod'))
  const got = await pylon.incomingUni.next()
  t.equal(got === null ? null : (await readAll(got)).toString(), 'a uni stream from the pod')
})

t.test('datagrams cross the router in both directions intact', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'] })
  const result = await cluster.open('stargate-0')
  const pylon = session(result)
  await greeting(result)
  const sent = new Set<string>()
  const got = new Set<string>()
  // Datagrams may be lost; send until enough come back (loopback loses none in practice).
  for (let i = 0; i < 50 && got.size < 10; i++) {
    const payload = `datagram ${i} ${'x'.repeat(i * 10)}`
    sent.add(payload)
    pylon.sendDatagram(Buffer.from(payload))
    const back = await pylon.datagrams.next(500)
    if (back !== null) got.add(back.toString())
  }
  t.ok(got.size >= 10, `${got.size} echoed`)
  t.ok([...got].every((d) => sent.has(d)), 'every datagram came back as it was sent')
})

t.test('a stream whose reader stalls does not hold up the other streams of the session', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' } })
  const result = await cluster.open('stargate-0')
  const pylon = session(result)
  const atPod = await cluster.pods.get('stargate-0')!.nextSession()
  if (atPod === null) return t.fail('no session at the pod')
  // The pod never reads this one: its window fills and the Pylon's writes block.
  const stalled = await pylon.open(true)
  const blocked = new Promise<void>((resolve) => { stalled.write(pattern(8 * 1024 * 1024, 1), () => { resolve() }) })
  const atPodStalled = await atPod.incomingBidi.next()
  t.ok(atPodStalled !== null, 'the stalled stream reached the pod')
  // Another stream goes through meanwhile.
  const other = await pylon.open(true)
  await endWith(other, Buffer.from('not held up'))
  const atPodOther = await atPod.incomingBidi.next()
  t.equal(atPodOther === null ? null : (await readAll(atPodOther)).toString(), 'not held up')
  // Once the pod reads the stalled stream, its bytes flow.
  atPodStalled?.resume()
  await blocked
  t.pass('the stalled stream drained once read')
})

t.test('a stream reset or stopped by one side reaches the other with its code', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' } })
  const result = await cluster.open('stargate-0')
  const pylon = session(result)
  const atPod = await cluster.pods.get('stargate-0')!.nextSession()
  if (atPod === null) return t.fail('no session at the pod')
  const code = webTransportCodeToHttp3(77)
  const stream = await pylon.open(true)
  stream.write(Buffer.from('partial'))
  const atPodStream = await atPod.incomingBidi.next()
  if (atPodStream === null) return t.fail('no stream at the pod')
  const podError = new Promise<unknown>((resolve) => { atPodStream.once('error', resolve) })
  atPodStream.resume()
  stream.resetWrite(code)
  const err = await podError
  t.ok(err instanceof QuicStreamError && err.kind === 'reset' && err.code === code, `the pod sees RESET_STREAM 0x${code.toString(16)}`)
  // STOP_SENDING from the pod reaches the Pylon's writer with its code.
  const second = await pylon.open(true)
  second.on('error', () => {})
  second.write(Buffer.from('x'))
  const atPodSecond = await atPod.incomingBidi.next()
  atPodSecond?.stopSending(webTransportCodeToHttp3(9))
  const stopped = await waitFor(() => second.stream.stopCode, { message: 'STOP_SENDING reached the pylon' })
  t.equal(stopped, webTransportCodeToHttp3(9))
})

t.test('a stream whose header stalls does not hold up the streams opened after it', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' } })
  const result = await cluster.open('stargate-0')
  const pylon = session(result)
  const atPod = await cluster.pods.get('stargate-0')!.nextSession()
  if (atPod === null) return t.fail('no session at the pod')
  // One byte of the two-byte 0x41 signal, then nothing.
  const stalled = result.h3?.quic.openStream(true)
  t.equal(stalled?.write(Buffer.from([0x40])), 1)
  const next = await pylon.open(true)
  await endWith(next, Buffer.from('after the stalled header'))
  const arrived = await atPod.incomingBidi.next()
  t.equal(arrived === null ? null : (await readAll(arrived)).toString(), 'after the stalled header')
  // The stalled stream completes its header later and is bridged then.
  stalled?.write(Buffer.from([0x41, result.session?.sessionId ?? 0]))
  stalled?.end(Buffer.from('late'))
  const late = await atPod.incomingBidi.next()
  t.equal(late === null ? null : (await readAll(late)).toString(), 'late')
})
