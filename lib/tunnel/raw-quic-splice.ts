/**
 * One relayed stream: the same stream ID on the client leg and on the Stargate leg, bytes
 * moved from one connection's quiche buffers into the other's without Node streams or
 * copies beyond the driver's scratch buffer.
 *
 * Backpressure is quiche's own: a source is read only as far as the destination can take
 * now (streamCapacity); when it is full the source stops being read, its flow-control window
 * is not extended, and its peer is held back. Nothing is buffered here.
 *
 * Signals cross over with their codes (SPEC §7): FIN with the last bytes, RESET_STREAM from
 * a source's peer becomes RESET_STREAM to the destination's peer, STOP_SENDING from a
 * destination's peer becomes STOP_SENDING to the source's peer.
 */
import { READ_NONE, READ_RESET, WRITE_STOPPED, type QuicConnection } from '../quic/quiche/connection.ts'
import type { StreamHandler, StreamSlot } from '../quic/quiche/stream-slot.ts'

/** Byte totals a splice adds to (the relay's, read by metrics). */
export interface ByteCounter {
  clientToStargate: number
  stargateToClient: number
}

export class StreamSplice implements StreamHandler {
  readonly #client: QuicConnection
  readonly #clientSlot: StreamSlot
  readonly #upstream: QuicConnection
  readonly #upstreamSlot: StreamSlot
  readonly #bytes: ByteCounter

  constructor (client: QuicConnection, clientSlot: StreamSlot, upstream: QuicConnection, upstreamSlot: StreamSlot, bytes: ByteCounter) {
    this.#client = client
    this.#clientSlot = clientSlot
    this.#upstream = upstream
    this.#upstreamSlot = upstreamSlot
    this.#bytes = bytes
    clientSlot.handler = this
    upstreamSlot.handler = this
    // Whichever side can send starts being read now.
    if (clientSlot.readOpen) client.requestRead(clientSlot)
    if (upstreamSlot.readOpen) upstream.requestRead(upstreamSlot)
  }

  onReadable (slot: StreamSlot): void {
    if (slot === this.#clientSlot) this.#bytes.clientToStargate += pump(this.#client, slot, this.#upstream, this.#upstreamSlot)
    else this.#bytes.stargateToClient += pump(this.#upstream, slot, this.#client, this.#clientSlot)
  }

  onWritable (slot: StreamSlot): void {
    // The destination has room again: resume reading the source that feeds it.
    if (slot === this.#upstreamSlot) resume(this.#client, this.#clientSlot)
    else resume(this.#upstream, this.#upstreamSlot)
  }

  onStopped (slot: StreamSlot): void {
    const code = Math.max(0, slot.stopCode)
    if (slot === this.#upstreamSlot) this.#client.stopSending(this.#clientSlot, code)
    else this.#upstream.stopSending(this.#upstreamSlot, code)
  }

  onAbort (): void {
    // Connection-level close is relayed by the tunnel.
  }
}

function resume (conn: QuicConnection, slot: StreamSlot): void {
  if (slot.readOpen && !slot.wantRead) conn.requestRead(slot)
}

/** Moves what src's stream holds into dst's stream, as far as dst takes it; returns the bytes moved. */
function pump (src: QuicConnection, s: StreamSlot, dst: QuicConnection, d: StreamSlot): number {
  const scratch = src.scratch
  let moved = 0
  for (;;) {
    const cap = dst.streamCapacity(d)
    if (cap === WRITE_STOPPED) {
      // The destination's reader sent STOP_SENDING (or the stream is gone): pass it back.
      src.stopSending(s, Math.max(0, d.stopCode))
      return moved
    }
    if (cap === 0) {
      // Full: stop reading the source until dst reports capacity (onWritable).
      d.writeBlocked = true
      s.wantRead = false
      return moved
    }
    const n = src.readStream(s, cap < scratch.length ? scratch.subarray(0, cap) : scratch)
    if (n === READ_NONE) return moved
    if (n === READ_RESET) {
      dst.resetStream(d, Math.max(0, s.resetCode))
      return moved
    }
    const fin = s.finReceived
    const written = dst.writeStream(d, n === scratch.length ? scratch : scratch.subarray(0, n), fin)
    if (written === WRITE_STOPPED) {
      src.stopSending(s, Math.max(0, d.stopCode))
      return moved
    }
    moved += written
    if (written < n) {
      // Capacity shrank between the check and the write (it should not): the rest cannot be
      // held without a buffer, so the stream is reset rather than silently truncated.
      dst.resetStream(d, 0)
      src.stopSending(s, 0)
      return moved
    }
    if (fin) return moved
  }
}
