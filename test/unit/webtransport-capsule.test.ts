/**
 * The relay forwards WebTransport capsules unmodified but must know where each one ends
 * (RFC 9297 §3.2 framing): to see a CLOSE_WEBTRANSPORT_SESSION go by, and to end a leg only
 * between capsules when it closes a session itself.
 */
import t from 'tap'
import {
  CLOSE_WEBTRANSPORT_SESSION, CapsuleCursor, CapsuleReader, DRAIN_WEBTRANSPORT_SESSION, MAX_CLOSE_REASON_BYTES,
  decodeCloseValue, encodeCloseCapsule, encodeDrainCapsule, encodeStreamRefusal, type CapsuleEvent,
} from '../../lib/quic/h3/capsule.ts'
import { DEFAULT_WT_SETTINGS, WT_SETTINGS, pickWtSettings } from '../../lib/tunnel/webtransport-h2/settings.ts'

function varint (value: number): Buffer {
  if (value < 0x40) return Buffer.from([value])
  if (value < 0x4000) return Buffer.from([0x40 | (value >> 8), value & 0xff])
  if (value < 0x40000000) {
    const b = Buffer.alloc(4)
    b.writeUInt32BE((0x80000000 | value) >>> 0)
    return b
  }
  const b = Buffer.alloc(8)
  b.writeBigUInt64BE(0xc000000000000000n | BigInt(value))
  return b
}

function capsule (type: number, value: Buffer, options: { longVarints?: boolean } = {}): Buffer {
  if (options.longVarints === true) {
    const type8 = Buffer.alloc(8)
    type8.writeBigUInt64BE(0xc000000000000000n | BigInt(type))
    const len8 = Buffer.alloc(8)
    len8.writeBigUInt64BE(0xc000000000000000n | BigInt(value.length))
    return Buffer.concat([type8, len8, value])
  }
  return Buffer.concat([varint(type), varint(value.length), value])
}

// What the library writes: WT_STREAM (with and without FIN), flow control, a datagram, an
// empty capsule, a payload with a 2-byte length, 8-byte varints, and a close at the end.
const CAPSULES = [
  capsule(0x190b4d3b, Buffer.from([0x04])),
  capsule(0x190b4d3c, Buffer.concat([Buffer.from([0x04]), Buffer.alloc(300, 7)])),
  capsule(0x190b4d3d, varint(1 << 20)),
  capsule(0x00, Buffer.from('a datagram')),
  capsule(0x190b4d38, Buffer.alloc(0)),
  capsule(0x190b4d3b, Buffer.alloc(20_000, 1), { longVarints: true }),
  encodeCloseCapsule(42, 'bye'),
]
const STREAM = Buffer.concat(CAPSULES)
const ENDS = new Set<number>()
CAPSULES.reduce((offset, c) => { ENDS.add(offset + c.length); return offset + c.length }, 0)

t.test('the capsule cursor knows where every capsule ends, however the bytes are chunked', async (t) => {
  for (const size of [1, 2, 3, 7, 16, 301, 4096, STREAM.length]) {
    const cursor = new CapsuleCursor()
    let offset = 0
    let boundariesSeen = 0
    while (offset < STREAM.length) {
      const chunk = STREAM.subarray(offset, offset + size)
      // Feed byte by byte inside the chunk only where a boundary may fall, to check atBoundary at each.
      for (let i = 0; i < chunk.length;) {
        const step = Math.min(chunk.length - i, 1 + ((offset + i) % 5))
        cursor.advance(chunk.subarray(i, i + step))
        i += step
        if (cursor.atBoundary) {
          t.ok(ENDS.has(offset + i), `boundary at ${offset + i} (chunks of ${size})`)
          boundariesSeen++
        }
      }
      offset += chunk.length
    }
    t.equal(cursor.capsules, CAPSULES.length, `all capsules counted (chunks of ${size})`)
    t.ok(cursor.atBoundary)
    t.ok(cursor.closeSeen)
    t.ok(boundariesSeen >= 1)
  }
})

t.test('the cursor reports a close capsule only once one has started', async (t) => {
  const cursor = new CapsuleCursor()
  const withoutClose = Buffer.concat(CAPSULES.slice(0, -1))
  cursor.advance(withoutClose)
  t.notOk(cursor.closeSeen)
  const close = encodeCloseCapsule(0, 'x')
  cursor.advance(close.subarray(0, 2))
  t.notOk(cursor.closeSeen, 'the type alone is not a header')
  cursor.advance(close.subarray(2, 3))
  t.ok(cursor.closeSeen, 'the type and the length are')
  t.notOk(cursor.atBoundary)
})

t.test('advancing up to a boundary stops at the end of the capsule in flight', async (t) => {
  const cases = [
    { name: 'already at a boundary', fed: 0, want: 0 },
    { name: 'inside a header', fed: 1, want: CAPSULES[0]!.length - 1 },
    { name: 'inside a payload', fed: CAPSULES[0]!.length + 10, want: CAPSULES[1]!.length - 10 },
    { name: 'inside a long-varint header', fed: CAPSULES.slice(0, 5).reduce((n, c) => n + c.length, 0) + 9, want: CAPSULES[5]!.length - 9 },
  ]
  for (const c of cases) {
    const cursor = new CapsuleCursor()
    cursor.advance(STREAM.subarray(0, c.fed))
    const consumed = cursor.advance(STREAM.subarray(c.fed), true)
    t.equal(consumed, c.want, c.name)
    t.ok(cursor.atBoundary, `${c.name}: at a boundary afterwards`)
  }
})

t.test('a close capsule carries the code and the reason the relay gives it', async (t) => {
  const cases = [
    { code: 0, reason: '' },
    { code: 0, reason: 'router shutdown' },
    { code: 0xffffffff, reason: 'upstream trust replaced' },
    { code: 42, reason: 'ünïcödé ✓' },
  ]
  for (const c of cases) {
    const bytes = encodeCloseCapsule(c.code, c.reason)
    t.equal(bytes.readUInt16BE(0), 0x4000 | CLOSE_WEBTRANSPORT_SESSION, 'type 0x2843 as a 2-byte varint')
    const cursor = new CapsuleCursor()
    cursor.advance(bytes)
    t.ok(cursor.atBoundary && cursor.closeSeen && cursor.capsules === 1, 'one whole close capsule')
    const headerLength = 2 + (bytes[2]! >> 6 === 0 ? 1 : 2)
    t.same(decodeCloseValue(bytes.subarray(headerLength)), c)
  }
})

t.test('a close reason longer than 1024 bytes is cut without splitting a character', async (t) => {
  const reason = 'é'.repeat(600) // 1200 bytes of 2-byte characters
  const bytes = encodeCloseCapsule(1, reason)
  const decoded = decodeCloseValue(bytes.subarray(4))
  t.ok(decoded !== null)
  t.ok(Buffer.byteLength(decoded!.reason) <= MAX_CLOSE_REASON_BYTES)
  t.equal(decoded!.reason, 'é'.repeat(512))
})

t.test('close codes outside 32 bits are refused', async (t) => {
  for (const code of [-1, 2 ** 32, 1.5]) t.throws(() => encodeCloseCapsule(code, ''), RangeError, String(code))
})

t.test('only the WebTransport settings are taken from a peer\'s custom settings', async (t) => {
  t.equal(pickWtSettings(undefined), null)
  t.equal(pickWtSettings({ 0x1234: 5 }), null)
  t.same(pickWtSettings({ [WT_SETTINGS.initialMaxData]: 1 << 20, 0x1234: 5 }), { [WT_SETTINGS.initialMaxData]: 1 << 20 })
  t.same(pickWtSettings({ ...DEFAULT_WT_SETTINGS }), DEFAULT_WT_SETTINGS)
})

// ── CapsuleReader: the HTTP/3 relay reads each leg's capsules (it terminates the session). ──

t.test('the capsule reader reports close and drain and skips the rest, however chunked', async (t) => {
  // Chromium sends a GREASE capsule (type 0x1f * N + 0x21) first on the CONNECT stream.
  const grease = capsule(0x1f * 12345 + 0x21, Buffer.alloc(40, 0xaa))
  const stream = Buffer.concat([grease, encodeDrainCapsule(), capsule(0x00, Buffer.from('datagram capsule')), encodeCloseCapsule(7, 'done here')])
  for (const size of [1, 2, 5, stream.length]) {
    const reader = new CapsuleReader()
    const events: CapsuleEvent[] = []
    for (let i = 0; i < stream.length; i += size) t.same(reader.push(stream.subarray(i, i + size), events), { ok: true })
    t.same(events, [{ kind: 'drain' }, { kind: 'close', code: 7, reason: 'done here' }], `chunks of ${size}`)
    t.equal(reader.skipped, 2)
    t.ok(reader.closed)
  }
})

t.test('the capsule reader refuses a close capsule outside 4..1028 bytes and a stream ending inside a capsule', async (t) => {
  t.match(new CapsuleReader().push(capsule(CLOSE_WEBTRANSPORT_SESSION, Buffer.alloc(3)), []), { ok: false, detail: /close capsule of 3 bytes/ })
  t.match(new CapsuleReader().push(capsule(CLOSE_WEBTRANSPORT_SESSION, Buffer.alloc(4 + MAX_CLOSE_REASON_BYTES + 1)), []), { ok: false, detail: /1029 bytes/ })
  const max = new CapsuleReader()
  const events: CapsuleEvent[] = []
  t.same(max.push(capsule(CLOSE_WEBTRANSPORT_SESSION, Buffer.concat([Buffer.from([0, 0, 1, 0]), Buffer.alloc(MAX_CLOSE_REASON_BYTES, 0x62)])), events), { ok: true })
  t.match(events, [{ kind: 'close', code: 256 }])
  const cut = new CapsuleReader()
  t.same(cut.push(capsule(0x21, Buffer.alloc(10)).subarray(0, 5), []), { ok: true })
  t.match(cut.end(), { ok: false, detail: /inside a capsule/ })
  t.same(new CapsuleReader().end(), { ok: true }, 'an empty stream ends cleanly')
})

t.test('a drain capsule is type 0x78ae with no value', async (t) => {
  t.equal(encodeDrainCapsule().toString('hex'), '8000' + '78ae' + '00')
  t.equal(DRAIN_WEBTRANSPORT_SESSION, 0x78ae)
})

t.test('with a stream hook the cursor reports each stream capsule\'s kind and id once, however the bytes are chunked', async (t) => {
  const stream = Buffer.concat([
    capsule(0x190b4d3b, Buffer.concat([varint(16_384), Buffer.from('data')])),
    capsule(0x190b4d3c, Buffer.concat([varint(5), Buffer.alloc(300, 7)])),
    capsule(0x190b4d3d, varint(1 << 20)), // flow control: not a stream capsule
    capsule(0x190b4d39, Buffer.concat([varint(9), varint(42)])),
    capsule(0x190b4d3a, Buffer.concat([varint(2), varint(7)]), { longVarints: true }),
    capsule(0x190b4d3b, Buffer.alloc(0)), // too short to name a stream: nothing reported
  ])
  const expected = [['stream', 16_384], ['stream_fin', 5], ['reset', 9], ['stop', 2]]
  for (const size of [1, 2, 3, 7, 64, stream.length]) {
    const seen: Array<[string, number]> = []
    const cursor = new CapsuleCursor((kind, id) => { seen.push([kind, id]) })
    for (let at = 0; at < stream.length; at += size) cursor.advance(stream.subarray(at, at + size))
    t.same(seen, expected, `in chunks of ${size}`)
    t.ok(cursor.atBoundary)
  }
})

t.test('a stream refusal is WT_RESET_STREAM then WT_STOP_SENDING, both with the stream id and the code', async (t) => {
  const seen: Array<[string, number]> = []
  const cursor = new CapsuleCursor((kind, id) => { seen.push([kind, id]) })
  const refusal = encodeStreamRefusal(13, 0x44524e)
  cursor.advance(refusal)
  t.same(seen, [['reset', 13], ['stop', 13]])
  t.ok(cursor.atBoundary)
  t.same(refusal, Buffer.concat([capsule(0x190b4d39, Buffer.concat([varint(13), varint(0x44524e)])), capsule(0x190b4d3a, Buffer.concat([varint(13), varint(0x44524e)]))]))
})
