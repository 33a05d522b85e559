/**
 * A request body read before its pod connection is taken (forwarder.ts), held as one
 * contiguous copy, never as the list of reads it came in. A client may send its body a byte per
 * TCP segment: kept as they came, 64 KiB would be 65,536 Buffer objects of about 100 bytes of
 * heap each, 6 MiB held for 64 KiB of body. The first read is kept as it is (most bodies arrive
 * in one); from the second on, bytes are copied into storage that grows by doubling, never
 * past the limit plus the read that crosses it.
 */

const EMPTY = Buffer.alloc(0)

export class BodyBuffer {
  /** The first read as received, or storage this buffer allocated (owned). */
  #storage: Buffer = EMPTY
  #owned = false
  length = 0

  /** Adds a read; limit: the buffer's size, beyond which the caller stops reading. */
  append (chunk: Buffer, limit: number): void {
    const needed = this.length + chunk.length
    if (this.length === 0 && !this.#owned) {
      this.#storage = chunk
    } else if (this.#owned && needed <= this.#storage.length) {
      chunk.copy(this.#storage, this.length)
    } else {
      // Its own backing store, sized as asked: a pool slab would tie 8 KiB of others to this body.
      const grown = Buffer.allocUnsafeSlow(Math.max(needed, Math.min(2 * needed, limit)))
      this.#storage.copy(grown, 0, 0, this.length)
      chunk.copy(grown, this.length)
      this.#storage = grown
      this.#owned = true
    }
    this.length = needed
  }

  /** The bytes held (a view, not a copy). */
  bytes (): Buffer {
    return this.length === this.#storage.length ? this.#storage : this.#storage.subarray(0, this.length)
  }
}
