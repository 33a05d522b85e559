/**
 * The WebTransport streams of one session over HTTP/2, as seen in its capsules (pure): which
 * are open, and, once the session drains, which are new and must be refused (SPEC §11). The
 * relay forwards capsules untouched (bridge.ts); this ledger only reads the type
 * and stream id of each stream capsule (draft-ietf-webtrans-http2: WT_STREAM, WT_STREAM with
 * FIN, WT_RESET_STREAM, WT_STOP_SENDING), which lib/quic/h3/capsule.ts's cursor reports.
 *
 * Stream ids: bit 1 says the stream is unidirectional and bit 0 who opened it, as in QUIC,
 * except that implementations disagree on which value of bit 0 is the client's (the library of
 * the tests gives its client odd ids): so the opener of a stream is the side whose capsule the
 * relay sees first for it, which can only be the opener's. A stream is open until each
 * direction it has is done: its sender's FIN or RESET_STREAM, or the receiver's STOP_SENDING.
 * Ids grow per opener and kind (the id's low two bits), so a capsule for an id at or below the
 * highest seen of its kind that is not open is for a stream already done, and is ignored. While draining, a bidirectional stream with an id above the highest one
 * seen when the drain began is refused (unidirectional streams are relayed, as on the other
 * tunnel kinds). At most MAX_OPEN streams are tracked: a session beyond that (more than any
 * endpoint's stream limits allow) can no longer be drained early, only at the deadline.
 */

export type Side = 'pylon' | 'stargate'
export type StreamCapsule = 'stream' | 'stream_fin' | 'reset' | 'stop'

/** Verdict on one stream capsule: forward it as it is, or refuse its (new) stream. */
export type StreamVerdict = 'ok' | 'refuse'

const MAX_OPEN = 4096
const PYLON_DONE = 1
const STARGATE_DONE = 2
/** In an open stream's entry, above the done bits: which side opened it. */
const OPENED_BY_STARGATE = 4
const DONE_BITS = PYLON_DONE | STARGATE_DONE

function isUni (id: number): boolean {
  return (id & 2) !== 0
}

function bitOf (side: Side): number {
  return side === 'pylon' ? PYLON_DONE : STARGATE_DONE
}

export class WtStreamLedger {
  /** Open streams: id → the directions done so far and its opener (bits). */
  readonly #open = new Map<number, number>()
  /** Highest id seen per kind of id (its low two bits). */
  readonly #max = [-1, -1, -1, -1]
  #drainMax: number[] | null = null
  #overflow = false

  /** Streams open now. */
  get open (): number {
    return this.#open.size
  }

  /** More streams than tracked: the ledger cannot say when the last one ended. */
  get overflow (): boolean {
    return this.#overflow
  }

  get draining (): boolean {
    return this.#drainMax !== null
  }

  /** The session drains: new bidirectional streams from now on are refused. */
  beginDrain (): void {
    this.#drainMax ??= [...this.#max]
  }

  /** A stream capsule sent by `from`; 'refuse' for a new stream of a draining session. */
  onCapsule (from: Side, kind: StreamCapsule, id: number): StreamVerdict {
    if (!Number.isSafeInteger(id) || id < 0) return 'ok'
    let entry = this.#open.get(id)
    if (entry === undefined) {
      const slot = id & 3
      // Only data opens a stream; anything else names a stream done already.
      if ((kind !== 'stream' && kind !== 'stream_fin') || id <= (this.#max[slot] as number)) return 'ok'
      this.#max[slot] = id
      if (this.#drainMax !== null && !isUni(id) && id > (this.#drainMax[slot] as number)) return 'refuse'
      if (this.#open.size >= MAX_OPEN) {
        this.#overflow = true
        return 'ok'
      }
      entry = from === 'stargate' ? OPENED_BY_STARGATE : 0
    }
    let done = entry & DONE_BITS
    switch (kind) {
      case 'stream':
        break
      case 'stream_fin':
      case 'reset':
        done |= bitOf(from)
        break
      case 'stop':
        done |= bitOf(from === 'pylon' ? 'stargate' : 'pylon')
        break
    }
    const opener: Side = (entry & OPENED_BY_STARGATE) !== 0 ? 'stargate' : 'pylon'
    const finished = isUni(id) ? (done & bitOf(opener)) !== 0 : done === DONE_BITS
    if (finished) this.#open.delete(id)
    else this.#open.set(id, done | (entry & OPENED_BY_STARGATE))
    return 'ok'
  }
}
