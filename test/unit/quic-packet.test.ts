// Issue 5: the endpoint reads QUIC headers in JavaScript to route datagrams and to drop
// malformed ones before quiche sees them (RFC 9000 §17). Table-driven.
import t from 'tap'
import { dcidKey, isWellFormedDatagram, readLongHeader, readVarint } from '../../lib/quic/quiche/packet.ts'
import { firstInitial } from '../fixtures/quic-raw.ts'

t.test('variable-length integers decode in all four sizes and refuse to run past the end', async (t) => {
  const cases: Array<[string, number[], { value: number, next: number } | null]> = [
    ['1 byte', [0x25], { value: 37, next: 1 }],
    ['2 bytes (RFC 9000 A.1 example)', [0x7b, 0xbd], { value: 15293, next: 2 }],
    ['4 bytes (RFC example)', [0x9d, 0x7f, 0x3e, 0x7d], { value: 494878333, next: 4 }],
    // RFC example value 151288809941952652 is above 2^53: read as the nearest double.
    ['8 bytes (RFC example)', [0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c], { value: Number(151288809941952652n), next: 8 }],
    ['truncated 2-byte', [0x40], null],
    ['empty', [], null],
  ]
  for (const [name, bytes, expected] of cases) t.same(readVarint(Buffer.from(bytes), 0), expected, name)
})

t.test('a real client Initial is well formed and names its connection IDs', async (t) => {
  const initial = firstInitial('stargate-0.stargate.external')
  t.ok(isWellFormedDatagram(initial, 16))
  const header = readLongHeader(initial)
  t.equal(header?.version, 1)
  t.equal(header?.type, 0, 'Initial')
  t.equal(header?.token.length, 0)
  t.equal(dcidKey(initial, 16), header?.dcid.toString('latin1'), 'routing key = DCID')
})

t.test('malformed datagrams are refused before they reach a connection', async (t) => {
  const initial = firstInitial('stargate-0.stargate.external')
  const mutate = (fn: (b: Buffer) => void): Buffer => { const b = Buffer.from(initial); fn(b); return b }
  const dcidLength = initial[5] as number
  const lengthAt = 6 + dcidLength + 1 + (initial[6 + dcidLength] as number) + 1
  const cases: Array<[string, Buffer, boolean]> = [
    ['the real Initial', initial, true],
    ['truncated inside the header', initial.subarray(0, 10), false],
    ['truncated inside the payload', initial.subarray(0, lengthAt + 40), false],
    ['fixed bit cleared', mutate((b) => { b[0] = (b[0] as number) & ~0x40 }), false],
    ['unknown version', mutate((b) => { b.writeUInt32BE(0x1a2a3a4a, 1) }), false],
    ['Retry from a client', mutate((b) => { b[0] = ((b[0] as number) & 0xcf) | 0x30 }), false],
    ['DCID longer than 20 bytes', mutate((b) => { b[5] = 21 }), false],
    ['Length past the end of the datagram', mutate((b) => { b[lengthAt] = 0x7f; b[lengthAt + 1] = 0xff }), false],
    ['short header, room for a packet', Buffer.concat([Buffer.from([0x41]), Buffer.alloc(16 + 20)]), true],
    ['short header, too short for the header-protection sample', Buffer.concat([Buffer.from([0x41]), Buffer.alloc(16 + 10)]), false],
    ['short header without the fixed bit', Buffer.concat([Buffer.from([0x01]), Buffer.alloc(40)]), false],
    ['empty', Buffer.alloc(0), true],
  ]
  for (const [name, datagram, ok] of cases) t.equal(isWellFormedDatagram(datagram, 16), ok, name)
})

t.test('the routing key needs a whole connection ID', async (t) => {
  t.equal(dcidKey(Buffer.from([0x41, 1, 2, 3]), 16), null, 'short header shorter than our CID length')
  t.equal(dcidKey(Buffer.from([0xc0, 0, 0, 0, 1, 30, 0]), 16), null, 'long header claiming a 30-byte DCID')
  t.equal(dcidKey(Buffer.concat([Buffer.from([0x41]), Buffer.from('0123456789abcdef'), Buffer.alloc(30)]), 16), '0123456789abcdef')
})
