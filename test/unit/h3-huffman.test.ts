/**
 * The HPACK Huffman code used by QPACK string literals (RFC 7541 Appendix B; RFC 9204 §4.1.2).
 * The table is stored as code lengths and made canonical; these tests pin it to the RFC: known
 * rows of Appendix B, the encoded strings of the RFC 7541 Appendix C.4 and C.6 examples, and an
 * independent implementation (hpack.js) on random input. Decoding errors follow §5.2.
 */
import t from 'tap'
import { createRequire } from 'node:module'
import { EOS, HUFFMAN_CODES, huffmanDecode, huffmanEncode, huffmanEncodedLength } from '../../lib/quic/h3/huffman.ts'

const require = createRequire(import.meta.url)
const hpack = require('hpack.js/lib/hpack/huffman.js') as { encode: [number, number][] }

// RFC 7541 Appendix C.4 (requests) and C.6 (responses): string → its Huffman bytes.
const RFC_STRINGS: readonly [string, string][] = [
  ['www.example.com', 'f1e3c2e5f23a6ba0ab90f4ff'],
  ['no-cache', 'a8eb10649cbf'],
  ['custom-key', '25a849e95ba97d7f'],
  ['custom-value', '25a849e95bb8e8b4bf'],
  ['302', '6402'],
  ['307', '640eff'],
  ['private', 'aec3771a4b'],
  ['Mon, 21 Oct 2013 20:13:21 GMT', 'd07abe941054d444a8200595040b8166e082a62d1bff'],
  ['Mon, 21 Oct 2013 20:13:22 GMT', 'd07abe941054d444a8200595040b8166e084a62d1bff'],
  ['https://www.example.com', '9d29ad171863c78f0b97c8e9ae82ae43d3'],
  ['gzip', '9bd9ab'],
  ['foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1', '94e7821dd7f2e6c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007'],
]

t.test('rows of RFC 7541 Appendix B come out of the canonical construction', async (t) => {
  t.equal(HUFFMAN_CODES[0], 0x1ff8, 'symbol 0: 1111111111000 (13 bits)')
  t.equal(HUFFMAN_CODES[0x20], 0x14, "' ': 010100 (6 bits)")
  t.equal(HUFFMAN_CODES[0x30], 0x0, "'0': 00000 (5 bits)")
  t.equal(HUFFMAN_CODES[0x61], 0x3, "'a': 00011 (5 bits)")
  t.equal(HUFFMAN_CODES[0x7a], 0x7b, "'z': 1111011 (7 bits)")
  t.equal(HUFFMAN_CODES[0xff], 0x3ffffee, '255: 26 bits')
  t.equal(HUFFMAN_CODES[EOS], 0x3fffffff, 'EOS: 30 ones')
})

t.test('encodes and decodes the strings of the RFC 7541 examples byte for byte', async (t) => {
  for (const [text, hex] of RFC_STRINGS) {
    const raw = Buffer.from(text, 'latin1')
    t.equal(huffmanEncode(raw).toString('hex'), hex, `encode ${text}`)
    t.equal(huffmanEncodedLength(raw), hex.length / 2)
    const bytes = Buffer.from(hex, 'hex')
    const decoded = huffmanDecode(bytes, 0, bytes.length, 1000)
    t.ok(decoded.ok && decoded.value.toString('latin1') === text, `decode ${text}`)
  }
})

t.test('agrees with an independent implementation (hpack.js) on every symbol and on random strings', async (t) => {
  for (let symbol = 0; symbol <= EOS; symbol++) {
    const [, code] = hpack.encode[symbol] as [number, number]
    if (HUFFMAN_CODES[symbol] !== code) t.fail(`symbol ${symbol}: ${HUFFMAN_CODES[symbol]} vs ${code}`)
  }
  let seed = 7
  const random = (): number => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648 }
  for (let n = 0; n < 300; n++) {
    const raw = Buffer.alloc(Math.floor(random() * 80))
    for (let i = 0; i < raw.length; i++) raw[i] = Math.floor(random() * 256)
    const encoded = huffmanEncode(raw)
    const decoded = huffmanDecode(encoded, 0, encoded.length, 1000)
    if (!decoded.ok || !decoded.value.equals(raw)) t.fail(`round trip of ${raw.toString('hex')}`)
  }
  t.pass('300 random strings round-trip')
})

t.test('decoding refuses the RFC 7541 §5.2 violations', async (t) => {
  // 'a' (00011) then 1111111 1 padding = 8+ bits of ones: padding longer than 7 bits.
  const long = Buffer.from([0x1f, 0xff])
  t.same(huffmanDecode(long, 0, long.length, 100), { ok: false, reason: 'padding_too_long' })
  // 'a' (00011) then padding 000: not the EOS prefix.
  const zeros = Buffer.from([0x18])
  t.same(huffmanDecode(zeros, 0, zeros.length, 100), { ok: false, reason: 'padding_not_eos' })
  // EOS (30 ones) inside the string, then 2 bits of padding.
  const eos = Buffer.from([0xff, 0xff, 0xff, 0xff])
  t.same(huffmanDecode(eos, 0, eos.length, 100), { ok: false, reason: 'eos_in_string' })
  // An empty string is fine.
  t.same(huffmanDecode(Buffer.alloc(0), 0, 0, 100), { ok: true, value: Buffer.alloc(0) })
})

t.test('decoding stops at the caller\'s length limit instead of growing past it', async (t) => {
  const encoded = huffmanEncode(Buffer.from('0'.repeat(1000)))
  t.same(huffmanDecode(encoded, 0, encoded.length, 999), { ok: false, reason: 'too_long' })
  const ok = huffmanDecode(encoded, 0, encoded.length, 1000)
  t.ok(ok.ok && ok.value.length === 1000)
})
