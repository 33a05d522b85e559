/**
 * One QUIC stream as the connection tracks it. quiche answers "which streams are readable"
 * only through an iterator that costs ~12 µs per call on this binding (measured, issue 5), so
 * the connection keeps its own table of streams and asks quiche about each one directly
 * (streamRecv / streamCapacity, ~0.2 µs each).
 *
 * A handler owns the stream's I/O: the Duplex of stream.ts, or the relay's splice, which
 * moves bytes from one connection's stream into another's without Node streams in between.
 */

/** Stream IDs (RFC 9000 §2.1): bit 0 = initiated by the server, bit 1 = unidirectional. */
export function isUniStream (id: number): boolean {
  return (id & 0x02) !== 0
}

export function isServerInitiated (id: number): boolean {
  return (id & 0x01) !== 0
}

export interface StreamHandler {
  /** The read side may have data, a FIN or a reset (read with QuicConnection.readStream). */
  onReadable (slot: StreamSlot): void
  /** A write that was blocked on flow control or congestion may proceed. */
  onWritable (slot: StreamSlot): void
  /** The peer sent STOP_SENDING: the write side is closed (slot.stopCode). */
  onStopped (slot: StreamSlot): void
  /** The connection closed while the stream was open. */
  onAbort (slot: StreamSlot, reason: string): void
}

export class StreamSlot {
  readonly id: number
  readonly bidi: boolean
  /** Opened by this endpoint. */
  readonly local: boolean
  handler: StreamHandler | null = null
  /** The read side can still deliver data, a FIN or a reset. */
  readOpen: boolean
  /** The write side can still send data or a FIN. */
  writeOpen: boolean
  /** The handler wants onReadable calls (false while its consumer applies backpressure). */
  wantRead = false
  /** The last write was cut short; onWritable follows when capacity returns. */
  writeBlocked = false
  finReceived = false
  /** RESET_STREAM code received from the peer, or -1. */
  resetCode = -1
  /** STOP_SENDING code received from the peer, or -1. */
  stopCode = -1
  /** Bytes delivered to the handler / accepted from it. */
  bytesRead = 0
  bytesWritten = 0

  constructor (id: number, local: boolean) {
    this.id = id
    this.local = local
    this.bidi = !isUniStream(id)
    // A unidirectional stream has one side: the opener writes, the peer reads.
    this.readOpen = this.bidi || !local
    this.writeOpen = this.bidi || local
  }
}
