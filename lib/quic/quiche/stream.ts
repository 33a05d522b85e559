/**
 * A QUIC stream as a Node Duplex. Backpressure goes both ways without a queue of our own:
 * - read: when push() returns false the stream stops reading from quiche until _read(); the
 *   data stays in quiche, which stops extending the peer's flow-control window;
 * - write: _write hands the chunk to quiche; what quiche cannot take now (flow control,
 *   congestion) is held as the one pending chunk and its callback waits, so Node's writable
 *   buffer (highWaterMark) is the only buffer.
 *
 * A RESET_STREAM from the peer destroys the stream with a QuicStreamError (kind 'reset',
 * code); a STOP_SENDING does the same with kind 'stop_sending'. destroy() without an error
 * resets both directions with code 0; resetWrite(code) and stopSending(code) act on one
 * direction with the given code.
 */
import { Duplex } from 'node:stream'
import type { QuicConnection } from './connection.ts'
import type { StreamHandler, StreamSlot } from './stream-slot.ts'

const READ_NONE = -1
const READ_RESET = -2
const WRITE_STOPPED = -2
const EMPTY = Buffer.alloc(0)
const HIGH_WATER_MARK = 256 * 1024

export type QuicStreamErrorKind = 'reset' | 'stop_sending' | 'connection_closed'

export class QuicStreamError extends Error {
  readonly kind: QuicStreamErrorKind
  /** The application error code the peer sent (0 for connection_closed). */
  readonly code: number

  constructor (kind: QuicStreamErrorKind, code: number, message?: string) {
    super(message ?? (kind === 'reset' ? `stream reset by peer with code ${code}` : kind === 'stop_sending' ? `peer stopped reading the stream with code ${code}` : 'connection closed'))
    this.name = 'QuicStreamError'
    this.kind = kind
    this.code = code
  }
}

type Callback = (err?: Error | null) => void

export class QuicStream extends Duplex implements StreamHandler {
  readonly id: number
  readonly #conn: QuicConnection
  readonly #slot: StreamSlot
  #pending: Buffer | null = null
  #pendingCallback: Callback | null = null

  constructor (conn: QuicConnection, slot: StreamSlot) {
    super({ allowHalfOpen: true, readableHighWaterMark: HIGH_WATER_MARK, writableHighWaterMark: HIGH_WATER_MARK })
    this.#conn = conn
    this.#slot = slot
    this.id = slot.id
    slot.handler = this
    if (!slot.readOpen) this.push(null)
  }

  get bidi (): boolean {
    return this.#slot.bidi
  }

  /** Opened by this endpoint. */
  get local (): boolean {
    return this.#slot.local
  }

  get connection (): QuicConnection {
    return this.#conn
  }

  /** RESET_STREAM on the write side with code; later writes fail, the read side goes on. */
  resetWrite (code: number): void {
    this.#conn.resetStream(this.#slot, code)
    this.#failPending(new QuicStreamError('reset', code, `stream write side reset locally with code ${code}`))
  }

  /** STOP_SENDING on the read side with code; the readable side ends here. */
  stopSending (code: number): void {
    if (!this.#slot.readOpen) return
    this.#conn.stopSending(this.#slot, code)
    this.push(null)
  }

  override _read (): void {
    this.#conn.requestRead(this.#slot)
  }

  override _write (chunk: Buffer, _encoding: BufferEncoding, callback: Callback): void {
    const slot = this.#slot
    const n = this.#conn.writeStream(slot, chunk, false)
    if (n === WRITE_STOPPED) {
      callback(this.#writeError())
      return
    }
    if (n === chunk.length) {
      callback()
      return
    }
    this.#pending = n === 0 ? chunk : chunk.subarray(n)
    this.#pendingCallback = callback
  }

  override _final (callback: Callback): void {
    const slot = this.#slot
    if (!slot.writeOpen) {
      // A peer's unidirectional stream has no write side to finish; a stopped one has an error.
      callback(slot.stopCode >= 0 ? this.#writeError() : null)
      return
    }
    if (this.#conn.writeStream(slot, EMPTY, true) === WRITE_STOPPED) callback(this.#writeError())
    else callback()
  }

  override _destroy (err: Error | null, callback: (error?: Error | null) => void): void {
    const code = err instanceof QuicStreamError ? err.code : 0
    this.#conn.resetStream(this.#slot, code)
    this.#conn.stopSending(this.#slot, code)
    this.#slot.handler = null
    // An Error (with its stack) only when a write is actually waiting: autoDestroy runs this
    // for every stream that ended normally.
    if (this.#pendingCallback !== null) this.#failPending(err ?? new QuicStreamError('reset', code, 'stream destroyed'))
    callback(err)
  }

  // ---- StreamHandler (called by the connection within a driver turn) ----

  onReadable (slot: StreamSlot): void {
    const conn = this.#conn
    const scratch = conn.scratch
    for (;;) {
      const n = conn.readStream(slot, scratch)
      if (n === READ_NONE) return
      if (n === READ_RESET) {
        this.destroy(new QuicStreamError('reset', slot.resetCode))
        return
      }
      if (n > 0) {
        const chunk = Buffer.allocUnsafe(n)
        scratch.copy(chunk, 0, 0, n)
        if (!this.push(chunk)) slot.wantRead = false
      }
      if (slot.finReceived) {
        this.push(null)
        return
      }
      if (!slot.wantRead) return
    }
  }

  onWritable (slot: StreamSlot): void {
    const pending = this.#pending
    if (pending === null) return
    const n = this.#conn.writeStream(slot, pending, false)
    if (n === WRITE_STOPPED) {
      this.#failPending(this.#writeError())
      return
    }
    if (n < pending.length) {
      this.#pending = pending.subarray(n)
      return
    }
    const callback = this.#pendingCallback
    this.#pending = null
    this.#pendingCallback = null
    callback?.()
  }

  onStopped (slot: StreamSlot): void {
    const err = new QuicStreamError('stop_sending', slot.stopCode)
    if (this.#pendingCallback !== null) this.#failPending(err)
    else this.destroy(err)
  }

  onAbort (_slot: StreamSlot, reason: string): void {
    this.destroy(new QuicStreamError('connection_closed', 0, reason))
  }

  #writeError (): QuicStreamError {
    return new QuicStreamError('stop_sending', Math.max(0, this.#slot.stopCode))
  }

  #failPending (err: Error): void {
    const callback = this.#pendingCallback
    this.#pending = null
    this.#pendingCallback = null
    callback?.(err)
  }
}
