/**
 * Nothing a Pylon sends over HTTP/3 crashes, stalls or poisons the router. A raw QUIC
 * client (ALPN h3, no HTTP/3 library) writes malformed frames, wrong stream types and QPACK
 * the router cannot decode: each closes that connection with the RFC's HTTP/3 error code (what
 * the client sees), a malformed capsule ends only its session, and the router keeps serving.
 */
import t from 'tap'
import { H3Cluster } from '../fixtures/h3-cluster.ts'
import { engine } from '../fixtures/quic-engine.ts'
import { ClientCredentials } from '../../lib/quic/credentials.ts'
import type { QuicCloseInfo, QuicConnection } from '../../lib/quic/connection.ts'
import { H3_ERROR } from '../../lib/quic/h3/errors.ts'
import { FRAME, encodeFrame } from '../../lib/quic/h3/frames.ts'
import { encodeSettingsFrame } from '../../lib/quic/h3/settings.ts'
import { encodeFieldSection } from '../../lib/quic/h3/qpack.ts'
import { waitFor } from '../fixtures/wait.ts'

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s/g, ''), 'hex')
const CONTROL = Buffer.concat([hex('00'), encodeSettingsFrame([[0x33, 1], [0x2b603742, 1]])])

async function rawConnection (cluster: H3Cluster): Promise<{ quic: QuicConnection, closed: Promise<QuicCloseInfo> }> {
  const quic = engine().connect({
    address: '127.0.0.1',
    port: cluster.port,
    serverName: cluster.host('stargate-0'),
    alpn: ['h3'],
    credentials: ClientCredentials.create({ caPem: cluster.ca.certPem, verify: true }),
    transport: { datagrams: true, idleTimeoutMs: 10_000 },
  })
  quic.on('stream', (stream) => { stream.handler = { onReadable: (s) => { while (s.read() !== null); } } })
  const closed = new Promise<QuicCloseInfo>((resolve) => { quic.once('close', resolve) })
  await new Promise<void>((resolve, reject) => {
    quic.once('established', () => { resolve() })
    void closed.then((info) => { reject(new Error(`closed before established: ${info.reasonText}`)) })
  })
  return { quic, closed }
}

function write (quic: QuicConnection, bidi: boolean, data: Buffer, fin = false): void {
  const stream = quic.openStream(bidi)
  if (stream === null) throw new Error('no stream credit')
  if (stream.write(data) !== data.length) throw new Error('short write')
  if (fin) stream.end()
}

const WT_CONNECT = encodeFrame(FRAME.HEADERS, encodeFieldSection([[':method', 'CONNECT'], [':protocol', 'webtransport'], [':scheme', 'https'], [':authority', 'stargate-0.stargate.external'], [':path', '/_stargate/webtransport']]))

t.test('malformed HTTP/3 from a Pylon closes its connection with the right HTTP/3 error code', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'] })
  const cases: readonly [label: string, send: (quic: QuicConnection) => void, code: number][] = [
    ['a control stream that does not start with SETTINGS', (q) => { write(q, false, Buffer.concat([hex('00'), encodeFrame(FRAME.GOAWAY, hex('00'))])) }, H3_ERROR.H3_MISSING_SETTINGS],
    ['a second control stream', (q) => { write(q, false, CONTROL); write(q, false, CONTROL) }, H3_ERROR.H3_STREAM_CREATION_ERROR],
    ['DATA on the control stream', (q) => { write(q, false, Buffer.concat([CONTROL, encodeFrame(FRAME.DATA, hex('00'))])) }, H3_ERROR.H3_FRAME_UNEXPECTED],
    ['an HTTP/2 frame type', (q) => { write(q, false, Buffer.concat([CONTROL, encodeFrame(0x06, Buffer.alloc(8))])) }, H3_ERROR.H3_FRAME_UNEXPECTED],
    ['a push stream from a client', (q) => { write(q, false, CONTROL); write(q, false, hex('01 00')) }, H3_ERROR.H3_STREAM_CREATION_ERROR],
    ['a QPACK encoder stream inserting into a table of capacity 0', (q) => { write(q, false, CONTROL); write(q, false, hex('02 c00f7777772e6578616d706c652e636f6d')) }, H3_ERROR.QPACK_ENCODER_STREAM_ERROR],
    ['HEADERS referencing the dynamic table', (q) => { write(q, false, CONTROL); write(q, true, encodeFrame(FRAME.HEADERS, hex('0381 10 11'))) }, H3_ERROR.QPACK_DECOMPRESSION_FAILED],
    ['DATA before HEADERS', (q) => { write(q, false, CONTROL); write(q, true, encodeFrame(FRAME.DATA, hex('00'))) }, H3_ERROR.H3_FRAME_UNEXPECTED],
    ['a request stream that ends inside a frame', (q) => { write(q, false, CONTROL); write(q, true, WT_CONNECT.subarray(0, 6), true) }, H3_ERROR.H3_FRAME_ERROR],
    ['a HEADERS frame larger than the limit', (q) => { write(q, false, CONTROL); write(q, true, Buffer.concat([hex('01'), hex('80100000')])) }, H3_ERROR.H3_EXCESSIVE_LOAD],
    ['closing the control stream', (q) => { write(q, false, CONTROL, true) }, H3_ERROR.H3_CLOSED_CRITICAL_STREAM],
  ]
  for (const [label, send, code] of cases) {
    const { quic, closed } = await rawConnection(cluster)
    send(quic)
    const info = await closed
    t.equal(info.code, code, `${label}: 0x${code.toString(16)}`)
    t.equal(info.kind, 'peer', `${label}: closed by the router`)
  }
  const good = await cluster.open('stargate-0')
  t.equal(good.status, 200, 'the router still serves sessions')
})

t.test('a malformed capsule ends only its own session (relay_error); an unknown stream type is refused alone', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'] })
  const { quic } = await rawConnection(cluster)
  write(quic, false, CONTROL)
  // A GREASE stream type: refused with STOP_SENDING, nothing else happens.
  write(quic, false, Buffer.concat([hex('21'), Buffer.alloc(100, 1)]))
  const connect = quic.openStream(true)!
  const answered = new Promise<void>((resolve) => { connect.handler = { onReadable: (s) => { if (s.read() !== null) resolve() }, onReset: () => {} } })
  connect.write(WT_CONNECT)
  await answered
  await waitFor(async () => await cluster.kube.metric('stargate_k8s_router_webtransport_sessions_active') === 1, { message: 'bridged' })
  // A close capsule with a 2-byte value (at least 4 are needed), in a DATA frame.
  connect.write(encodeFrame(FRAME.DATA, hex('6843 02 0000')))
  await waitFor(async () => await cluster.metric('relay_error') === 1, { message: 'the session ended as relay_error' })
  const good = await cluster.open('stargate-0')
  t.equal(good.status, 200, 'other sessions are unaffected')
})

t.test('random bytes on random streams never take the router down', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'] })
  let seed = 99
  const random = (): number => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648 }
  for (let n = 0; n < 30; n++) {
    const { quic, closed } = await rawConnection(cluster)
    for (let i = 0; i < 4; i++) {
      const bytes = Buffer.alloc(1 + Math.floor(random() * 200))
      for (let j = 0; j < bytes.length; j++) bytes[j] = Math.floor(random() * 256)
      const bidi = random() < 0.5
      try { write(quic, bidi, i === 0 ? Buffer.concat([CONTROL, bytes]) : bytes, random() < 0.3) } catch { break }
    }
    await Promise.race([closed, new Promise((resolve) => { setTimeout(resolve, 100) })])
    quic.close(0, 'done')
  }
  const good = await cluster.open('stargate-0')
  t.equal(good.status, 200, 'still serving after 30 connections of garbage')
})

t.test('a second session request on one connection is reset with H3_REQUEST_REJECTED and counted; the first session lives on', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], routerArgs: ['--webtransport-max-sessions-per-connection', '5'] })
  const { quic } = await rawConnection(cluster)
  write(quic, false, CONTROL)
  const first = quic.openStream(true)!
  const answered = new Promise<void>((resolve) => { first.handler = { onReadable: (s) => { if (s.read() !== null) resolve() }, onReset: () => {} } })
  first.write(WT_CONNECT)
  await answered
  // A client that ignores the router's max-sessions setting (1 over HTTP/3 whatever the flag).
  const second = quic.openStream(true)!
  const reset = new Promise<number>((resolve) => { second.handler = { onReadable: (s) => { while (s.read() !== null); }, onReset: (_s, code) => { resolve(code) } } })
  second.write(WT_CONNECT)
  t.equal(await reset, H3_ERROR.H3_REQUEST_REJECTED, 'the second request is reset with H3_REQUEST_REJECTED')
  t.equal(await cluster.kube.metric('stargate_k8s_router_webtransport_sessions_refused_total', { reason: 'connection_limit' }), 1, 'counted as refused by the per-connection limit')
  t.equal(await cluster.kube.metric('stargate_k8s_router_webtransport_sessions_active'), 1, 'the first session is still bridged')
  t.equal(cluster.pods.get('stargate-0')?.requests.length, 1, 'the pod saw one session request')
})
