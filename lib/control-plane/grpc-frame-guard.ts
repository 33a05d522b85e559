/**
 * Follows the gRPC length-prefixed framing of a request body chunk by chunk, without
 * copying or decoding messages, to enforce the message size limit and catch frames that a
 * gRPC server would reject anyway (compressed flag without grpc-encoding) before they cost an
 * upstream round trip. Cost per chunk: a few integer operations per frame boundary.
 */

export type FrameViolation =
  | { readonly kind: 'too_large', readonly size: number }
  | { readonly kind: 'compressed_without_encoding' }

export class GrpcFrameGuard {
  readonly #maxMessageBytes: number
  readonly #compressionAllowed: boolean
  /** Bytes of the current 5-byte prefix seen so far (0 when between frames). */
  #headerSeen = 0
  readonly #header = Buffer.alloc(5)
  /** Message bytes still to come for the current frame. */
  #bodyLeft = 0

  constructor (maxMessageBytes: number, compressionAllowed: boolean) {
    this.#maxMessageBytes = maxMessageBytes
    this.#compressionAllowed = compressionAllowed
  }

  /** True when the body ended on a frame boundary (no partial message pending). */
  get atBoundary (): boolean {
    return this.#headerSeen === 0 && this.#bodyLeft === 0
  }

  /** Checks one chunk; returns the first violation in it, or null. */
  check (chunk: Uint8Array): FrameViolation | null {
    let i = 0
    const n = chunk.length
    while (i < n) {
      if (this.#bodyLeft > 0) {
        const take = Math.min(this.#bodyLeft, n - i)
        this.#bodyLeft -= take
        i += take
        continue
      }
      if (this.#headerSeen === 0 && n - i >= 5) {
        // Fast path: the whole prefix is in this chunk.
        const violation = this.#onHeader(chunk[i] as number, ((chunk[i + 1] as number) * 0x1000000) + (((chunk[i + 2] as number) << 16) | ((chunk[i + 3] as number) << 8) | (chunk[i + 4] as number)))
        if (violation !== null) return violation
        i += 5
        continue
      }
      this.#header[this.#headerSeen++] = chunk[i++] as number
      if (this.#headerSeen === 5) {
        this.#headerSeen = 0
        const violation = this.#onHeader(this.#header[0] as number, this.#header.readUInt32BE(1))
        if (violation !== null) return violation
      }
    }
    return null
  }

  #onHeader (flags: number, length: number): FrameViolation | null {
    if ((flags & 1) === 1 && !this.#compressionAllowed) return { kind: 'compressed_without_encoding' }
    if (length > this.#maxMessageBytes) return { kind: 'too_large', size: length }
    this.#bodyLeft = length
    return null
  }
}
