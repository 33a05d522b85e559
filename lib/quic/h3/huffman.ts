/**
 * The Huffman code of HPACK (RFC 7541 Appendix B), which QPACK uses unchanged (RFC 9204
 * §4.1.2), for string literals in field sections.
 *
 * The code is canonical: sorting the 257 symbols by (code length, symbol) and counting up
 * gives exactly the codes of Appendix B (a unit test checks known rows and the RFC's
 * examples). So the table here is only each symbol's code length, and the codes are derived
 * at module load. Decoding walks bits against per-length ranges (the canonical decoding
 * method): at most 30 comparisons per symbol, on header strings bounded by the field
 * section limit, with no 4 KiB state table.
 *
 * Decoding enforces §5.2: padding longer than 7 bits, padding that is not the EOS prefix
 * (all ones) and an EOS symbol inside the string are errors.
 */

/** Code length in bits of symbols 0..255 and EOS (256), RFC 7541 Appendix B. */
const CODE_LENGTHS: readonly number[] = [
  13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, // 0x00
  28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, // 0x10
  6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, // ' ' .. '/'
  5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, // '0' .. '?'
  13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, // '@' .. 'O'
  7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, // 'P' .. '_'
  15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, // '`' .. 'o'
  6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, // 'p' .. 0x7f
  20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, // 0x80
  24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, // 0x90
  22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, // 0xa0
  21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, // 0xb0
  26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, // 0xc0
  19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, // 0xd0
  20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, // 0xe0
  26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, // 0xf0
  30, // EOS
]

export const EOS = 256
const MAX_LENGTH = 30

/** Canonical code of each symbol (fits 30 bits, so plain numbers). */
export const HUFFMAN_CODES: readonly number[] = new Array<number>(257)
/** Per code length L: the first code of that length, how many there are, and where they start in SORTED. */
const FIRST_CODE = new Array<number>(MAX_LENGTH + 1).fill(0)
const COUNT = new Array<number>(MAX_LENGTH + 1).fill(0)
const START = new Array<number>(MAX_LENGTH + 1).fill(0)
/** Symbols sorted by (length, symbol). */
const SORTED: number[] = []

{
  const symbols = [...CODE_LENGTHS.keys()].sort((a, b) => (CODE_LENGTHS[a] as number) - (CODE_LENGTHS[b] as number) || a - b)
  let code = 0
  let length = CODE_LENGTHS[symbols[0] as number] as number
  for (const symbol of symbols) {
    const l = CODE_LENGTHS[symbol] as number
    code *= 2 ** (l - length)
    length = l
    if (COUNT[l] === 0) {
      FIRST_CODE[l] = code
      START[l] = SORTED.length
    }
    COUNT[l] = (COUNT[l] as number) + 1;
    (HUFFMAN_CODES as number[])[symbol] = code
    SORTED.push(symbol)
    code++
  }
}

/** Bytes the Huffman encoding of src takes. */
export function huffmanEncodedLength (src: Uint8Array): number {
  let bits = 0
  for (let i = 0; i < src.length; i++) bits += CODE_LENGTHS[src[i] as number] as number
  return Math.ceil(bits / 8)
}

/** Writes the Huffman encoding of src at out[offset] (room for huffmanEncodedLength(src)) and returns the offset after it. */
export function huffmanEncodeInto (src: Uint8Array, out: Uint8Array, offset: number): number {
  // acc holds fewer than 8 pending bits between symbols; adding a ≤ 30-bit code keeps it
  // under 2^38, exact in a double.
  let acc = 0
  let bits = 0
  let at = offset
  for (let i = 0; i < src.length; i++) {
    const symbol = src[i] as number
    const length = CODE_LENGTHS[symbol] as number
    acc = acc * 2 ** length + (HUFFMAN_CODES[symbol] as number)
    bits += length
    while (bits >= 8) {
      bits -= 8
      const scale = 2 ** bits
      const byte = Math.floor(acc / scale)
      out[at++] = byte
      acc -= byte * scale
    }
  }
  if (bits > 0) out[at++] = ((acc << (8 - bits)) | (0xff >> bits)) & 0xff // pad with the EOS prefix
  return at
}

export function huffmanEncode (src: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(huffmanEncodedLength(src))
  huffmanEncodeInto(src, out, 0)
  return out
}

export type HuffmanDecode =
  | { readonly ok: true, readonly value: Buffer }
  | { readonly ok: false, readonly reason: 'eos_in_string' | 'padding_too_long' | 'padding_not_eos' | 'too_long' }

/**
 * Decodes src[start..end). maxLength bounds the output (Huffman expands by up to 8/5), so a
 * peer cannot make one string cost more than the caller allows.
 */
export function huffmanDecode (src: Uint8Array, start: number, end: number, maxLength: number): HuffmanDecode {
  // The output is at most 8/5 of the input (the shortest code is 5 bits).
  const out = Buffer.allocUnsafe(Math.min(maxLength, Math.floor(((end - start) * 8) / 5)))
  let written = 0
  let code = 0
  let length = 0
  for (let i = start; i < end; i++) {
    const byte = src[i] as number
    for (let bit = 7; bit >= 0; bit--) {
      code = code * 2 + ((byte >> bit) & 1)
      length++
      const offset = code - (FIRST_CODE[length] as number)
      if (length >= 5 && offset >= 0 && offset < (COUNT[length] as number)) {
        const symbol = SORTED[(START[length] as number) + offset] as number
        if (symbol === EOS) return { ok: false, reason: 'eos_in_string' }
        if (written >= out.length) return { ok: false, reason: 'too_long' }
        out[written++] = symbol
        code = 0
        length = 0
      } else if (length >= MAX_LENGTH) {
        // Unreachable for a complete code (every 30-bit pattern decodes); kept as a guard.
        return { ok: false, reason: 'eos_in_string' }
      }
    }
  }
  if (length > 7) return { ok: false, reason: 'padding_too_long' }
  if (code !== (1 << length) - 1) return { ok: false, reason: 'padding_not_eos' }
  return { ok: true, value: out.subarray(0, written) }
}
