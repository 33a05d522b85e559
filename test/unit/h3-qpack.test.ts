/**
 * QPACK without a dynamic table (RFC 9204): this endpoint advertises a table capacity of 0,
 * so field sections decode from the static table and literals alone, and any reference to a
 * dynamic table is QPACK_DECOMPRESSION_FAILED. Vectors: RFC 9204 Appendix B (the static
 * example decodes; the dynamic ones must fail), plus hand-assembled sections for each field
 * line form, written out as bytes.
 */
import t from 'tap'
import { QpackStreamReader, decodeFieldSection, encodeFieldSection, fieldSectionSize, type FieldLine } from '../../lib/quic/h3/qpack.ts'
import { STATIC_TABLE } from '../../lib/quic/h3/qpack-static-table.ts'
import { huffmanEncode } from '../../lib/quic/h3/huffman.ts'

const hex = (s: string): Buffer => Buffer.from(s.replace(/[\s|]/g, ''), 'hex')
const LIMIT = 16 * 1024

/** A prefixed integer (RFC 7541 §5.1), written independently of the code under test. */
function prefixed (prefixBits: number, flags: number, value: number): Buffer {
  const max = (1 << prefixBits) - 1
  if (value < max) return Buffer.from([flags | value])
  const out = [flags | max]
  let rest = value - max
  while (rest >= 128) { out.push((rest % 128) | 0x80); rest = Math.floor(rest / 128) }
  out.push(rest)
  return Buffer.from(out)
}

function decodedFields (section: Buffer, limit = LIMIT): FieldLine[] | string {
  const decoded = decodeFieldSection(section, limit)
  return decoded.ok ? decoded.fields : `${decoded.error}: ${decoded.detail}`
}

t.test('the static table has RFC 9204 Appendix A\'s 99 entries at their indices', async (t) => {
  t.equal(STATIC_TABLE.length, 99)
  t.same(STATIC_TABLE[0], [':authority', ''])
  t.same(STATIC_TABLE[15], [':method', 'CONNECT'])
  t.same(STATIC_TABLE[25], [':status', '200'])
  t.same(STATIC_TABLE[63], [':status', '100'])
  t.same(STATIC_TABLE[84], ['authorization', ''])
  t.same(STATIC_TABLE[85], ['content-security-policy', "script-src 'none'; object-src 'none'; base-uri 'none'"])
  t.same(STATIC_TABLE[98], ['x-frame-options', 'sameorigin'])
})

t.test('decodes RFC 9204 Appendix B.1: a literal with a static name reference', async (t) => {
  const section = hex('0000 | 510b 2f69 6e64 6578 | 2e68 746d 6c')
  t.same(decodeFieldSection(section, LIMIT), { ok: true, fields: [[':path', '/index.html']], size: 5 + 11 + 32 })
})

t.test('decodes every static and literal field line form, Huffman-coded or not', async (t) => {
  const hName = huffmanEncode(Buffer.from('x-inference-server-id'))
  const hValue = huffmanEncode(Buffer.from('server-42'))
  const section = Buffer.concat([
    hex('0000'),
    hex('d1'), // indexed, static 17: :method GET
    hex('ff08'), // indexed, static 63 + 8 = 71: :status 500
    hex('5f45'), hex('06'), Buffer.from('bearer'), // literal, static name 15 + 69 = 84 (authorization), raw value
    hex('57'), prefixed(7, 0x80, hValue.length), hValue, // literal, static name 7 (etag), Huffman value
    prefixed(3, 0x28, hName.length), hName, hex('07'), Buffer.from('literal'), // literal Huffman name, raw value
    hex('24'), Buffer.from('mode'), hex('00'), // literal raw name "mode", empty value
    hex('7f0b'), hex('00'), // literal with name reference and N (never index) bit: static 15 + 11 = 26 (:status 304 name), empty
  ])
  t.same(decodedFields(section), [
    [':method', 'GET'],
    [':status', '500'],
    ['authorization', 'bearer'],
    ['etag', 'server-42'],
    ['x-inference-server-id', 'literal'],
    ['mode', ''],
    [':status', ''],
  ])
})

t.test('a reference to the dynamic table in any form is QPACK_DECOMPRESSION_FAILED', async (t) => {
  const cases: readonly [string, string][] = [
    // RFC 9204 Appendix B.2, stream 4: Required Insert Count 2, post-base indexed lines.
    ['0381 10 11', 'required insert count'],
    // Appendix B.3, stream 8: Required Insert Count 4, dynamic indexed line.
    ['0500 80', 'required insert count'],
    ['0000 80', 'indexed field line references the dynamic table'],
    ['0000 10', 'post-base'],
    ['0000 4005 6162636465', 'dynamic table name'],
    ['0000 0005 6162636465', 'post-base'],
    ['0080', 'base is negative'],
  ]
  for (const [bytes, detail] of cases) {
    const result = decodedFields(hex(bytes))
    t.match(result, new RegExp(`^qpack_decompression: .*${detail}`), bytes)
  }
})

t.test('malformed sections are QPACK_DECOMPRESSION_FAILED, never a throw', async (t) => {
  const cases: readonly [string, string][] = [
    ['', 'prefix truncated'],
    ['00', 'prefix truncated'],
    ['0000 ff24', 'no index 99'], // static index 63 + 36 = 99, past the table
    ['0000 5f', 'truncated'], // name index continuation missing
    ['0000 51 05 6162', 'truncated'], // value shorter than its length
    ['0000 51 ff', 'truncated'], // value length continuation missing
    ['0000 51 ffffffffffff01', 'truncated'], // length integer too long
    ['0000 51 81 00', 'huffman'], // Huffman value 00000000: padding not EOS
    ['0000 2a ffff 00', 'huffman'], // Huffman name of 16 ones: padding too long
  ]
  for (const [bytes, detail] of cases) t.match(decodedFields(hex(bytes)), new RegExp(`^qpack_decompression: .*${detail}`), bytes)
  // Random garbage: always a typed result.
  let seed = 11
  const random = (): number => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648 }
  for (let n = 0; n < 2000; n++) {
    const buf = Buffer.alloc(Math.floor(random() * 40))
    for (let i = 0; i < buf.length; i++) buf[i] = Math.floor(random() * 256)
    const result = decodeFieldSection(buf, LIMIT)
    if (typeof result.ok !== 'boolean') t.fail('untyped result')
  }
})

t.test('a section whose decoded size exceeds the limit is field_section_too_large, Huffman expansion included', async (t) => {
  const value = 'a'.repeat(100)
  const raw = Buffer.concat([hex('0000 24'), Buffer.from('name'), prefixed(7, 0, value.length), Buffer.from(value)])
  t.equal(fieldSectionSize([['name', value]]), 136)
  t.same(decodedFields(raw, 136), [['name', value]])
  t.match(decodedFields(raw, 135), /^field_section_too_large/)
  // 1000 '0's Huffman-code to 625 bytes; the decoded size is what counts.
  const zeros = huffmanEncode(Buffer.from('0'.repeat(1000)))
  const huff = Buffer.concat([hex('0000 24'), Buffer.from('name'), prefixed(7, 0x80, zeros.length), zeros])
  t.match(decodedFields(huff, 1000), /^field_section_too_large/)
  t.equal((decodedFields(huff, 1036) as FieldLine[])[0]?.[1].length, 1000)
})

t.test('encoding uses the static table and literals and decodes back to the same fields', async (t) => {
  const fields: FieldLine[] = [
    [':method', 'CONNECT'], // exact static match: one byte
    [':protocol', 'webtransport'],
    [':scheme', 'https'],
    [':authority', 'stargate-0.stargate.example.com'],
    [':path', '/_stargate/webtransport'],
    ['x-inference-server-id', 'a'],
    ['x-inference-server-id', 'b'], // repeated fields stay repeated, in order
    ['x-stargate-auth-token', 'secret-token'],
    ['authorization', 'Bearer x'],
    ['empty', ''],
    ['binary', '\u00ff\u0080\u0001'],
  ]
  const encoded = encodeFieldSection(fields)
  t.equal(encoded.subarray(0, 3).toString('hex'), '0000cf', 'prefix 0000, then :method CONNECT as static index 15')
  t.same(decodedFields(encoded), fields)
})

t.test('credentials are encoded with the never-index bit and not as static matches', async (t) => {
  // authorization has a static name (84): literal with name reference, N set: 0111 then 15 + 69.
  const auth = encodeFieldSection([['authorization', 'x']])
  t.equal(auth.subarray(2, 4).toString('hex'), '7f45')
  // x-stargate-auth-token has no static name: literal name with N set (0x30).
  const token = encodeFieldSection([['x-stargate-auth-token', 'x']])
  t.equal((token[2] as number) & 0xf0, 0x30)
  // A non-credential with a static name has N clear.
  t.equal(encodeFieldSection([['etag', 'x']])[2], 0x57)
})

t.test('an encoder stream may only set the dynamic table capacity to 0', async (t) => {
  t.same(new QpackStreamReader(true).push(hex('20')), { ok: true }, 'Set Dynamic Table Capacity 0')
  // RFC 9204 Appendix B.2's encoder stream: capacity 220, then inserts.
  t.match(new QpackStreamReader(true).push(hex('3fbd01')), { ok: false, error: 'qpack_encoder_stream', detail: /capacity 220/ })
  t.match(new QpackStreamReader(true).push(hex('c00f7777772e6578616d706c652e636f6d')), { ok: false, error: 'qpack_encoder_stream' })
  t.match(new QpackStreamReader(true).push(hex('4a637573746f6d2d6b65790c637573746f6d2d76616c7565')), { ok: false, error: 'qpack_encoder_stream' }, 'insert with literal name')
  t.match(new QpackStreamReader(true).push(hex('02')), { ok: false, error: 'qpack_encoder_stream' }, 'duplicate')
  // A capacity split across chunks.
  const split = new QpackStreamReader(true)
  t.same(split.push(hex('3f')), { ok: true })
  t.match(split.push(hex('bd01')), { ok: false, detail: /capacity 220/ })
})

t.test('a decoder stream may only cancel streams: no section ever needed acknowledging', async (t) => {
  const reader = new QpackStreamReader(false)
  t.same(reader.push(hex('48')), { ok: true }, 'Stream Cancellation of stream 8')
  t.same(reader.push(hex('7f')), { ok: true }, 'a cancellation whose stream id continues')
  t.same(reader.push(hex('81 01')), { ok: true }, 'its continuation bytes')
  t.match(new QpackStreamReader(false).push(hex('84')), { ok: false, error: 'qpack_decoder_stream', detail: /section acknowledgment/ }, 'Appendix B.2 decoder stream: section acknowledgment of stream 4')
  t.match(new QpackStreamReader(false).push(hex('01')), { ok: false, error: 'qpack_decoder_stream', detail: /insert count increment/ }, 'Appendix B.3: insert count increment')
})
