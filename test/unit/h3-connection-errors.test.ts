/**
 * What a misbehaving HTTP/3 peer gets from the sans-I/O core: each violation closes the
 * connection, or resets only the stream, with the code RFC 9114 / RFC 9204 / RFC 9297 name,
 * and nothing a peer sends makes the core throw (a random-input run checks that every call
 * returns actions and every close code is one of the table's).
 */
import t from 'tap'
import { H3_ERROR, H3_VIOLATIONS } from '../../lib/quic/h3/errors.ts'
import { FRAME, encodeFrame, encodeFrameHeader, encodeVarintFrame } from '../../lib/quic/h3/frames.ts'
import { SETTING, encodeSettingsFrame } from '../../lib/quic/h3/settings.ts'
import { decodeFieldSection, encodeFieldSection } from '../../lib/quic/h3/qpack.ts'
import { encodeVarint } from '../../lib/quic/varint.ts'
import { encodeCloseCapsule } from '../../lib/quic/h3/capsule.ts'
import { type H3Side, WT_CONNECT_FIELDS, h3Pair } from '../fixtures/h3-pair.ts'

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s/g, ''), 'hex')
const SETTINGS_EMPTY = encodeSettingsFrame([])
/** A peer uni stream id (client → server: 2, 6, 10…; server → client: 3, 7…) not used by the pair. */
const CLIENT_UNI = 10
const SERVER_UNI = 11

function headers (fields: readonly (readonly [string, string])[]): Buffer {
  const block = encodeFieldSection(fields)
  return encodeFrame(FRAME.HEADERS, block)
}

function closedWith (side: H3Side): number | null {
  return side.closed?.code ?? null
}

t.test('connection errors a client can cause at a server', async (t) => {
  const cases: readonly [label: string, run: (server: H3Side) => void, code: number][] = [
    ['second control stream', (s) => s.receive(CLIENT_UNI, Buffer.concat([hex('00'), SETTINGS_EMPTY]), false), H3_ERROR.H3_STREAM_CREATION_ERROR],
    ['control stream FIN', (s) => s.receive(2, Buffer.alloc(0), true), H3_ERROR.H3_CLOSED_CRITICAL_STREAM],
    ['control stream reset', (s) => s.receiveReset(2, 0), H3_ERROR.H3_CLOSED_CRITICAL_STREAM],
    ['STOP_SENDING on our control stream', (s) => s.receiveStop(s.controlStreamId, 0), H3_ERROR.H3_CLOSED_CRITICAL_STREAM],
    ['second SETTINGS', (s) => s.receive(2, SETTINGS_EMPTY, false), H3_ERROR.H3_FRAME_UNEXPECTED],
    ['DATA on the control stream', (s) => s.receive(2, encodeFrame(FRAME.DATA, hex('00')), false), H3_ERROR.H3_FRAME_UNEXPECTED],
    ['HTTP/2 frame type on the control stream', (s) => s.receive(2, encodeFrame(0x06, Buffer.alloc(8)), false), H3_ERROR.H3_FRAME_UNEXPECTED],
    ['CANCEL_PUSH for a push never promised', (s) => s.receive(2, encodeVarintFrame(FRAME.CANCEL_PUSH, 0), false), H3_ERROR.H3_ID_ERROR],
    ['GOAWAY with a malformed payload', (s) => s.receive(2, encodeFrame(FRAME.GOAWAY, hex('0000')), false), H3_ERROR.H3_FRAME_ERROR],
    ['push stream from a client', (s) => s.receive(CLIENT_UNI, hex('01 00'), false), H3_ERROR.H3_STREAM_CREATION_ERROR],
    ['QPACK encoder stream inserting', (s) => s.receive(CLIENT_UNI, hex('02 c00f7777772e6578616d706c652e636f6d'), false), H3_ERROR.QPACK_ENCODER_STREAM_ERROR],
    ['QPACK encoder stream raising the capacity', (s) => s.receive(CLIENT_UNI, hex('02 3fbd01'), false), H3_ERROR.QPACK_ENCODER_STREAM_ERROR],
    ['QPACK decoder stream acknowledging a section', (s) => s.receive(CLIENT_UNI, hex('03 84'), false), H3_ERROR.QPACK_DECODER_STREAM_ERROR],
    ['second QPACK encoder stream', (s) => { s.receive(CLIENT_UNI, hex('02'), false); s.receive(CLIENT_UNI + 4, hex('02'), false) }, H3_ERROR.H3_STREAM_CREATION_ERROR],
    ['QPACK encoder stream closed', (s) => s.receive(CLIENT_UNI, hex('02 20'), true), H3_ERROR.H3_CLOSED_CRITICAL_STREAM],
    ['HEADERS referencing the dynamic table', (s) => s.receive(0, encodeFrame(FRAME.HEADERS, hex('0381 10 11')), false), H3_ERROR.QPACK_DECOMPRESSION_FAILED],
    ['HEADERS with a bad Huffman string', (s) => s.receive(0, encodeFrame(FRAME.HEADERS, hex('0000 51 81 00')), false), H3_ERROR.QPACK_DECOMPRESSION_FAILED],
    ['DATA before HEADERS', (s) => s.receive(0, encodeFrame(FRAME.DATA, hex('00')), false), H3_ERROR.H3_FRAME_UNEXPECTED],
    ['SETTINGS on a request stream', (s) => s.receive(0, SETTINGS_EMPTY, false), H3_ERROR.H3_FRAME_UNEXPECTED],
    ['PUSH_PROMISE to a server', (s) => s.receive(0, Buffer.concat([headers(WT_CONNECT_FIELDS), encodeFrame(FRAME.PUSH_PROMISE, hex('00 0000'))]), false), H3_ERROR.H3_FRAME_UNEXPECTED],
    ['HEADERS frame larger than the limit', (s) => s.receive(0, encodeFrameHeader(FRAME.HEADERS, 1 << 20), false), H3_ERROR.H3_EXCESSIVE_LOAD],
    ['request stream ending inside a frame', (s) => s.receive(0, headers(WT_CONNECT_FIELDS).subarray(0, 5), true), H3_ERROR.H3_FRAME_ERROR],
    ['malformed datagram', (s) => s.apply(s.conn.onDatagram(hex('40'))), H3_ERROR.H3_DATAGRAM_ERROR],
  ]
  for (const [label, run, code] of cases) {
    const { server } = h3Pair()
    run(server)
    t.equal(closedWith(server), code, label)
    t.same(server.conn.onStreamData(0, headers(WT_CONNECT_FIELDS), false), [], `${label}: nothing after the close`)
  }
})

t.test('connection errors a server can cause at a client', async (t) => {
  const cases: readonly [label: string, run: (client: H3Side) => void, code: number][] = [
    ['push stream (no MAX_PUSH_ID was sent)', (c) => c.receive(SERVER_UNI, hex('01 00'), false), H3_ERROR.H3_ID_ERROR],
    ['MAX_PUSH_ID to a client', (c) => c.receive(3, encodeVarintFrame(FRAME.MAX_PUSH_ID, 4), false), H3_ERROR.H3_FRAME_UNEXPECTED],
    ['GOAWAY naming a stream that is not client bidi', (c) => c.receive(3, encodeVarintFrame(FRAME.GOAWAY, 2), false), H3_ERROR.H3_ID_ERROR],
    ['GOAWAY identifier increasing', (c) => { c.receive(3, encodeVarintFrame(FRAME.GOAWAY, 4), false); c.receive(3, encodeVarintFrame(FRAME.GOAWAY, 8), false) }, H3_ERROR.H3_ID_ERROR],
    ['server-initiated bidi stream that is not WebTransport', (c) => c.receive(1, headers([[':status', '200']]), false), H3_ERROR.H3_STREAM_CREATION_ERROR],
    ['PUSH_PROMISE on a response', (c) => {
      const sent = c.conn.request(0, [[':method', 'GET'], [':scheme', 'https'], [':authority', 'a'], [':path', '/']])
      if (sent.ok) c.apply(sent.actions)
      c.receive(0, encodeFrame(FRAME.PUSH_PROMISE, hex('00 0000')), false)
    }, H3_ERROR.H3_ID_ERROR],
  ]
  for (const [label, run, code] of cases) {
    const { client } = h3Pair()
    client.peer = null // keep what the client writes from reaching the server
    run(client)
    t.equal(closedWith(client), code, label)
  }
  const plain = h3Pair({ client: { webTransportMaxSessions: 0 } })
  plain.client.receive(1, hex('4041 00'), false)
  t.equal(closedWith(plain.client), H3_ERROR.H3_STREAM_CREATION_ERROR, 'no WebTransport: no server-initiated bidi stream at all')
})

t.test('SETTINGS that are invalid close the connection with H3_SETTINGS_ERROR', async (t) => {
  const { client, server } = h3Pair({ noStart: true })
  client.peer = null
  server.receive(2, Buffer.concat([hex('00'), encodeFrame(FRAME.SETTINGS, hex('0200'))]), false)
  t.equal(closedWith(server), H3_ERROR.H3_SETTINGS_ERROR)
  const other = h3Pair({ noStart: true })
  other.server.receive(2, Buffer.concat([hex('00'), encodeFrame(FRAME.GOAWAY, hex('00'))]), false)
  t.equal(closedWith(other.server), H3_ERROR.H3_MISSING_SETTINGS, 'a control stream that does not start with SETTINGS')
})

t.test('stream errors reset only the stream: the connection and other streams carry on', async (t) => {
  const { server } = h3Pair()
  const cases: readonly [label: string, bytes: Buffer, fin: boolean, code: number][] = [
    ['upper-case field name', headers([...WT_CONNECT_FIELDS, ['X-Id', '1']]), false, H3_ERROR.H3_MESSAGE_ERROR],
    ['connection-specific field', headers([...WT_CONNECT_FIELDS, ['connection', 'close']]), false, H3_ERROR.H3_MESSAGE_ERROR],
    ['CONNECT with :path but no :protocol', headers([[':method', 'CONNECT'], [':authority', 'a'], [':path', '/']]), false, H3_ERROR.H3_MESSAGE_ERROR],
    ['FIN before the request head', Buffer.alloc(0), true, H3_ERROR.H3_REQUEST_INCOMPLETE],
  ]
  let id = 0
  for (const [label, bytes, fin, code] of cases) {
    id += 4
    server.receive(id, bytes, fin)
    t.ok(server.resets.some((r) => r.streamId === id && r.kind === 'reset_stream' && r.code === code), label)
    t.equal(server.closed, null, `${label}: connection open`)
  }
  // Still serving: a good session on the next stream.
  id += 4
  server.receive(id, headers(WT_CONNECT_FIELDS), false)
  t.match(server.of('request'), [{ streamId: id, webTransport: true }])
  t.equal(server.conn.tracked.requests, 1, 'aborted streams are released')
})

t.test('a field section larger than our limit is answered 431 (RFC 9114 §4.2.2)', async (t) => {
  const { server } = h3Pair({ server: { maxFieldSectionSize: 500, frameLimits: { maxHeadersBytes: 4096, maxControlFrameBytes: 4096 } } })
  server.receive(4, headers([...WT_CONNECT_FIELDS, ['x-big', 'v'.repeat(600)]]), false)
  t.equal(server.closed, null)
  t.match(server.of('stream_error'), [{ streamId: 4, violation: 'field_section_too_large', code: H3_ERROR.H3_EXCESSIVE_LOAD }])
  const answer = server.writes.find((w) => w.streamId === 4)
  t.equal(answer?.fin, true)
  t.same(decodeFieldSection(answer?.data.subarray(2) ?? Buffer.alloc(0), 1000), { ok: true, fields: [[':status', '431']], size: 42 }, 'a 431 HEADERS frame, then FIN')
  t.ok(server.resets.some((r) => r.streamId === 4 && r.kind === 'stop_sending'), 'and the rest of the request is refused')
})

t.test('a malformed capsule on the CONNECT stream ends that session with H3_MESSAGE_ERROR', async (t) => {
  const { client, server } = h3Pair()
  const sent = client.conn.request(0, WT_CONNECT_FIELDS)
  if (sent.ok) client.apply(sent.actions)
  server.apply(server.conn.respond(0, 200))
  const bad = encodeCloseCapsule(1, 'x').subarray(0, 3) // type and a length of 5…
  const shortClose = Buffer.concat([bad.subarray(0, 2), encodeVarint(2), hex('0000')]) // …replaced by a 2-byte close value
  client.sendRaw(0, encodeFrame(FRAME.DATA, shortClose), false)
  t.match(server.of('stream_error'), [{ streamId: 0, violation: 'capsule_malformed', code: H3_ERROR.H3_MESSAGE_ERROR }])
  t.equal(server.conn.sessionState(0), 'unknown')
  t.equal(server.closed, null)
})

t.test('unknown and GREASE stream types are refused with STOP_SENDING, nothing else', async (t) => {
  const { server } = h3Pair()
  server.receive(CLIENT_UNI, Buffer.concat([encodeVarint(0x1f * 3 + 0x21), Buffer.alloc(100, 1)]), false)
  t.same(server.resets, [{ streamId: CLIENT_UNI, code: H3_ERROR.H3_STREAM_CREATION_ERROR, kind: 'stop_sending' }])
  server.receive(CLIENT_UNI, Buffer.alloc(100, 2), true)
  t.equal(server.closed, null)
  t.equal(server.conn.tracked.uni, 1, 'the ignored stream is forgotten at its FIN; the control stream stays')
  t.equal(H3_VIOLATIONS.unknown_stream_type.scope, 'stream')
})

t.test('a GREASE setting and GREASE frames on the control stream are ignored', async (t) => {
  const { server } = h3Pair({ noStart: true })
  server.receive(2, Buffer.concat([hex('00'), encodeSettingsFrame([[0x1f * 5 + 0x21, 9], [SETTING.H3_DATAGRAM, 1]]), encodeFrame(0x21, Buffer.alloc(30))]), false)
  t.equal(server.closed, null)
  t.equal(server.conn.peerSettings?.h3Datagram, true)
})

t.test('random bytes on every kind of stream never make the core throw', async (t) => {
  let seed = 1234
  const random = (): number => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648 }
  const codes = new Set<number>([...Object.values(H3_ERROR)])
  const prefixes = [hex('00'), hex('01'), hex('02'), hex('03'), hex('4054'), hex('4041'), hex('')]
  let closes = 0
  for (let run = 0; run < 400; run++) {
    const role = random() < 0.5 ? 'server' : 'client'
    const { client, server } = h3Pair()
    client.peer = null
    server.peer = null
    const side = role === 'server' ? server : client
    for (let step = 0; step < 6 && side.closed === null; step++) {
      const body = Buffer.alloc(Math.floor(random() * 60))
      for (let i = 0; i < body.length; i++) body[i] = Math.floor(random() * 256)
      const prefix = prefixes[Math.floor(random() * prefixes.length)] as Buffer
      const streamId = Math.floor(random() * 16)
      const bytes = random() < 0.5 ? Buffer.concat([prefix, body]) : Buffer.concat([prefix, encodeFrame(Math.floor(random() * 16), body)])
      const actions = random() < 0.1
        ? side.conn.onDatagram(body)
        : random() < 0.1 ? side.conn.onStreamReset(streamId, 0) : side.conn.onStreamData(streamId, bytes, random() < 0.2)
      if (!Array.isArray(actions)) t.fail('not an action list')
      side.apply(actions)
    }
    if (side.closed !== null) {
      closes++
      if (!codes.has(side.closed.code)) t.fail(`close code 0x${side.closed.code.toString(16)} is not in the table`)
      if (side.closed.violation === 'internal') t.fail(`internal error on random input: ${side.closed.reason}`)
    }
  }
  t.ok(closes > 0, `${closes} of 400 runs closed the connection, each with a code from the table`)
})
