/**
 * Capsules (RFC 9297 §3.2: Type varint, Length varint, Value) of WebTransport sessions, over
 * HTTP/3 on the CONNECT stream's DATA and over HTTP/2 on the CONNECT stream itself
 * (draft-ietf-webtrans-http2). The HTTP/2 relay (lib/tunnel/webtransport-h2/) forwards the capsules of a
 * session's CONNECT stream unmodified — RFC 9297 lets intermediaries forward capsules they do
 * not process — so streams opened by either side, their FIN/RESET/STOP_SENDING codes, flow
 * control and datagrams pass end to end. The relay only needs to know where capsules begin
 * (to notice a CLOSE_WEBTRANSPORT_SESSION, and to end a leg at a capsule boundary when it
 * closes a session itself) and to write one capsule of its own, CLOSE_WEBTRANSPORT_SESSION.
 *
 * CapsuleCursor follows the boundaries across chunks without copying payloads: per chunk it
 * walks capsule headers only and skips over payloads (a WT_STREAM capsule from the
 * @fails-components/webtransport library carries up to 16 KiB), so its cost is per capsule,
 * not per byte.
 *
 * CapsuleReader is the HTTP/3 side's parser (the CONNECT stream's DATA payload is a capsule
 * sequence, RFC 9297 §3.2, split across DATA frames at any byte): the HTTP/3 relay
 * terminates each leg's session, so it reads the close code and reason and the drain signal
 * and skips every other capsule (Chromium sends a GREASE capsule first) without buffering it.
 */
import { decodeVarint, varintLengthOf, varintSize, writeVarint } from '../varint.ts'

/** CLOSE_WEBTRANSPORT_SESSION (draft-ietf-webtrans-http3 §5, used unchanged over HTTP/2). */
export const CLOSE_WEBTRANSPORT_SESSION = 0x2843
/** DRAIN_WEBTRANSPORT_SESSION. */
export const DRAIN_WEBTRANSPORT_SESSION = 0x78ae
/** The reason of a close capsule is at most 1024 bytes of UTF-8 (draft-ietf-webtrans-http3 §5). */
export const MAX_CLOSE_REASON_BYTES = 1024

/**
 * A CLOSE_WEBTRANSPORT_SESSION capsule: a 32-bit application error code and a UTF-8 reason
 * (cut at MAX_CLOSE_REASON_BYTES without splitting a character).
 */
export function encodeCloseCapsule (code: number, reason: string): Buffer {
  if (!Number.isInteger(code) || code < 0 || code > 0xffffffff) throw new RangeError(`close code must be a 32-bit unsigned integer, got ${code}`)
  let text = Buffer.from(reason, 'utf8')
  if (text.length > MAX_CLOSE_REASON_BYTES) {
    let end = MAX_CLOSE_REASON_BYTES
    while (end > 0 && ((text[end] as number) & 0xc0) === 0x80) end--
    text = text.subarray(0, end)
  }
  const length = 4 + text.length
  const out = Buffer.allocUnsafe(varintSize(CLOSE_WEBTRANSPORT_SESSION) + varintSize(length) + length)
  let offset = writeVarint(out, 0, CLOSE_WEBTRANSPORT_SESSION)
  offset = writeVarint(out, offset, length)
  out.writeUInt32BE(code, offset)
  text.copy(out, offset + 4)
  return out
}

/** A DRAIN_WEBTRANSPORT_SESSION capsule (no value). */
export function encodeDrainCapsule (): Buffer {
  const out = Buffer.allocUnsafe(varintSize(DRAIN_WEBTRANSPORT_SESSION) + 1)
  out[writeVarint(out, 0, DRAIN_WEBTRANSPORT_SESSION)] = 0
  return out
}

/** The code and reason of a close capsule's value, or null when it is shorter than 4 bytes. */
export function decodeCloseValue (value: Uint8Array): { readonly code: number, readonly reason: string } | null {
  if (value.length < 4) return null
  const code = (((value[0] as number) << 24) >>> 0) + ((value[1] as number) << 16) + ((value[2] as number) << 8) + (value[3] as number)
  return { code, reason: Buffer.from(value.buffer, value.byteOffset + 4, value.length - 4).toString('utf8') }
}

/** Longest capsule header: two 8-byte varints. */
const MAX_HEADER = 16

/**
 * The capsules of one WebTransport stream over HTTP/2 (draft-ietf-webtrans-http2 §6), each
 * value starting with the stream id: what CapsuleCursor reports to a stream ledger.
 */
export const WT_STREAM_CAPSULES = {
  0x190b4d39: 'reset',
  0x190b4d3a: 'stop',
  0x190b4d3b: 'stream',
  0x190b4d3c: 'stream_fin',
} as const
export type WtStreamCapsuleKind = typeof WT_STREAM_CAPSULES[keyof typeof WT_STREAM_CAPSULES]
const WT_RESET_STREAM = 0x190b4d39
const WT_STOP_SENDING = 0x190b4d3a

/** A capsule of two varints (stream id, code): WT_RESET_STREAM or WT_STOP_SENDING. */
function encodeStreamSignal (type: number, streamId: number, code: number): Buffer {
  const length = varintSize(streamId) + varintSize(code)
  const out = Buffer.allocUnsafe(varintSize(type) + varintSize(length) + length)
  writeVarint(out, writeVarint(out, writeVarint(out, writeVarint(out, 0, type), length), streamId), code)
  return out
}

/** WT_RESET_STREAM then WT_STOP_SENDING for a stream, with one code: the stream refused both ways. */
export function encodeStreamRefusal (streamId: number, code: number): Buffer {
  return Buffer.concat([encodeStreamSignal(WT_RESET_STREAM, streamId, code), encodeStreamSignal(WT_STOP_SENDING, streamId, code)])
}

/**
 * Tracks capsule boundaries in one direction of a CONNECT stream. advance() consumes bytes
 * in order; after each call, atBoundary says whether the bytes so far end exactly after a
 * capsule, and closeSeen whether a CLOSE_WEBTRANSPORT_SESSION capsule has started.
 */
export class CapsuleCursor {
  /** Payload bytes of the current capsule not consumed yet. */
  #remaining = 0
  /** Header bytes of the next capsule collected so far (a header can span chunks). */
  readonly #header = new Uint8Array(MAX_HEADER)
  #headerLength = 0
  #closeSeen = false
  #capsules = 0
  /** With a stream hook: the stream capsule whose id is being read, and its bytes so far. */
  readonly #onStream: ((kind: WtStreamCapsuleKind, streamId: number) => void) | null
  #idKind: WtStreamCapsuleKind | null = null
  readonly #id = new Uint8Array(8)
  #idLength = 0

  /** onStream, when given, hears the kind and stream id of every stream capsule as it passes. */
  constructor (onStream: ((kind: WtStreamCapsuleKind, streamId: number) => void) | null = null) {
    this.#onStream = onStream
  }

  get atBoundary (): boolean {
    return this.#remaining === 0 && this.#headerLength === 0
  }

  get closeSeen (): boolean {
    return this.#closeSeen
  }

  /** Capsules whose header was read (for tests and debugging). */
  get capsules (): number {
    return this.#capsules
  }

  /**
   * Consumes bytes from chunk[start..]: all of them, or with untilBoundary only up to the end
   * of the current capsule. Returns the number consumed; 0 with untilBoundary means the
   * cursor was already at a boundary.
   */
  advance (chunk: Uint8Array, untilBoundary = false, start = 0): number {
    const end = chunk.length
    let i = start
    if (untilBoundary && this.atBoundary) return 0
    while (i < end) {
      if (this.#remaining > 0 && this.#idKind !== null) {
        // A stream capsule's value starts with the stream id: collected byte by byte (8 at most).
        this.#id[this.#idLength++] = chunk[i++] as number
        this.#remaining--
        if (this.#idLength === varintLengthOf(this.#id[0] as number)) {
          const kind = this.#idKind
          this.#idKind = null
          this.#onStream?.(kind, decodeVarint(this.#id, 0))
        } else if (this.#remaining === 0) {
          this.#idKind = null // a capsule shorter than its own stream id: nothing to report
        }
        if (untilBoundary && this.#remaining === 0) return i - start
        continue
      }
      if (this.#remaining > 0) {
        const take = Math.min(this.#remaining, end - i)
        this.#remaining -= take
        i += take
        if (untilBoundary && this.#remaining === 0) return i - start
        continue
      }
      this.#header[this.#headerLength++] = chunk[i++] as number
      if (this.#headerComplete() && untilBoundary && this.#remaining === 0) return i - start
    }
    return i - start
  }

  /** Parses the collected header once both varints are complete; true when it was. */
  #headerComplete (): boolean {
    const header = this.#header
    const typeLength = varintLengthOf(header[0] as number)
    if (this.#headerLength < typeLength + 1) return false
    const lengthLength = varintLengthOf(header[typeLength] as number)
    if (this.#headerLength < typeLength + lengthLength) return false
    const type = decodeVarint(header, 0)
    this.#remaining = decodeVarint(header, typeLength)
    this.#headerLength = 0
    this.#capsules++
    if (type === CLOSE_WEBTRANSPORT_SESSION) this.#closeSeen = true
    if (this.#onStream !== null && this.#remaining > 0) {
      const kind = WT_STREAM_CAPSULES[type as keyof typeof WT_STREAM_CAPSULES]
      if (kind !== undefined) {
        this.#idKind = kind
        this.#idLength = 0
      }
    }
    return true
  }
}

export type CapsuleEvent =
  | { readonly kind: 'close', readonly code: number, readonly reason: string }
  | { readonly kind: 'drain' }

export type CapsuleRead =
  | { readonly ok: true }
  | { readonly ok: false, readonly detail: string }

const CAPSULE_OK: CapsuleRead = Object.freeze({ ok: true })
const DRAIN_EVENT: CapsuleEvent = Object.freeze({ kind: 'drain' })
/** A close capsule's value: a 32-bit code and at most MAX_CLOSE_REASON_BYTES of reason. */
const MAX_CLOSE_VALUE = 4 + MAX_CLOSE_REASON_BYTES

/**
 * Reads the capsules of one direction of a session's CONNECT stream (HTTP/3: the DATA
 * payload). Collects only a close capsule's value (at most 1028 bytes; longer or shorter
 * than 4 is malformed, RFC 9297 §3.3: a malformed message); a drain is reported; every other
 * capsule is skipped as it streams by. Nothing after a close is read (the peer must send
 * nothing more, draft-ietf-webtrans-http3 §5).
 */
export class CapsuleReader {
  readonly #header = new Uint8Array(MAX_HEADER)
  #headerLength = 0
  #type = 0
  #remaining = 0
  #value: Buffer | null = null
  #filled = 0
  #closed = false
  #skipped = 0

  /** Capsules skipped (unknown, GREASE, datagram capsules). */
  get skipped (): number {
    return this.#skipped
  }

  /** True between capsules: the stream may end here. */
  get atBoundary (): boolean {
    return this.#headerLength === 0 && this.#remaining === 0 && this.#value === null
  }

  get closed (): boolean {
    return this.#closed
  }

  push (chunk: Uint8Array, out: CapsuleEvent[]): CapsuleRead {
    let i = 0
    while (i < chunk.length && !this.#closed) {
      if (this.#value !== null) {
        const take = Math.min(this.#value.length - this.#filled, chunk.length - i)
        this.#value.set(chunk.subarray(i, i + take), this.#filled)
        this.#filled += take
        i += take
        if (this.#filled === this.#value.length) {
          const close = decodeCloseValue(this.#value)
          this.#value = null
          if (close === null) return { ok: false, detail: 'close capsule shorter than its 4-byte code' }
          out.push({ kind: 'close', code: close.code, reason: close.reason })
          this.#closed = true
        }
        continue
      }
      if (this.#remaining > 0) {
        const take = Math.min(this.#remaining, chunk.length - i)
        this.#remaining -= take
        i += take
        continue
      }
      this.#header[this.#headerLength++] = chunk[i++] as number
      const typeLength = varintLengthOf(this.#header[0] as number)
      if (this.#headerLength < typeLength + 1) continue
      const lengthLength = varintLengthOf(this.#header[typeLength] as number)
      if (this.#headerLength < typeLength + lengthLength) continue
      this.#type = decodeVarint(this.#header, 0)
      const length = decodeVarint(this.#header, typeLength)
      this.#headerLength = 0
      const started = this.#begin(length, out)
      if (!started.ok) return started
    }
    return CAPSULE_OK
  }

  /** The stream ended: inside a capsule that is a malformed message. */
  end (): CapsuleRead {
    if (this.#closed || this.atBoundary) return CAPSULE_OK
    return { ok: false, detail: 'stream ended inside a capsule' }
  }

  #begin (length: number, out: CapsuleEvent[]): CapsuleRead {
    switch (this.#type) {
      case CLOSE_WEBTRANSPORT_SESSION:
        if (length < 4 || length > MAX_CLOSE_VALUE) return { ok: false, detail: `close capsule of ${length} bytes (4 to ${MAX_CLOSE_VALUE})` }
        this.#value = Buffer.allocUnsafe(length)
        this.#filled = 0
        return CAPSULE_OK
      case DRAIN_WEBTRANSPORT_SESSION:
        out.push(DRAIN_EVENT)
        this.#remaining = length
        return CAPSULE_OK
      default:
        this.#skipped++
        this.#remaining = length
        return CAPSULE_OK
    }
  }
}
