/**
 * Once a session is bridged, the addon pairs the session's new WebTransport streams
 * itself (lib/quic/native/src/bridge.c): a new stream does not wait for the router's event
 * loop (STREAM_OPENED → header read → partner open → splice in TypeScript), which would make
 * the added latency grow with the messages in flight. Streams that are not the session's
 * (another session id, a header the bridge cannot match) go to TypeScript and are refused
 * there. Byte-exact both ways, counted by the engine.
 */
import t from 'tap'
import { H3Cluster } from '../fixtures/h3-cluster.ts'
import { endWith, readAll } from '../fixtures/h3-wt-session.ts'
import type { H3PylonResult } from '../fixtures/h3-pylon.ts'
import { engine } from '../fixtures/quic-engine.ts'
import { QuicDuplex, QuicStreamError } from '../../lib/quic/stream-duplex.ts'
import { H3_ERROR } from '../../lib/quic/h3/errors.ts'
import { patternBytes } from '../fixtures/quinn-peer.ts'

function session (result: H3PylonResult): NonNullable<H3PylonResult['session']> {
  if (result.session === null) throw new Error(`no session: ${result.status} ${result.body} ${result.close?.reasonText ?? ''}`)
  return result.session
}

const bridged = (): number => engine().counters().bridgedStreams

t.test('a bridged session\'s new streams are paired in the addon, bidi and uni both ways, byte for byte', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'] })
  const result = await cluster.open('stargate-0')
  const pylon = session(result)
  const hello = await pylon.incomingUni.next()
  t.equal(hello === null ? null : (await readAll(hello)).toString(), 'stargate-0', 'the pod\'s greeting')
  const before = bridged()
  const echoes = await Promise.all(Array.from({ length: 30 }, async (_, i) => {
    const stream = await pylon.open(true)
    const back = readAll(stream)
    await endWith(stream, patternBytes(i, 1000 + i * 97))
    return (await back).equals(patternBytes(i, 1000 + i * 97))
  }))
  t.equal(echoes.filter(Boolean).length, 30, '30 bidi streams echoed intact, 30 at once')
  for (let i = 0; i < 5; i++) {
    const uni = await pylon.open(false)
    await endWith(uni, Buffer.from(`uni ${i}`))
    const answer = await pylon.incomingUni.next()
    t.equal(answer === null ? null : (await readAll(answer)).toString(), `uni ${i}`, `uni stream ${i} answered by a pod-opened uni stream`)
  }
  // 30 bidi + 5 uni from the Pylon, 5 uni from the pod: every one paired natively.
  t.equal(bridged() - before, 40, 'the addon paired all 40 streams')
})

t.test('a stream naming another session id still goes to TypeScript and is refused; the session lives on', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'] })
  const result = await cluster.open('stargate-0')
  const pylon = session(result)
  await pylon.incomingUni.next()
  const before = bridged()
  const raw = pylon.h3.quic.openStream(true)
  if (raw === null) return t.fail('no stream credit')
  const stray = new QuicDuplex(raw)
  // 0x41 (two-byte varint) and a session id that is not this session's.
  stray.write(Buffer.from([0x40, 0x41, pylon.sessionId + 4]))
  const error = await new Promise<unknown>((resolve) => {
    stray.on('error', resolve)
    stray.resume()
    stray.on('end', () => { resolve(null) })
  })
  t.ok(error instanceof QuicStreamError, 'the stray stream failed')
  t.equal((error as QuicStreamError).code, H3_ERROR.WT_BUFFERED_STREAM_REJECTED, 'refused with WT_BUFFERED_STREAM_REJECTED')
  const stream = await pylon.open(true)
  const back = readAll(stream)
  await endWith(stream, Buffer.from('still here'))
  t.equal((await back).toString(), 'still here', 'a stream of the session still echoes')
  t.equal(bridged() - before, 1, 'only the session\'s stream was paired by the addon')
})
