/**
 * SETTINGS (RFC 9114 §7.2.4) and the WebTransport draft negotiation. The peers' SETTINGS
 * below are the ones measured from deployed peers: Chromium 156 by default (draft-02 only), Chromium
 * with the draft-07 flag, and the Rust h3 crate 0.0.8 under the real Pylon and Stargate.
 */
import t from 'tap'
import { SETTING, decodeSettings, encodeSettingsFrame, greaseSettingId, interpretSettings, localSettings, negotiateWebTransport } from '../../lib/quic/h3/settings.ts'
import { FRAME } from '../../lib/quic/h3/frames.ts'
import { decodeVarint, encodeVarint } from '../../lib/quic/varint.ts'

type Pairs = readonly (readonly [number, number])[]

/** The peer's SETTINGS payload; a value of -1 stands for 2^62 - 1 (written as eight 0xff bytes, as the h3 crate sends its unlimited MAX_FIELD_SECTION_SIZE). */
function settingsOf (pairs: Pairs): ReadonlyMap<number, number> {
  const payload = Buffer.concat(pairs.map(([id, value]) => value === -1
    ? Buffer.concat([encodeVarint(id), Buffer.alloc(8, 0xff)])
    : Buffer.concat([encodeVarint(id), encodeVarint(value)])))
  const decoded = decodeSettings(payload)
  if (!decoded.ok) throw new Error(decoded.failure.detail)
  return decoded.settings
}

const CHROMIUM_DEFAULT: Pairs = [[SETTING.QPACK_MAX_TABLE_CAPACITY, 0xffff], [SETTING.QPACK_BLOCKED_STREAMS, 100], [SETTING.ENABLE_WEBTRANSPORT, 1], [SETTING.H3_DATAGRAM, 1], [SETTING.H3_DATAGRAM_DRAFT04, 1], [0x1f * 1234 + 0x21, 7]]
const CHROMIUM_DRAFT07: Pairs = [...CHROMIUM_DEFAULT, [SETTING.WEBTRANSPORT_MAX_SESSIONS, 16]]
// h3 0.0.8 server with enable_webtransport, extended connect, datagrams, max sessions 1.
const H3_CRATE_SERVER: Pairs = [[0x1f * 99 + 0x21, 0], [SETTING.MAX_FIELD_SECTION_SIZE, -1], [SETTING.ENABLE_CONNECT_PROTOCOL, 1], [SETTING.ENABLE_WEBTRANSPORT, 1], [SETTING.H3_DATAGRAM, 1], [SETTING.WEBTRANSPORT_MAX_SESSIONS_DRAFT02, 1]]
// h3 0.0.8 client with extended connect and datagrams (no enable_webtransport): sends 0s.
const H3_CRATE_CLIENT: Pairs = [[SETTING.ENABLE_CONNECT_PROTOCOL, 1], [SETTING.ENABLE_WEBTRANSPORT, 0], [SETTING.H3_DATAGRAM, 1], [SETTING.WEBTRANSPORT_MAX_SESSIONS_DRAFT02, 0]]

t.test('a SETTINGS frame encodes as type 0x04, length, then id/value varints', async (t) => {
  const frame = encodeSettingsFrame([[SETTING.QPACK_MAX_TABLE_CAPACITY, 0], [SETTING.ENABLE_WEBTRANSPORT, 1]])
  t.equal(frame.toString('hex'), '04' + '07' + '0100' + 'ab60374201')
})

t.test('the draft comes from the peer\'s SETTINGS, newest we both speak', async (t) => {
  t.equal(negotiateWebTransport(settingsOf(CHROMIUM_DEFAULT)), 'draft02', 'Chromium by default')
  t.equal(negotiateWebTransport(settingsOf(CHROMIUM_DRAFT07)), 'draft07', 'Chromium with the draft-07 flag')
  t.equal(negotiateWebTransport(settingsOf(CHROMIUM_DRAFT07), ['draft02']), 'draft02', 'an endpoint that speaks only draft-02')
  t.equal(negotiateWebTransport(settingsOf(H3_CRATE_SERVER)), 'draft02', 'the Rust h3 server')
  t.equal(negotiateWebTransport(settingsOf(H3_CRATE_CLIENT)), null, 'the Rust h3 client offers none (the server core falls back to draft-02)')
  t.equal(negotiateWebTransport(settingsOf([[SETTING.WT_MAX_SESSIONS, 4], [SETTING.H3_DATAGRAM, 1]])), null, 'drafts 13+ only: recognised, not offered')
  t.equal(negotiateWebTransport(settingsOf([[SETTING.WT_MAX_SESSIONS, 4], [SETTING.H3_DATAGRAM, 1]]), ['draft13']), 'draft13')
  t.equal(negotiateWebTransport(settingsOf([[SETTING.ENABLE_WEBTRANSPORT, 1]])), null, 'no HTTP datagrams: no WebTransport')
})

t.test('interpreting SETTINGS applies the RFC defaults for what is absent', async (t) => {
  const none = interpretSettings(new Map())
  t.same(none, { maxFieldSectionSize: Number.POSITIVE_INFINITY, qpackMaxTableCapacity: 0, enableConnectProtocol: false, h3Datagram: false, webTransport: null, webTransportMaxSessions: 0 })
  const h3 = interpretSettings(settingsOf(H3_CRATE_SERVER))
  t.match(h3, { enableConnectProtocol: true, h3Datagram: true, webTransport: 'draft02', webTransportMaxSessions: 1 })
  t.ok(h3.maxFieldSectionSize > 2 ** 61, 'an unlimited field section size reads as huge (rounded), not as an error')
  t.equal(interpretSettings(settingsOf([[SETTING.ENABLE_WEBTRANSPORT, 1], [SETTING.H3_DATAGRAM_DRAFT04, 1]])).webTransportMaxSessions, 1, 'draft-02 without a max-sessions setting: one session')
})

t.test('invalid SETTINGS are H3_SETTINGS_ERROR or H3_FRAME_ERROR', async (t) => {
  const cases: readonly [string, string][] = [
    ['0200', 'settings_invalid'], // HTTP/2 ENABLE_PUSH
    ['0300', 'settings_invalid'],
    ['0400', 'settings_invalid'],
    ['0500', 'settings_invalid'],
    ['0100 0100', 'settings_invalid'], // repeated
    ['0802', 'settings_invalid'], // ENABLE_CONNECT_PROTOCOL must be 0 or 1
    ['3302', 'settings_invalid'],
    ['01', 'frame_malformed'], // value missing
    ['0140', 'frame_malformed'], // value cut
    ['40', 'frame_malformed'], // id cut
  ]
  for (const [hex, violation] of cases) {
    const decoded = decodeSettings(Buffer.from(hex.replace(/\s/g, ''), 'hex'))
    t.equal(decoded.ok ? 'ok' : decoded.failure.violation, violation, hex)
  }
  t.ok(decodeSettings(Buffer.alloc(0)).ok, 'an empty SETTINGS frame is valid')
})

t.test('our SETTINGS: no dynamic table, extended CONNECT from servers, every offered draft', async (t) => {
  const server = new Map(localSettings({ role: 'server', maxFieldSectionSize: 16384, webTransportMaxSessions: 1 }))
  t.same([...server.entries()], [
    [SETTING.QPACK_MAX_TABLE_CAPACITY, 0], [SETTING.QPACK_BLOCKED_STREAMS, 0], [SETTING.MAX_FIELD_SECTION_SIZE, 16384],
    [SETTING.ENABLE_CONNECT_PROTOCOL, 1], [SETTING.H3_DATAGRAM, 1],
    [SETTING.WEBTRANSPORT_MAX_SESSIONS, 1], [SETTING.ENABLE_WEBTRANSPORT, 1], [SETTING.WEBTRANSPORT_MAX_SESSIONS_DRAFT02, 1],
  ])
  const client = new Map(localSettings({ role: 'client', maxFieldSectionSize: 16384, webTransportMaxSessions: 1, drafts: ['draft02'] }))
  t.notOk(client.has(SETTING.ENABLE_CONNECT_PROTOCOL), 'a client does not announce extended CONNECT')
  t.notOk(client.has(SETTING.WEBTRANSPORT_MAX_SESSIONS), 'draft-07 not offered when not configured')
  // What Chromium and the h3 crate read from a server of ours.
  t.equal(negotiateWebTransport(server, ['draft02']), 'draft02')
  t.equal(negotiateWebTransport(server, ['draft07', 'draft02']), 'draft07')
  // The h3 crate keeps at most 8 of the settings it knows; ours stay within that.
  const known = new Set<number>([1, 6, 7, 8, 0x33, 0x2b603742, 0x2b603743])
  t.ok([...server.keys()].filter((id) => known.has(id)).length <= 8)
  const plain = localSettings({ role: 'server', maxFieldSectionSize: 100, webTransportMaxSessions: 0 })
  t.notOk(new Map(plain).has(SETTING.H3_DATAGRAM), 'no WebTransport: no datagram setting either')
})

t.test('a GREASE setting id is 0x1f * N + 0x21 and survives the wire', async (t) => {
  for (const r of [0, 0.5, 0.999999]) {
    const id = greaseSettingId(() => r)
    t.equal((id - 0x21) % 0x1f, 0)
    const frame = encodeSettingsFrame(localSettings({ role: 'client', maxFieldSectionSize: 1, webTransportMaxSessions: 0, greaseId: id }))
    t.equal(decodeVarint(frame, 0), FRAME.SETTINGS)
    t.ok(settingsOf([[id, 0]]).has(id))
  }
})
