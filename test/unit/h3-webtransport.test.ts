/**
 * WebTransport over HTTP/3 wire pieces (draft-ietf-webtrans-http3): stream headers with the
 * session id (bidi 0x41, uni 0x54), the datagram quarter stream id (RFC 9297 §2.1), and
 * rewriting a datagram for the other leg's session id. The byte strings are those the Rust
 * protocol crate of the real Pylon and Stargate writes (40 41 00 for session 0).
 */
import t from 'tap'
import { StreamHeaderReader, datagramPayloadOffset, datagramSessionId, encodeDatagramPrefix, encodeStreamHeader, isSessionId, rewriteDatagram } from '../../lib/quic/h3/webtransport.ts'

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s/g, ''), 'hex')

t.test('stream headers are the type varint then the session id', async (t) => {
  t.equal(encodeStreamHeader(true, 0).toString('hex'), '404100')
  t.equal(encodeStreamHeader(true, 0x3fff).toString('hex'), '40417fff')
  t.equal(encodeStreamHeader(false, 4).toString('hex'), '405404')
  t.equal(encodeStreamHeader(false, 2 ** 40).toString('hex'), '4054c000010000000000')
})

t.test('the header reader completes across any split and reports what it consumed', async (t) => {
  const bytes = Buffer.concat([hex('4041 7fff'), Buffer.from('data')])
  for (let split = 1; split < 4; split++) {
    const reader = new StreamHeaderReader()
    t.same(reader.push(bytes.subarray(0, split)), { status: 'incomplete' })
    t.same(reader.push(bytes.subarray(split)), { status: 'complete', type: 0x41, sessionId: 0x3fff, consumed: 4 - split }, `split at ${split}`)
  }
  // Non-minimal encodings, as the Rust crate accepts them: 0x41 in 4 bytes.
  t.same(new StreamHeaderReader().push(hex('80000041 00')), { status: 'complete', type: 0x41, sessionId: 0, consumed: 5 })
  // Other stream types complete after the type alone.
  t.same(new StreamHeaderReader().push(hex('00 0400')), { status: 'complete', type: 0, sessionId: -1, consumed: 1 })
})

t.test('datagrams carry the quarter stream id of their session', async (t) => {
  const datagram = Buffer.concat([encodeDatagramPrefix(8), Buffer.from('ping')])
  t.equal(datagram.toString('hex'), '02' + Buffer.from('ping').toString('hex'))
  t.equal(datagramSessionId(datagram), 8)
  t.equal(datagram.subarray(datagramPayloadOffset(datagram)).toString(), 'ping')
  t.equal(datagramSessionId(Buffer.alloc(0)), -1)
  t.equal(datagramSessionId(hex('40')), -1, 'a quarter stream id cut short')
  // 0x40 * 4 = 256: a two-byte quarter stream id.
  t.equal(datagramSessionId(hex('4040 aa')), 256)
})

t.test('a datagram rewritten for another session keeps its payload', async (t) => {
  const original = Buffer.concat([encodeDatagramPrefix(0), Buffer.from('payload')])
  const rewritten = rewriteDatagram(original, 4 * 100)
  t.equal(rewritten?.toString('hex'), '4064' + Buffer.from('payload').toString('hex'))
  t.equal(rewriteDatagram(hex('80'), 0), null)
  t.ok(isSessionId(0) && isSessionId(8) && !isSessionId(1) && !isSessionId(2) && !isSessionId(-4))
})
