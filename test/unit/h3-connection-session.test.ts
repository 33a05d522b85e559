/**
 * The sans-I/O HTTP/3 core (lib/quic/h3/connection.ts) in both roles, back to back in
 * memory: SETTINGS and the WebTransport draft, an extended CONNECT session, WebTransport
 * streams and datagrams either way, close and drain capsules, refusals with a body, the
 * session limit, and the Rust h3 client's habit of finishing its CONNECT stream at once.
 */
import t from 'tap'
import { H3_ERROR } from '../../lib/quic/h3/errors.ts'
import { SETTING, type WebTransportDraft } from '../../lib/quic/h3/settings.ts'
import { encodeDatagramPrefix } from '../../lib/quic/h3/webtransport.ts'
import { encodeFrame, FRAME } from '../../lib/quic/h3/frames.ts'
import { encodeVarint } from '../../lib/quic/varint.ts'
import type { H3Side} from '../fixtures/h3-pair.ts';
import { WT_CONNECT_FIELDS, h3Pair } from '../fixtures/h3-pair.ts'

/** Opens a session: CONNECT from the client, 200 from the server. Returns the session id. */
function openSession (client: H3Side, server: H3Side, extra: readonly (readonly [string, string])[] = []): number {
  const id = client.openBidi()
  const sent = client.conn.request(id, [...WT_CONNECT_FIELDS, ...extra])
  if (!sent.ok) throw new Error(`request refused: ${sent.reason}`)
  client.apply(sent.actions)
  server.apply(server.conn.respond(id, 200))
  return id
}

t.test('both sides learn the peer\'s SETTINGS and agree on a draft', async (t) => {
  const cases: readonly [client: WebTransportDraft[], server: WebTransportDraft[], agreed: WebTransportDraft | null][] = [
    [['draft02'], ['draft07', 'draft02'], 'draft02'], // Chromium by default against us
    [['draft07', 'draft02'], ['draft07', 'draft02'], 'draft07'], // Chromium with the draft-07 flag
    [['draft07'], ['draft02'], null],
  ]
  for (const [clientDrafts, serverDrafts, agreed] of cases) {
    const { client, server } = h3Pair({ client: { drafts: clientDrafts }, server: { drafts: serverDrafts } })
    t.equal(client.conn.webTransportDraft, agreed, `client ${clientDrafts} / server ${serverDrafts}`)
    t.equal(client.of('settings').length, 1)
    t.equal(server.of('settings').length, 1)
    t.equal(server.conn.peerSettings?.enableConnectProtocol, false, 'clients do not announce extended CONNECT')
    t.equal(client.conn.peerSettings?.enableConnectProtocol, true)
    t.equal(client.conn.peerSettings?.maxFieldSectionSize, 16 * 1024)
  }
})

t.test('a WebTransport session opens; a draft-02 answer carries sec-webtransport-http3-draft', async (t) => {
  const { client, server } = h3Pair({ client: { drafts: ['draft02'] } })
  const id = client.openBidi()
  const sent = client.conn.request(id, [...WT_CONNECT_FIELDS, ['x-inference-server-id', 'a'], ['x-inference-server-id', 'b']])
  t.ok(sent.ok)
  if (!sent.ok) return
  client.apply(sent.actions)
  const [request] = server.of('request')
  t.match(request, { streamId: id, webTransport: true, head: { method: 'CONNECT', protocol: 'webtransport', path: '/_stargate/webtransport' } })
  t.same(request?.head.fields, [['x-inference-server-id', 'a'], ['x-inference-server-id', 'b']], 'repeated fields arrive repeated')
  t.equal(server.conn.sessionState(id), 'pending')
  server.apply(server.conn.respond(id, 200))
  t.same(client.of('response'), [{ type: 'response', streamId: id, status: 200, fields: [['sec-webtransport-http3-draft', 'draft02']] }])
  t.equal(client.conn.sessionState(id), 'open')
  t.equal(server.conn.sessionState(id), 'open')

  const draft07 = h3Pair({ client: { drafts: ['draft07', 'draft02'] } })
  openSession(draft07.client, draft07.server)
  t.same(draft07.client.of('response')[0]?.fields, [], 'no draft header on draft-07')
})

t.test('an extended CONNECT waits for the server\'s SETTINGS, and needs WebTransport offered', async (t) => {
  const { client, server } = h3Pair({ noStart: true })
  t.same(client.conn.request(client.openBidi(), WT_CONNECT_FIELDS), { ok: false, reason: 'settings_pending' })
  server.start()
  t.ok(client.conn.request(client.openBidi(), WT_CONNECT_FIELDS).ok)
  const plain = h3Pair({ server: { webTransportMaxSessions: 0 } })
  t.same(plain.client.conn.request(plain.client.openBidi(), WT_CONNECT_FIELDS), { ok: false, reason: 'no_webtransport' })
  t.same(client.conn.request(2, WT_CONNECT_FIELDS), { ok: false, reason: 'invalid' }, 'not a client bidi stream')
})

t.test('WebTransport streams either way arrive with their session id and the bytes after the header', async (t) => {
  const { client, server } = h3Pair()
  client.chunk = 1 // every byte in its own chunk: headers split everywhere
  const session = openSession(client, server)
  const streams: [H3Side, H3Side, boolean][] = [[client, server, true], [client, server, false], [server, client, true], [server, client, false]]
  for (const [from, to, bidi] of streams) {
    const id = bidi ? from.openBidi() : from.openUni()
    const header = from.conn.openWebTransportStream(id, session)
    t.ok(header !== null)
    from.sendRaw(id, Buffer.concat([header as Buffer, Buffer.from(`hello from ${from.role}`)]), true)
    const stream = to.wt.get(id)
    t.match(stream, { sessionId: session, bidi, fin: true }, `${from.role} ${bidi ? 'bidi' : 'uni'}`)
    t.equal(stream?.data.toString(), `hello from ${from.role}`)
  }
  t.match(server.of('webtransport_stream'), [{ session: 'open' }, { session: 'open' }])
  t.equal(client.conn.openWebTransportStream(client.openBidi(), 400), null, 'no stream for a session that does not exist')
})

t.test('datagrams carry the session id; unknown sessions are dropped and counted', async (t) => {
  const { client, server } = h3Pair()
  const session = openSession(client, server)
  server.apply(server.conn.onDatagram(Buffer.concat([encodeDatagramPrefix(session), Buffer.from('ping')])))
  const [datagram] = server.of('datagram')
  t.equal(datagram?.sessionId, session)
  t.equal(Buffer.from(datagram?.payload ?? []).toString(), 'ping')
  server.apply(server.conn.onDatagram(Buffer.concat([encodeDatagramPrefix(400), Buffer.from('x')])))
  t.equal(server.of('datagram').length, 1)
  t.equal(server.conn.droppedDatagrams, 1)
  t.equal(server.closed, null)
})

t.test('closing a session sends code and reason; both ends release it once both sides finished', async (t) => {
  const { client, server } = h3Pair()
  server.chunk = 3
  const session = openSession(client, server)
  server.apply(server.conn.closeSession(session, 0x1234, 'pylon went away'))
  t.same(client.of('session_closed'), [{ type: 'session_closed', sessionId: session, code: 0x1234, reason: 'pylon went away' }])
  t.same(client.of('session_fin'), [{ type: 'session_fin', sessionId: session }])
  t.equal(client.conn.sessionState(session), 'closed', 'closed, kept until the client finished its side')
  t.equal(server.conn.tracked.sessions, 1, 'the server waits for the client\'s FIN')
  client.apply(client.conn.finish(session))
  t.equal(client.conn.sessionState(session), 'unknown')
  t.same(client.conn.tracked, { requests: 0, uni: 1, sessions: 0 }, 'only the peer\'s control stream is left')
  t.same(server.conn.tracked, { requests: 0, uni: 1, sessions: 0 })
})

t.test('a GREASE capsule before the close is skipped; a drain is reported', async (t) => {
  const { client, server } = h3Pair()
  const session = openSession(client, server)
  const grease = Buffer.concat([encodeVarint(0x1f * 77 + 0x21), encodeVarint(3), Buffer.from('abc')])
  client.sendRaw(session, encodeFrame(FRAME.DATA, grease), false)
  client.apply(client.conn.drainSession(session))
  client.apply(client.conn.closeSession(session, 9, 'bye'))
  t.same(server.of('session_drain'), [{ type: 'session_drain', sessionId: session }])
  t.same(server.of('session_closed'), [{ type: 'session_closed', sessionId: session, code: 9, reason: 'bye' }])
})

t.test('a client that finishes its CONNECT stream at once (the Rust h3 client) keeps its session', async (t) => {
  const { client, server } = h3Pair()
  // h3 0.0.8's client SETTINGS: ENABLE_WEBTRANSPORT 0, yet it opens a draft-02 session.
  const id = client.openBidi()
  const sent = client.conn.request(id, WT_CONNECT_FIELDS, true)
  t.ok(sent.ok)
  if (!sent.ok) return
  client.apply(sent.actions)
  t.same(server.of('session_fin'), [{ type: 'session_fin', sessionId: id }])
  server.apply(server.conn.respond(id, 200))
  t.equal(client.of('response')[0]?.status, 200)
  t.equal(server.conn.sessionState(id), 'open', 'a FIN without a close capsule does not end the session here')
  const uni = server.openUni()
  t.ok(server.conn.openWebTransportStream(uni, id) !== null)
})

t.test('a server meets a client that offers no WebTransport setting on draft-02', async (t) => {
  const { client, server } = h3Pair({ noStart: true })
  server.start()
  // The h3 crate's client SETTINGS, written by hand.
  const settings = encodeFrame(FRAME.SETTINGS, Buffer.concat([
    encodeVarint(SETTING.ENABLE_CONNECT_PROTOCOL), encodeVarint(1), encodeVarint(SETTING.ENABLE_WEBTRANSPORT), encodeVarint(0),
    encodeVarint(SETTING.H3_DATAGRAM), encodeVarint(1), encodeVarint(SETTING.WEBTRANSPORT_MAX_SESSIONS_DRAFT02), encodeVarint(0),
  ]))
  client.sendRaw(client.controlStreamId, Buffer.concat([encodeVarint(0), settings]), false)
  t.equal(server.conn.webTransportDraft, 'draft02')
  const id = client.openBidi()
  const sent = client.conn.request(id, WT_CONNECT_FIELDS)
  if (sent.ok) client.apply(sent.actions)
  server.apply(server.conn.respond(id, 200))
  t.same(client.of('response')[0]?.fields, [['sec-webtransport-http3-draft', 'draft02']])
})

t.test('a refusal carries its status and body to the client; the session never opens', async (t) => {
  const { client, server } = h3Pair()
  const id = client.openBidi()
  const sent = client.conn.request(id, WT_CONNECT_FIELDS)
  if (sent.ok) client.apply(sent.actions)
  server.apply(server.conn.respond(id, 401, [['content-type', 'text/plain']]))
  server.apply(server.conn.sendData(id, Buffer.from('token rejected'), true))
  t.same(client.of('response'), [{ type: 'response', streamId: id, status: 401, fields: [['content-type', 'text/plain']] }])
  t.equal(Buffer.concat(client.of('body').map((b) => Buffer.from(b.data))).toString(), 'token rejected')
  t.same(client.of('end'), [{ type: 'end', streamId: id }])
  t.not(client.conn.sessionState(id), 'open')
  // The refused session does not count against the limit.
  const again = client.openBidi()
  t.ok(client.conn.request(again, WT_CONNECT_FIELDS).ok)
})

t.test('a WebTransport request beyond the session limit is refused with H3_REQUEST_REJECTED', async (t) => {
  const { client, server } = h3Pair({ client: { webTransportMaxSessions: 5 } })
  openSession(client, server)
  t.same(client.conn.request(client.openBidi(), WT_CONNECT_FIELDS), { ok: false, reason: 'too_many_sessions' }, 'the client core keeps to the server\'s limit of 1')
  // A client that ignores the limit: the bytes of a second CONNECT, from a core that was told 5.
  const lax = h3Pair({ client: { webTransportMaxSessions: 5 }, server: { webTransportMaxSessions: 5 } })
  const second = client.openBidi()
  const sent = lax.client.conn.request(second, WT_CONNECT_FIELDS)
  const write = sent.ok ? sent.actions.find((a) => a.type === 'write') : undefined
  if (write?.type !== 'write') return t.fail('no request bytes')
  client.sendRaw(second, write.data, false)
  t.match(server.of('stream_error'), [{ streamId: second, code: H3_ERROR.H3_REQUEST_REJECTED, violation: 'request_rejected' }])
  t.match(server.resets, [{ streamId: second, code: H3_ERROR.H3_REQUEST_REJECTED, kind: 'stop_sending' }, { streamId: second, code: H3_ERROR.H3_REQUEST_REJECTED, kind: 'reset_stream' }])
  t.equal(server.closed, null, 'the connection and the first session carry on')
  t.equal(server.of('request').length, 1)
})

t.test('a WebTransport request that arrives before the client\'s SETTINGS is held until they come', async (t) => {
  const { client, server } = h3Pair({ noStart: true })
  server.start()
  // The client's control stream is delayed: hold its bytes.
  const held: [number, Buffer, boolean][] = []
  const deliver = client.sendRaw.bind(client)
  client.sendRaw = (streamId, data, fin) => { if (streamId === client.controlStreamId) held.push([streamId, Buffer.from(data), fin]); else deliver(streamId, data, fin) }
  client.start()
  const id = openSessionRequestOnly(client)
  t.equal(server.of('request').length, 0, 'held: the draft is not known yet')
  for (const [streamId, data, fin] of held) deliver(streamId, data, fin)
  t.match(server.of('request'), [{ streamId: id, webTransport: true }])
})

function openSessionRequestOnly (client: H3Side): number {
  const id = client.openBidi()
  const sent = client.conn.request(id, WT_CONNECT_FIELDS)
  if (!sent.ok) throw new Error(sent.reason)
  client.apply(sent.actions)
  return id
}

t.test('a peer reset of the CONNECT stream ends the session; stop-sending is answered with a reset', async (t) => {
  const { client, server } = h3Pair()
  const session = openSession(client, server)
  client.apply(client.conn.resetStream(session, H3_ERROR.H3_REQUEST_CANCELLED))
  t.same(server.of('session_reset'), [{ type: 'session_reset', sessionId: session, code: H3_ERROR.H3_REQUEST_CANCELLED }])
  t.equal(server.conn.tracked.sessions, 0)
  t.equal(client.conn.tracked.sessions, 0)
  const other = h3Pair()
  const s2 = openSession(other.client, other.server)
  other.server.apply(other.server.conn.onStopSending(s2, 0x10c))
  t.match(other.server.resets, [{ streamId: s2, kind: 'reset_stream', code: 0x10c }])
})

t.test('plain requests work too: a POST with a body and trailers', async (t) => {
  const { client, server } = h3Pair()
  const id = client.openBidi()
  const sent = client.conn.request(id, [[':method', 'POST'], [':scheme', 'https'], [':authority', 'a'], [':path', '/x']])
  if (sent.ok) client.apply(sent.actions)
  client.apply(client.conn.sendData(id, Buffer.from('body'), false))
  const trailers = encodeFrame(FRAME.HEADERS, Buffer.from([0, 0, 0x23, 0x78, 0x2d, 0x74, 0x01, 0x31])) // x-t: 1, literal name of 3 bytes
  client.sendRaw(id, trailers, true)
  t.match(server.of('request'), [{ streamId: id, webTransport: false, head: { method: 'POST' } }])
  t.equal(Buffer.from(server.of('body')[0]?.data ?? []).toString(), 'body')
  t.same(server.of('trailers')[0]?.fields, [['x-t', '1']])
  t.same(server.of('end'), [{ type: 'end', streamId: id }])
  server.apply(server.conn.respond(id, 204, [], true))
  t.equal(client.of('response')[0]?.status, 204)
  t.equal(server.conn.tracked.requests, 0)
})
