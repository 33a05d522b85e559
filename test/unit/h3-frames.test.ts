/**
 * HTTP/3 frame parsing (RFC 9114 §7): bounded, incremental, with the per-stream frame rules
 * of §7.2 checked from the type alone. DATA is passed through as slices, never buffered;
 * unknown and reserved (GREASE) frame types are skipped unbuffered; an oversized frame is an
 * error, not a buffer.
 */
import t from 'tap'
import { FRAME, FrameReader, decodeVarintPayload, encodeFrame, encodeFrameHeader, encodeVarintFrame, type FrameEvent } from '../../lib/quic/h3/frames.ts'
import { H3_ERROR, H3_VIOLATIONS, http3CodeToWebTransport, webTransportCodeToHttp3, WT_APPLICATION_ERROR_FIRST, WT_APPLICATION_ERROR_LAST } from '../../lib/quic/h3/errors.ts'

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s/g, ''), 'hex')

function feed (reader: FrameReader, bytes: Buffer, chunkSize: number): { events: FrameEvent[], failure: string | null } {
  const events: FrameEvent[] = []
  for (let i = 0; i < bytes.length; i += chunkSize) {
    const failed = reader.push(bytes.subarray(i, i + chunkSize), events)
    if (failed !== null) return { events, failure: failed.violation }
  }
  return { events, failure: null }
}

/** DATA slices joined, frames as [type, hex payload]. */
function summary (events: FrameEvent[]): { frames: [number, string][], data: string, webTransport: number | null } {
  const frames: [number, string][] = []
  const data: Buffer[] = []
  let webTransport: number | null = null
  for (const e of events) {
    if (e.kind === 'frame') frames.push([e.type, Buffer.from(e.payload).toString('hex')])
    else if (e.kind === 'data') data.push(Buffer.from(e.data))
    else webTransport = e.sessionId
  }
  return { frames, data: Buffer.concat(data).toString('hex'), webTransport }
}

// A request stream: HEADERS, a GREASE frame (0x21), DATA, an unknown frame with an 8-byte
// type, DATA with a 2-byte length, then trailers.
const REQUEST = Buffer.concat([
  encodeFrame(FRAME.HEADERS, hex('0000d1')),
  encodeFrame(0x21, Buffer.alloc(50, 0xee)),
  encodeFrame(FRAME.DATA, Buffer.from('hello')),
  hex('c000000012345678 03 aabbcc'),
  encodeFrame(FRAME.DATA, Buffer.alloc(300, 0x61)),
  encodeFrame(FRAME.HEADERS, hex('0000')),
])

t.test('a request stream parses the same however it is chunked', async (t) => {
  for (const size of [1, 2, 3, 7, 64, REQUEST.length]) {
    const reader = new FrameReader('request')
    const { events, failure } = feed(reader, REQUEST, size)
    t.equal(failure, null)
    t.same(summary(events), { frames: [[1, '0000d1'], [1, '0000']], data: Buffer.concat([Buffer.from('hello'), Buffer.alloc(300, 0x61)]).toString('hex'), webTransport: null }, `chunks of ${size}`)
    t.equal(reader.skipped, 2, 'GREASE and unknown frames skipped')
    t.ok(reader.atBoundary)
    t.equal(reader.end(), null)
  }
})

t.test('DATA payload is passed on as slices of the pushed chunk, not copies', async (t) => {
  const chunk = encodeFrame(FRAME.DATA, Buffer.alloc(1000, 1))
  const events: FrameEvent[] = []
  new FrameReader('request').push(chunk, events)
  const data = events[0]
  t.ok(data !== undefined && data.kind === 'data' && data.data.buffer === chunk.buffer)
})

t.test('a stream that ends inside a frame is H3_FRAME_ERROR', async (t) => {
  for (const cut of [1, 2, 4]) {
    const reader = new FrameReader('request')
    t.equal(reader.push(encodeFrame(FRAME.HEADERS, hex('0000d1d1')).subarray(0, cut), []), null)
    const failure = reader.end()
    t.equal(failure?.violation, 'frame_truncated')
    t.equal(H3_VIOLATIONS.frame_truncated.code, H3_ERROR.H3_FRAME_ERROR)
  }
})

t.test('a frame the reader must collect is refused when larger than its limit (H3_EXCESSIVE_LOAD)', async (t) => {
  const limits = { maxHeadersBytes: 100, maxControlFrameBytes: 10 }
  t.equal(new FrameReader('request', limits).push(encodeFrameHeader(FRAME.HEADERS, 101), [])?.violation, 'frame_too_large')
  t.equal(new FrameReader('request', limits).push(encodeFrame(FRAME.HEADERS, Buffer.alloc(100)), []), null)
  t.equal(new FrameReader('control', limits).push(encodeFrameHeader(FRAME.SETTINGS, 11), [])?.violation, 'frame_too_large')
  // DATA and unknown frames of any size stream through.
  t.equal(new FrameReader('request', limits).push(encodeFrameHeader(FRAME.DATA, 2 ** 40), []), null)
  t.equal(new FrameReader('request', limits).push(encodeFrameHeader(0x21, 2 ** 40), []), null)
  t.equal(H3_VIOLATIONS.frame_too_large.code, H3_ERROR.H3_EXCESSIVE_LOAD)
})

t.test('frame types are checked against the stream before their payload is read', async (t) => {
  const cases: readonly [kind: 'control' | 'request', bytes: Buffer, violation: string][] = [
    ['control', encodeFrame(FRAME.GOAWAY, hex('00')), 'settings_missing'],
    ['control', Buffer.concat([encodeFrame(FRAME.SETTINGS, Buffer.alloc(0)), encodeFrame(FRAME.SETTINGS, Buffer.alloc(0))]), 'settings_duplicate'],
    ['control', Buffer.concat([encodeFrame(FRAME.SETTINGS, Buffer.alloc(0)), encodeFrameHeader(FRAME.DATA, 5)]), 'frame_unexpected'],
    ['control', Buffer.concat([encodeFrame(FRAME.SETTINGS, Buffer.alloc(0)), encodeFrameHeader(FRAME.HEADERS, 5)]), 'frame_unexpected'],
    ['control', Buffer.concat([encodeFrame(FRAME.SETTINGS, Buffer.alloc(0)), encodeFrameHeader(0x06, 8)]), 'frame_reserved_h2'], // HTTP/2 PING
    ['request', encodeFrameHeader(FRAME.SETTINGS, 0), 'frame_unexpected'],
    ['request', encodeFrameHeader(FRAME.GOAWAY, 1), 'frame_unexpected'],
    ['request', encodeFrameHeader(FRAME.MAX_PUSH_ID, 1), 'frame_unexpected'],
    ['request', encodeFrameHeader(FRAME.CANCEL_PUSH, 1), 'frame_unexpected'],
    ['request', encodeFrameHeader(0x02, 5), 'frame_reserved_h2'], // HTTP/2 PRIORITY
    ['request', encodeFrameHeader(0x08, 4), 'frame_reserved_h2'], // WINDOW_UPDATE
    ['request', encodeFrameHeader(0x09, 4), 'frame_reserved_h2'], // CONTINUATION
    ['request', hex('4041 00'), 'frame_unexpected'], // WebTransport signal where it is not allowed
  ]
  for (const [kind, bytes, violation] of cases) {
    const type = bytes.subarray(0, 2).toString('hex')
    t.equal(new FrameReader(kind).push(bytes.subarray(0, bytes.length), [])?.violation, violation, `${kind} ${type}`)
  }
  t.equal(H3_VIOLATIONS.settings_missing.code, H3_ERROR.H3_MISSING_SETTINGS)
  t.equal(H3_VIOLATIONS.frame_unexpected.code, H3_ERROR.H3_FRAME_UNEXPECTED)
})

t.test('the WebTransport signal at the start of an allowed stream yields the session id and what follows', async (t) => {
  // 40 41 = 0x41 as a 2-byte varint, session id 0 — what the Rust protocol crate writes.
  const bytes = Buffer.concat([hex('4041 00'), Buffer.from('payload')])
  for (const size of [1, 2, 3, bytes.length]) {
    const reader = new FrameReader('request', undefined, true)
    const events: FrameEvent[] = []
    let rest = Buffer.alloc(0)
    for (let i = 0; i < bytes.length; i += size) {
      const before = events.length
      t.equal(reader.push(bytes.subarray(i, i + size), events), null)
      const e = events[before]
      if (e !== undefined && e.kind === 'webtransport') {
        t.equal(e.sessionId, 0)
        rest = Buffer.concat([Buffer.from(e.rest), bytes.subarray(i + size)])
        break
      }
    }
    t.equal(rest.toString(), 'payload', `chunks of ${size}`)
  }
  const wide = new FrameReader('request', undefined, true)
  const events: FrameEvent[] = []
  wide.push(hex('4041 7fff'), events)
  t.match(events, [{ kind: 'webtransport', sessionId: 0x3fff }])
  // Only as the first frame: after HEADERS it is unexpected.
  const late = new FrameReader('request', undefined, true)
  t.equal(late.push(Buffer.concat([encodeFrame(FRAME.HEADERS, hex('0000d1')), hex('4041 00')]), [])?.violation, 'frame_unexpected')
})

t.test('varint-payload frames encode and decode, and a payload that is not exactly one varint is refused', async (t) => {
  t.equal(encodeVarintFrame(FRAME.GOAWAY, 0x3fff).toString('hex'), '07027fff')
  t.equal(decodeVarintPayload(hex('7fff')), 0x3fff)
  t.equal(decodeVarintPayload(hex('')), -1)
  t.equal(decodeVarintPayload(hex('7f')), -1)
  t.equal(decodeVarintPayload(hex('0000')), -1)
})

t.test('WebTransport error codes map into the HTTP/3 code space skipping GREASE codepoints', async (t) => {
  t.equal(webTransportCodeToHttp3(0), WT_APPLICATION_ERROR_FIRST)
  t.equal(webTransportCodeToHttp3(0xffffffff), WT_APPLICATION_ERROR_LAST)
  for (const code of [0, 1, 29, 30, 31, 1000, 0x7fffffff, 0xffffffff]) {
    const h3 = webTransportCodeToHttp3(code)
    t.not((h3 - 0x21) % 0x1f, 0, `${code} does not land on a GREASE codepoint`)
    t.equal(http3CodeToWebTransport(h3), code)
  }
  t.equal(http3CodeToWebTransport(WT_APPLICATION_ERROR_FIRST + 30), null, 'the first GREASE codepoint in the range')
  t.equal(http3CodeToWebTransport(H3_ERROR.H3_NO_ERROR), null)
  t.throws(() => webTransportCodeToHttp3(2 ** 32), RangeError)
})
