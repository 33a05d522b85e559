/**
 * QUIC variable-length integers (RFC 9000 §16), shared by HTTP/3 frames, stream headers,
 * datagrams and capsules. Vectors from RFC 9000 Appendix A.1.
 */
import t from 'tap'
import { MAX_VARINT, VarintAccumulator, decodeVarint, encodeVarint, varintLengthOf, varintSize, writeVarint } from '../../lib/quic/varint.ts'

const RFC_VECTORS: readonly [hex: string, value: number][] = [
  ['c2197c5eff14e88c', Number(151288809941952652n)], // above 2^53: read rounded, as documented
  ['9d7f3e7d', 494878333],
  ['7bbd', 15293],
  ['25', 37],
  ['4025', 37], // a non-minimal two-byte encoding of 37
]

t.test('decodes the RFC 9000 Appendix A.1 examples', async (t) => {
  for (const [hex, value] of RFC_VECTORS) {
    const bytes = Buffer.from(hex, 'hex')
    t.equal(decodeVarint(bytes, 0), value, hex)
    t.equal(varintLengthOf(bytes[0] as number), bytes.length, `${hex} length`)
  }
})

t.test('encodes in the shortest form at each size boundary and reads back the same value', async (t) => {
  const cases: readonly [number, string][] = [
    [0, '00'], [63, '3f'], [64, '4040'], [16383, '7fff'], [16384, '80004000'],
    [2 ** 30 - 1, 'bfffffff'], [2 ** 30, 'c000000040000000'], [Number.MAX_SAFE_INTEGER, 'c01fffffffffffff'],
  ]
  for (const [value, hex] of cases) {
    const bytes = encodeVarint(value)
    t.equal(bytes.toString('hex'), hex, `${value}`)
    t.equal(varintSize(value), bytes.length)
    t.equal(decodeVarint(bytes, 0), value)
  }
})

t.test('a varint cut short reads as -1, at any offset', async (t) => {
  const bytes = Buffer.from('00c2197c5eff14e88c', 'hex')
  for (let end = 1; end < bytes.length; end++) t.equal(decodeVarint(bytes.subarray(0, end), 1), -1, `${end} bytes`)
  t.equal(decodeVarint(bytes, 9), -1, 'offset at the end')
})

t.test('writing a value that is not a non-negative safe integer is a RangeError', async (t) => {
  const out = Buffer.alloc(8)
  for (const bad of [-1, 1.5, Number.NaN, MAX_VARINT]) t.throws(() => writeVarint(out, 0, bad), RangeError, String(bad))
})

t.test('the accumulator completes a varint fed one byte at a time and takes nothing after', async (t) => {
  const acc = new VarintAccumulator()
  const bytes = Buffer.from('9d7f3e7dff', 'hex')
  for (let i = 0; i < 4; i++) {
    t.equal(acc.value, -1)
    t.equal(acc.push(bytes.subarray(i, i + 1), 0), 1)
  }
  t.equal(acc.value, 494878333)
  t.equal(acc.push(bytes, 4), 0, 'complete: takes nothing more')
  acc.reset()
  t.equal(acc.push(bytes, 1), 2, 'from a chunk: takes exactly the varint\'s bytes (7f3e, a 2-byte varint)')
  t.equal(acc.value, 0x3f3e)
  acc.reset()
  t.equal(acc.push(bytes, 4), 1)
  t.equal(acc.value, -1, '0xff starts an 8-byte varint')
})
