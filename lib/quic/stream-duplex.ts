/**
 * A QuicStream as a Node Duplex, for code that wants pipes (test fixtures, the demo). The relay
 * and HTTP/3 use QuicStream directly. Backpressure is the engine's: _read pulls only while Node
 * wants more (unread bytes stay in the addon, which then holds back the peer); _write hands the
 * chunk to the addon and waits for onWritable with whatever it did not take.
 *
 * The peer's RESET_STREAM destroys the Duplex with a QuicStreamError (kind 'reset', code), its
 * STOP_SENDING with kind 'stop_sending'; the connection closing with kind 'connection_closed'.
 * destroy() without an error resets and stops the stream with code 0; resetWrite(code) and
 * stopSending(code) act on one direction.
 */
import { Duplex } from 'node:stream'
import type { QuicStream, QuicStreamHandler } from './stream.ts'

export type QuicStreamErrorKind = 'reset' | 'stop_sending' | 'connection_closed'

export class QuicStreamError extends Error {
  readonly kind: QuicStreamErrorKind
  readonly code: number

  constructor (kind: QuicStreamErrorKind, code: number, message?: string) {
    super(message ?? (kind === 'reset' ? `stream reset by peer with code ${code}` : kind === 'stop_sending' ? `peer stopped reading the stream with code ${code}` : 'connection closed'))
    this.name = 'QuicStreamError'
    this.kind = kind
    this.code = code
  }
}

type Callback = (err?: Error | null) => void

const HIGH_WATER_MARK = 256 * 1024

export class QuicDuplex extends Duplex implements QuicStreamHandler {
  readonly stream: QuicStream
  #wantRead = false
  #pending: Uint8Array | null = null
  #pendingFin = false
  #pendingCallback: Callback | null = null

  constructor (stream: QuicStream) {
    super({ allowHalfOpen: true, readableHighWaterMark: HIGH_WATER_MARK, writableHighWaterMark: HIGH_WATER_MARK })
    this.stream = stream
    stream.handler = this
    if (!stream.readable) this.push(null)
  }

  get id (): number {
    return this.stream.id
  }

  get bidi (): boolean {
    return this.stream.bidi
  }

  /** RESET_STREAM with code on the sending side; the reading side goes on. */
  resetWrite (code: number): void {
    this.stream.reset(code)
    this.#failPending(new QuicStreamError('reset', code, `stream write side reset locally with code ${code}`))
  }

  /** STOP_SENDING with code; the readable side ends here. */
  stopSending (code: number): void {
    if (this.stream.readEnded) return
    this.stream.stopSending(code)
    this.push(null)
  }

  override _read (): void {
    this.#wantRead = true
    this.#pull()
  }

  override _write (chunk: Buffer, _encoding: BufferEncoding, callback: Callback): void {
    this.#send(chunk, false, callback)
  }

  override _final (callback: Callback): void {
    if (!this.stream.writable) {
      callback()
      return
    }
    this.#send(new Uint8Array(0), true, callback)
  }

  override _destroy (err: Error | null, callback: (error?: Error | null) => void): void {
    const code = err instanceof QuicStreamError ? err.code : 0
    if (!this.stream.closed) {
      if (!this.stream.writeEnded) this.stream.reset(code)
      if (!this.stream.readEnded) this.stream.stopSending(code)
    }
    this.stream.handler = null
    if (this.#pendingCallback !== null) this.#failPending(err ?? new QuicStreamError('reset', code, 'stream destroyed'))
    callback(err)
  }

  // ---- QuicStreamHandler ----

  onReadable (): void {
    if (this.#wantRead) this.#pull()
  }

  onWritable (): void {
    const pending = this.#pending
    if (pending === null) return
    this.#send(pending, this.#pendingFin, this.#pendingCallback ?? noop)
  }

  onReset (_stream: QuicStream, code: number): void {
    this.destroy(new QuicStreamError('reset', code))
  }

  onStopSending (_stream: QuicStream, code: number): void {
    const err = new QuicStreamError('stop_sending', code)
    if (this.#pendingCallback !== null) this.#failPending(err)
    else this.destroy(err)
  }

  onClose (stream: QuicStream): void {
    if (this.destroyed) return
    // A stream that finished normally has ended both sides already; anything else died with
    // its connection.
    if (!(stream.readEnded || !stream.readable) || this.#pendingCallback !== null) this.destroy(new QuicStreamError('connection_closed', 0))
  }

  #pull (): void {
    const stream = this.stream
    while (this.#wantRead) {
      const chunk = stream.read(65536)
      if (chunk === null) {
        if (stream.readEnded) {
          this.#wantRead = false
          this.push(null)
        }
        return
      }
      if (!this.push(chunk)) this.#wantRead = false
    }
  }

  #send (data: Uint8Array, fin: boolean, callback: Callback): void {
    const stream = this.stream
    if (stream.stopCode !== null) {
      this.#pending = null
      this.#pendingCallback = null
      callback(new QuicStreamError('stop_sending', stream.stopCode))
      return
    }
    const n = data.length > 0 ? stream.write(data) : 0
    if (n < 0 || (n === data.length && fin && !stream.end())) {
      this.#pending = null
      this.#pendingCallback = null
      callback(new QuicStreamError(stream.stopCode !== null ? 'stop_sending' : 'connection_closed', stream.stopCode ?? 0))
      return
    }
    if (n === data.length) {
      this.#pending = null
      this.#pendingCallback = null
      callback()
      return
    }
    this.#pending = data.subarray(n)
    this.#pendingFin = fin
    this.#pendingCallback = callback
  }

  #failPending (err: Error): void {
    const callback = this.#pendingCallback
    this.#pending = null
    this.#pendingCallback = null
    callback?.(err)
  }
}

function noop (): void {}
