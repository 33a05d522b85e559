/**
 * QPACK (RFC 9204) without a dynamic table: this endpoint advertises
 * SETTINGS_QPACK_MAX_TABLE_CAPACITY 0 and SETTINGS_QPACK_BLOCKED_STREAMS 0, so a peer's
 * encoder can only use the static table and literals, and this encoder never inserts. Both
 * QPACK unidirectional streams then carry almost nothing, and a field section decodes on its
 * own, with no blocking (§2.1.2).
 *
 * Field section (§4.5):   Required Insert Count (8-bit prefix) | S + Delta Base (7-bit prefix)
 *                         then field lines, by first bits:
 *   1 T index(6)                      indexed field line (T=1 static, T=0 dynamic)
 *   0001 index(4)                     indexed, post-base (dynamic)
 *   01 N T index(4) | value           literal with name reference (T=1 static)
 *   0000 N index(3) | value           literal with post-base name reference (dynamic)
 *   001 N H len(3) name | value       literal with literal name
 *   value = H len(7) bytes            (H = Huffman-coded)
 *
 * Any dynamic-table reference, a non-zero Required Insert Count, a static index past the
 * table, a truncated line, an integer that overflows and a bad Huffman string are
 * QPACK_DECOMPRESSION_FAILED (§2.2.3, §4.5.1.1). The decoded size (RFC 9114 §4.2.2: name +
 * value + 32 per field) is bounded by the caller's limit: over it is field_section_too_large.
 */
import { huffmanDecode, huffmanEncodedLength, huffmanEncodeInto } from './huffman.ts'
import { STATIC_FIELD_INDEX, STATIC_NAME_INDEX, STATIC_TABLE } from './qpack-static-table.ts'
import { SENSITIVE_FIELDS } from '../../http-fields.ts'

/** One field line: name and value as latin1 strings (one character per byte, as Node's HTTP layers keep them). */
export type FieldLine = readonly [name: string, value: string]

/** RFC 9114 §4.2.2: each field counts 32 bytes on top of its name and value. */
const FIELD_OVERHEAD = 32
/** Prefixed integers longer than this are refused: no index or length needs more than 2^35. */
const MAX_CONTINUATION_BYTES = 5

export type FieldSectionDecode =
  | { readonly ok: true, readonly fields: FieldLine[], readonly size: number }
  | { readonly ok: false, readonly error: 'qpack_decompression' | 'field_section_too_large', readonly detail: string }

/** Position while decoding; prefixed integers and strings report through it. */
interface Cursor { at: number, value: number, error: StringError | null }
type StringError = 'truncated' | 'huffman' | 'too_long'

/**
 * Reads a prefixed integer (RFC 7541 §5.1) with an N-bit prefix at cur.at into cur.value;
 * false when it is truncated or too long.
 */
function readPrefixedInt (buf: Uint8Array, end: number, cur: Cursor, prefixBits: number): boolean {
  if (cur.at >= end) return false
  const mask = (1 << prefixBits) - 1
  let value = (buf[cur.at++] as number) & mask
  if (value < mask) {
    cur.value = value
    return true
  }
  let scale = 1
  for (let n = 0; n < MAX_CONTINUATION_BYTES; n++) {
    if (cur.at >= end) return false
    const byte = buf[cur.at++] as number
    value += (byte & 0x7f) * scale
    scale *= 128
    if ((byte & 0x80) === 0) {
      cur.value = value
      return true
    }
  }
  return false
}

/** Writes value as a prefixed integer whose first byte already holds `flags` in the bits above the prefix. */
function writePrefixedInt (out: Uint8Array, at: number, prefixBits: number, flags: number, value: number): number {
  const mask = (1 << prefixBits) - 1
  if (value < mask) {
    out[at++] = flags | value
    return at
  }
  out[at++] = flags | mask
  let rest = value - mask
  while (rest >= 128) {
    out[at++] = (rest % 128) | 0x80
    rest = Math.floor(rest / 128)
  }
  out[at++] = rest
  return at
}

function prefixedIntSize (prefixBits: number, value: number): number {
  const mask = (1 << prefixBits) - 1
  if (value < mask) return 1
  let size = 2
  for (let rest = value - mask; rest >= 128; rest = Math.floor(rest / 128)) size++
  return size
}

/**
 * Reads a string literal whose length prefix starts at cur.at with the H flag at bit
 * `prefixBits` of the first byte: the latin1 string, or null with cur.error set.
 */
function readString (buf: Uint8Array, end: number, cur: Cursor, prefixBits: number, maxLength: number): string | null {
  if (cur.at >= end) return stringError(cur, 'truncated')
  const huffman = ((buf[cur.at] as number) & (1 << prefixBits)) !== 0
  if (!readPrefixedInt(buf, end, cur, prefixBits)) return stringError(cur, 'truncated')
  const length = cur.value
  if (length > end - cur.at) return stringError(cur, 'truncated')
  const start = cur.at
  cur.at += length
  if (!huffman) {
    if (length > maxLength) return stringError(cur, 'too_long')
    return Buffer.from(buf.buffer, buf.byteOffset + start, length).toString('latin1')
  }
  const decoded = huffmanDecode(buf, start, start + length, maxLength + 1)
  if (!decoded.ok) return stringError(cur, decoded.reason === 'too_long' ? 'too_long' : 'huffman')
  if (decoded.value.length > maxLength) return stringError(cur, 'too_long')
  return decoded.value.toString('latin1')
}

function stringError (cur: Cursor, error: StringError): null {
  cur.error = error
  return null
}

function decompressionFailed (detail: string): FieldSectionDecode {
  return { ok: false, error: 'qpack_decompression', detail }
}

/**
 * Decodes one field section (a HEADERS frame payload). maxSize bounds the decoded size as
 * RFC 9114 §4.2.2 counts it: this endpoint's SETTINGS_MAX_FIELD_SECTION_SIZE.
 */
export function decodeFieldSection (buf: Uint8Array, maxSize: number): FieldSectionDecode {
  const end = buf.length
  const cur: Cursor = { at: 0, value: 0, error: null }
  if (!readPrefixedInt(buf, end, cur, 8)) return decompressionFailed('field section prefix truncated')
  if (cur.value !== 0) return decompressionFailed('field section references the dynamic table (required insert count is not 0)')
  if (cur.at >= end) return decompressionFailed('field section prefix truncated')
  const negativeBase = ((buf[cur.at] as number) & 0x80) !== 0
  if (!readPrefixedInt(buf, end, cur, 7)) return decompressionFailed('field section prefix truncated')
  // Base = Required Insert Count ± Delta Base; with a count of 0 a negative base is invalid (§4.5.1.2).
  if (negativeBase) return decompressionFailed('field section base is negative')
  const fields: FieldLine[] = []
  let size = 0
  while (cur.at < end) {
    const first = buf[cur.at] as number
    let name: string | null
    let value: string | null
    if ((first & 0x80) !== 0) {
      // Indexed field line.
      if ((first & 0x40) === 0) return decompressionFailed('indexed field line references the dynamic table')
      if (!readPrefixedInt(buf, end, cur, 6)) return decompressionFailed('field line truncated')
      const entry = STATIC_TABLE[cur.value]
      if (entry === undefined) return decompressionFailed(`static table has no index ${cur.value}`)
      name = entry[0]
      value = entry[1]
    } else if ((first & 0x40) !== 0) {
      // Literal with name reference.
      if ((first & 0x10) === 0) return decompressionFailed('literal field line references a dynamic table name')
      if (!readPrefixedInt(buf, end, cur, 4)) return decompressionFailed('field line truncated')
      const entry = STATIC_TABLE[cur.value]
      if (entry === undefined) return decompressionFailed(`static table has no index ${cur.value}`)
      name = entry[0]
      value = readString(buf, end, cur, 7, Math.max(0, maxSize - size - FIELD_OVERHEAD - name.length))
    } else if ((first & 0x20) !== 0) {
      // Literal with literal name.
      name = readString(buf, end, cur, 3, Math.max(0, maxSize - size - FIELD_OVERHEAD))
      value = name === null ? null : readString(buf, end, cur, 7, Math.max(0, maxSize - size - FIELD_OVERHEAD - name.length))
    } else {
      return decompressionFailed('field line references the dynamic table (post-base)')
    }
    if (name === null || value === null) {
      switch (cur.error) {
        case 'too_long': return { ok: false, error: 'field_section_too_large', detail: `field section exceeds ${maxSize} bytes` }
        case 'huffman': return decompressionFailed('string literal has an invalid huffman encoding')
        default: return decompressionFailed('field line truncated')
      }
    }
    size += name.length + value.length + FIELD_OVERHEAD
    if (size > maxSize) return { ok: false, error: 'field_section_too_large', detail: `field section exceeds ${maxSize} bytes` }
    fields.push([name, value])
  }
  return { ok: true, fields, size }
}

/** Bytes of a string literal: Huffman when that is shorter. */
function stringSize (bytes: Buffer, prefixBits: number): { readonly huffman: boolean, readonly size: number } {
  const huffmanLength = huffmanEncodedLength(bytes)
  const huffman = huffmanLength < bytes.length
  const length = huffman ? huffmanLength : bytes.length
  return { huffman, size: prefixedIntSize(prefixBits, length) + length }
}

function writeString (out: Uint8Array, at: number, bytes: Buffer, prefixBits: number, flags: number, huffman: boolean): number {
  if (huffman) {
    at = writePrefixedInt(out, at, prefixBits, flags | (1 << prefixBits), huffmanEncodedLength(bytes))
    return huffmanEncodeInto(bytes, out, at)
  }
  at = writePrefixedInt(out, at, prefixBits, flags, bytes.length)
  out.set(bytes, at)
  return at + bytes.length
}

/**
 * Encodes field lines with the static table and literals only (no dynamic table, so the
 * prefix is two zero bytes). Names must already be lower-case. Credentials go out with the
 * N bit so that no later hop indexes them.
 */
export function encodeFieldSection (fields: readonly FieldLine[]): Buffer {
  // Two passes: sizes first (each field's plan), then one exact allocation.
  const plans: { kind: 0 | 1 | 2, index: number, name: Buffer | null, value: Buffer | null, nameHuffman: boolean, valueHuffman: boolean, never: boolean }[] = []
  let total = 2
  for (const [name, value] of fields) {
    const never = SENSITIVE_FIELDS.has(name)
    const exact = never ? undefined : STATIC_FIELD_INDEX.get(`${name}\0${value}`)
    if (exact !== undefined) {
      plans.push({ kind: 0, index: exact, name: null, value: null, nameHuffman: false, valueHuffman: false, never })
      total += prefixedIntSize(6, exact)
      continue
    }
    const valueBytes = Buffer.from(value, 'latin1')
    const valuePlan = stringSize(valueBytes, 7)
    const nameIndex = STATIC_NAME_INDEX.get(name)
    if (nameIndex !== undefined) {
      plans.push({ kind: 1, index: nameIndex, name: null, value: valueBytes, nameHuffman: false, valueHuffman: valuePlan.huffman, never })
      total += prefixedIntSize(4, nameIndex) + valuePlan.size
      continue
    }
    const nameBytes = Buffer.from(name, 'latin1')
    const namePlan = stringSize(nameBytes, 3)
    plans.push({ kind: 2, index: 0, name: nameBytes, value: valueBytes, nameHuffman: namePlan.huffman, valueHuffman: valuePlan.huffman, never })
    total += namePlan.size + valuePlan.size
  }
  const out = Buffer.allocUnsafe(total)
  out[0] = 0
  out[1] = 0
  let at = 2
  for (const plan of plans) {
    switch (plan.kind) {
      case 0:
        at = writePrefixedInt(out, at, 6, 0xc0, plan.index)
        break
      case 1:
        at = writePrefixedInt(out, at, 4, 0x50 | (plan.never ? 0x20 : 0), plan.index)
        at = writeString(out, at, plan.value as Buffer, 7, 0, plan.valueHuffman)
        break
      case 2:
        at = writeString(out, at, plan.name as Buffer, 3, 0x20 | (plan.never ? 0x10 : 0), plan.nameHuffman)
        at = writeString(out, at, plan.value as Buffer, 7, 0, plan.valueHuffman)
        break
    }
  }
  return out
}

/**
 * The decoded size of fields as RFC 9114 §4.2.2 counts it, to check against the peer's
 * SETTINGS_MAX_FIELD_SECTION_SIZE before sending.
 */
export function fieldSectionSize (fields: readonly FieldLine[]): number {
  let size = 0
  for (const [name, value] of fields) size += name.length + value.length + FIELD_OVERHEAD
  return size
}

export type QpackStreamOutcome =
  | { readonly ok: true }
  | { readonly ok: false, readonly error: 'qpack_encoder_stream' | 'qpack_decoder_stream', readonly detail: string }

const QPACK_OK: QpackStreamOutcome = Object.freeze({ ok: true })

/**
 * Follows the peer's QPACK encoder or decoder stream (RFC 9204 §4.3, §4.4) when neither side
 * has a dynamic table. Valid instructions are then only a Set Dynamic Table Capacity of 0
 * (encoder stream) and Stream Cancellation (decoder stream); each is one prefixed integer,
 * so the parser keeps at most one partial integer between chunks.
 */
export class QpackStreamReader {
  readonly #encoderStream: boolean
  /** The instruction's first byte and continuation bytes seen so far (0 = between instructions). */
  #first = -1
  #continuations = 0
  #value = 0
  #scale = 1

  /** encoderStream: the peer's encoder stream (type 0x02); else its decoder stream (type 0x03). */
  constructor (encoderStream: boolean) {
    this.#encoderStream = encoderStream
  }

  push (chunk: Uint8Array): QpackStreamOutcome {
    for (let i = 0; i < chunk.length; i++) {
      const byte = chunk[i] as number
      if (this.#first < 0) {
        const check = this.#instruction(byte)
        if (!check.ok) return check
        const prefix = this.#prefixBits(byte)
        const mask = (1 << prefix) - 1
        if ((byte & mask) < mask) {
          const done = this.#complete(byte & mask)
          if (!done.ok) return done
          continue
        }
        this.#first = byte
        this.#value = mask
        this.#scale = 1
        this.#continuations = 0
        continue
      }
      this.#value += (byte & 0x7f) * this.#scale
      this.#scale *= 128
      if ((byte & 0x80) === 0) {
        this.#first = -1
        const done = this.#complete(this.#value)
        if (!done.ok) return done
      } else if (++this.#continuations >= MAX_CONTINUATION_BYTES) {
        return this.#fail('instruction integer too long')
      }
    }
    return QPACK_OK
  }

  #prefixBits (first: number): number {
    if (this.#encoderStream) return 5 // only Set Dynamic Table Capacity gets this far
    return (first & 0x80) !== 0 ? 7 : 6
  }

  /** Refuses, from its first byte, any instruction that needs a dynamic table. */
  #instruction (first: number): QpackStreamOutcome {
    if (this.#encoderStream) {
      if ((first & 0xe0) === 0x20) return QPACK_OK // Set Dynamic Table Capacity
      return this.#fail('insert or duplicate instruction, but the dynamic table capacity is 0')
    }
    if ((first & 0x80) !== 0) return this.#fail('section acknowledgment, but no field section used the dynamic table')
    if ((first & 0x40) !== 0) return QPACK_OK // Stream Cancellation
    return this.#fail('insert count increment, but nothing was inserted')
  }

  #complete (value: number): QpackStreamOutcome {
    if (this.#encoderStream && value > 0) return this.#fail(`dynamic table capacity ${value} exceeds the advertised maximum 0`)
    return QPACK_OK
  }

  #fail (detail: string): QpackStreamOutcome {
    return { ok: false, error: this.#encoderStream ? 'qpack_encoder_stream' : 'qpack_decoder_stream', detail }
  }
}
