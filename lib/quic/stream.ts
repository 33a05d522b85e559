/**
 * One QUIC stream of the engine, in TypeScript mode: bytes are pulled with read() and pushed with
 * write(), both bounded by the addon's flow control (nothing here buffers):
 *
 * - read(max) consumes bytes the addon holds and only then returns the credit to the peer, so
 *   a reader that stops reading stops the sender after one window;
 * - write(data) returns how many bytes the addon took (it holds at most the stream's send
 *   limit unacknowledged); the rest waits for handler.onWritable;
 * - splice(other) hands both directions to the addon, including bytes received but not yet
 *   read, and the stream leaves TypeScript mode for good (onSpliceDone reports its end).
 *
 * Events reach the handler once per engine turn: onReadable when bytes or FIN arrive on a stream
 * that was read to empty (read until read() returns null, then it fires again), onWritable,
 * onReset / onStopSending with the peer's code, onClose when the addon has forgotten the stream.
 */
import { READ_FIN, READ_GONE, READ_NONE, READ_RESET, type NativeQuic } from './native.ts'

/** What a stream needs of its connection. */
export interface StreamHost {
  readonly id: number
  readonly native: NativeQuic
}

export interface QuicStreamHandler {
  onReadable? (stream: QuicStream): void
  onWritable? (stream: QuicStream): void
  /** The peer reset its sending side with code; bytes not yet read are gone. */
  onReset? (stream: QuicStream, code: number): void
  /** The peer does not want more bytes (the addon answered with RESET_STREAM, same code). */
  onStopSending? (stream: QuicStream, code: number): void
  /** The stream is finished (both directions done, or its connection closed). */
  onClose? (stream: QuicStream): void
  /** A spliced stream ended; bytes = what it received and passed to its partner. */
  onSpliceDone? (stream: QuicStream, bytes: number): void
}

/** RFC 9000 §2.1: bit 0 = initiated by the server, bit 1 = unidirectional. */
function isUniStream (id: number): boolean {
  return (id & 0x02) !== 0
}

export function isServerInitiated (id: number): boolean {
  return (id & 0x01) !== 0
}

export class QuicStream {
  readonly id: number
  readonly bidi: boolean
  /** Opened by this endpoint. */
  readonly local: boolean
  readonly #host: StreamHost
  handler: QuicStreamHandler | null = null
  /** FIN read: every byte of the peer's side was read. */
  readEnded = false
  /** FIN sent (end()) or the write side reset. */
  writeEnded = false
  /** RESET_STREAM code the peer sent, or null. */
  resetCode: number | null = null
  /** STOP_SENDING code the peer sent, or null. */
  stopCode: number | null = null
  spliced = false
  closed = false
  /** For whoever owns the stream (a relay's bookkeeping); the engine never reads it. */
  data: unknown = null

  constructor (host: StreamHost, id: number, local: boolean) {
    this.#host = host
    this.id = id
    this.local = local
    this.bidi = !isUniStream(id)
  }

  /** The stream has a receiving side (bidi, or a peer's unidirectional stream). */
  get readable (): boolean {
    return this.bidi || !this.local
  }

  /** The stream has a sending side (bidi, or our unidirectional stream). */
  get writable (): boolean {
    return this.bidi || this.local
  }

  get connectionId (): number {
    return this.#host.id
  }

  /**
   * Up to max bytes received (consumed: their credit goes back to the peer), or null when
   * nothing is there now; readEnded is set once FIN has been read.
   */
  read (max = 65536): Buffer | null {
    if (this.closed || this.spliced || this.readEnded) return null
    const r = this.#host.native.streamRead(this.#host.id, this.id, max)
    if (typeof r !== 'number') return r
    switch (r) {
      case READ_NONE:
        return null
      case READ_FIN:
        this.readEnded = true
        return null
      case READ_RESET:
      case READ_GONE:
        return null
      default:
        return null
    }
  }

  /** Bytes of data the addon took now (the rest: after onWritable); -1 when the stream cannot be written. */
  write (data: Uint8Array): number {
    if (this.closed || this.spliced || this.writeEnded) return -1
    return this.#host.native.streamWrite(this.#host.id, this.id, data, false)
  }

  /**
   * Writes data (if any) and FIN, all or nothing: false means none of data was taken and no FIN
   * was sent; call end(data) again after onWritable. (Data is taken whole when nothing is
   * queued, so a buffer larger than the send limit does not wait forever.)
   */
  end (data?: Uint8Array): boolean {
    if (this.closed || this.spliced || this.writeEnded) return false
    const bytes = data ?? EMPTY
    const n = this.#host.native.streamWrite(this.#host.id, this.id, bytes, true)
    if (n === bytes.length) {
      this.writeEnded = true
      return true
    }
    return false
  }

  /** RESET_STREAM with code on our sending side. */
  reset (code = 0): void {
    if (this.closed || this.spliced) return
    this.writeEnded = true
    this.#host.native.streamReset(this.#host.id, this.id, code)
  }

  /** STOP_SENDING with code on our receiving side (bytes not read are dropped). */
  stopSending (code = 0): void {
    if (this.closed || this.spliced) return
    this.readEnded = true
    this.#host.native.streamStop(this.#host.id, this.id, code)
  }

  /**
   * Joins this stream to other (a stream of another connection) inside the addon, both
   * directions; bytes already received and not read go first. False when either side is
   * already spliced or gone.
   */
  splice (other: QuicStream): boolean {
    if (this.closed || other.closed || this.spliced || other.spliced) return false
    const ok = this.#host.native.splice(this.#host.id, this.id, other.#host.id, other.id)
    if (ok) {
      this.spliced = true
      other.spliced = true
    }
    return ok
  }
}

const EMPTY = new Uint8Array(0)
