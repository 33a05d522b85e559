/**
 * QUIC variable-length integers (RFC 9000 §16), the one implementation the HTTP/3,
 * QPACK-stream, WebTransport and capsule code shares:
 *
 *   2 high bits of the first byte = log2(length): 00 → 1 byte (6 bits), 01 → 2 (14),
 *   10 → 4 (30), 11 → 8 (62); the value is big-endian in the remaining bits.
 *
 * Values are JavaScript numbers. Every value this code acts on (lengths, stream ids, frame
 * and setting types it knows, error codes up to WebTransport's 0x52e4a40fa8db + 2^32) is
 * below 2^53 and exact; larger ones (GREASE identifiers can reach 2^62) read rounded, which
 * is harmless because they are only ever compared with known values or limits. Reading
 * never allocates: decodeVarint returns the value and the caller advances by
 * varintLengthOf(first byte), so per-datagram and per-stream-header parsing costs no garbage.
 */

/** The largest value a QUIC varint holds (2^62 - 1), as far as a number can say it. */
export const MAX_VARINT = 2 ** 62 - 1
/** Longest encoding: 8 bytes. */
const MAX_VARINT_BYTES = 8

/** Encoded length of a varint from its first byte: 1, 2, 4 or 8. */
export function varintLengthOf (first: number): 1 | 2 | 4 | 8 {
  return (1 << (first >> 6)) as 1 | 2 | 4 | 8
}

/** Bytes needed to encode value in the shortest form. */
export function varintSize (value: number): 1 | 2 | 4 | 8 {
  return value < 0x40 ? 1 : value < 0x4000 ? 2 : value < 0x40000000 ? 4 : 8
}

/**
 * The varint at buf[offset], or -1 when buf ends before its last byte. Multiplication, not
 * shifts: values above 2^31 must stay exact.
 */
export function decodeVarint (buf: Uint8Array, offset: number): number {
  if (offset >= buf.length) return -1
  const first = buf[offset] as number
  const length = 1 << (first >> 6)
  if (offset + length > buf.length) return -1
  let value = first & 0x3f
  for (let i = 1; i < length; i++) value = value * 256 + (buf[offset + i] as number)
  return value
}

/**
 * Writes value at out[offset] in its shortest form and returns the offset after it. Throws
 * a RangeError for a value that is not a non-negative safe integer: callers encode values
 * they computed, never peer input, so that is a programming error.
 */
export function writeVarint (out: Uint8Array, offset: number, value: number): number {
  if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`varint value must be a non-negative safe integer, got ${value}`)
  if (value < 0x40) {
    out[offset] = value
    return offset + 1
  }
  if (value < 0x4000) {
    out[offset] = 0x40 | (value >>> 8)
    out[offset + 1] = value & 0xff
    return offset + 2
  }
  if (value < 0x40000000) {
    out[offset] = 0x80 | (value >>> 24)
    out[offset + 1] = (value >>> 16) & 0xff
    out[offset + 2] = (value >>> 8) & 0xff
    out[offset + 3] = value & 0xff
    return offset + 4
  }
  const high = Math.floor(value / 0x100000000)
  const low = value % 0x100000000
  out[offset] = 0xc0 | (high >>> 24)
  out[offset + 1] = (high >>> 16) & 0xff
  out[offset + 2] = (high >>> 8) & 0xff
  out[offset + 3] = high & 0xff
  out[offset + 4] = low >>> 24
  out[offset + 5] = (low >>> 16) & 0xff
  out[offset + 6] = (low >>> 8) & 0xff
  out[offset + 7] = low & 0xff
  return offset + 8
}

/** value as a new buffer in its shortest form. */
export function encodeVarint (value: number): Buffer {
  const out = Buffer.allocUnsafe(varintSize(value))
  writeVarint(out, 0, value)
  return out
}

/**
 * Collects one varint that may arrive split across chunks (a stream header, a frame
 * header): push bytes until value is not -1. Holds at most 8 bytes.
 */
export class VarintAccumulator {
  readonly #bytes = new Uint8Array(MAX_VARINT_BYTES)
  #length = 0
  #value = -1

  /** The value once complete, else -1. */
  get value (): number {
    return this.#value
  }

  /** Bytes collected so far. */
  get length (): number {
    return this.#length
  }

  /**
   * Takes bytes from chunk[start..] until the varint is complete; returns how many it took.
   * Takes nothing once complete.
   */
  push (chunk: Uint8Array, start: number): number {
    let i = start
    while (this.#value < 0 && i < chunk.length) {
      this.#bytes[this.#length++] = chunk[i++] as number
      if (this.#length === varintLengthOf(this.#bytes[0] as number)) this.#value = decodeVarint(this.#bytes, 0)
    }
    return i - start
  }

  reset (): void {
    this.#length = 0
    this.#value = -1
  }
}
