/**
 * HTTP/3 frames (RFC 9114 §7): Type (varint) | Length (varint) | Payload, and the stream
 * types of unidirectional streams (§6.2).
 *
 * FrameReader follows one stream's frames across chunks, bounded: DATA payloads are handed
 * on as slices of the chunks they arrived in (never copied or buffered), frames of unknown
 * and reserved types are skipped without buffering (§9: extension frames are ignored), and
 * only the frames this endpoint must read whole (HEADERS, SETTINGS, GOAWAY, MAX_PUSH_ID,
 * CANCEL_PUSH, PUSH_PROMISE) are collected, each up to a limit: a larger one is
 * H3_EXCESSIVE_LOAD, not a buffer. Which frame may appear on which stream is checked from
 * the type alone, before the length is read (§7.2, table 1).
 *
 * A bidirectional stream that starts with the WebTransport signal 0x41 (where the caller
 * allows it) is not HTTP/3 after the session id that follows: the reader reports the
 * session id and the rest of the chunk, and must not be fed again.
 */
import { type H3Failure, failure } from './errors.ts'
import { VarintAccumulator, decodeVarint, varintLengthOf, varintSize, writeVarint } from '../varint.ts'

export const FRAME = {
  DATA: 0x00,
  HEADERS: 0x01,
  CANCEL_PUSH: 0x03,
  SETTINGS: 0x04,
  PUSH_PROMISE: 0x05,
  GOAWAY: 0x07,
  MAX_PUSH_ID: 0x0d,
} as const

/** HTTP/2 frame types with no HTTP/3 meaning; receiving one is H3_FRAME_UNEXPECTED (§7.2.8). */
const RESERVED_H2_FRAME_TYPES: ReadonlySet<number> = new Set([0x02, 0x06, 0x08, 0x09])

/** Unidirectional stream types (§6.2, RFC 9204 §4.2, draft-ietf-webtrans-http3 §4.1). */
export const STREAM_TYPE = {
  CONTROL: 0x00,
  PUSH: 0x01,
  QPACK_ENCODER: 0x02,
  QPACK_DECODER: 0x03,
  WEBTRANSPORT_UNI: 0x54,
} as const

/** First varint of a WebTransport bidirectional stream, in place of a frame type (draft-ietf-webtrans-http3 §4.2). */
export const WEBTRANSPORT_BIDI_SIGNAL = 0x41

/** Where a reader runs: the peer's control stream (after its type byte) or a request stream. */
export type FrameStreamKind = 'control' | 'request'

export type FrameEvent =
  /** A complete frame of a type the reader collects. */
  | { readonly kind: 'frame', readonly type: number, readonly payload: Uint8Array }
  /** Part of a DATA frame's payload (a slice of the pushed chunk). */
  | { readonly kind: 'data', readonly data: Uint8Array }
  /** The stream is a WebTransport stream of this session; rest is what followed the header in the chunk. */
  | { readonly kind: 'webtransport', readonly sessionId: number, readonly rest: Uint8Array }

export interface FrameLimits {
  /** Largest HEADERS (and PUSH_PROMISE) payload collected. */
  readonly maxHeadersBytes: number
  /** Largest SETTINGS, GOAWAY, MAX_PUSH_ID or CANCEL_PUSH payload collected. */
  readonly maxControlFrameBytes: number
}

export const DEFAULT_FRAME_LIMITS: FrameLimits = Object.freeze({ maxHeadersBytes: 64 * 1024, maxControlFrameBytes: 4096 })

const TYPE = 0
const LENGTH = 1
const PAYLOAD = 2
const DATA = 3
const SKIP = 4
const DONE = 5

export class FrameReader {
  readonly #kind: FrameStreamKind
  readonly #limits: FrameLimits
  #webTransportAllowed: boolean
  readonly #varint = new VarintAccumulator()
  #state = TYPE
  #type = 0
  #remaining = 0
  #payload: Buffer | null = null
  #filled = 0
  #frames = 0
  #skipped = 0

  /**
   * webTransportSignal: accept 0x41 as the stream's first varint (a bidirectional stream of
   * a peer that may open WebTransport streams).
   */
  constructor (kind: FrameStreamKind, limits: FrameLimits = DEFAULT_FRAME_LIMITS, webTransportSignal = false) {
    this.#kind = kind
    this.#limits = limits
    this.#webTransportAllowed = webTransportSignal
  }

  /** Frames whose header was read, including skipped ones. */
  get frames (): number {
    return this.#frames
  }

  /** Frames of unknown or reserved types skipped. */
  get skipped (): number {
    return this.#skipped
  }

  /** True between frames (a FIN here is a clean end). */
  get atBoundary (): boolean {
    return this.#state === TYPE && this.#varint.length === 0
  }

  /** Parses chunk, appending what it completes to out; a failure stops the reader. */
  push (chunk: Uint8Array, out: FrameEvent[]): H3Failure | null {
    let i = 0
    while (i < chunk.length) {
      switch (this.#state) {
        case TYPE: {
          i += this.#varint.push(chunk, i)
          if (this.#varint.value < 0) break
          this.#type = this.#varint.value
          this.#varint.reset()
          const refused = this.#check(this.#type)
          if (refused !== null) return this.#stop(refused)
          this.#state = LENGTH
          break
        }
        case LENGTH: {
          i += this.#varint.push(chunk, i)
          if (this.#varint.value < 0) break
          const length = this.#varint.value
          this.#varint.reset()
          this.#frames++
          const failed = this.#begin(length, chunk, i, out)
          if (failed !== null) return this.#stop(failed)
          if ((this.#state as number) === DONE) return null
          break
        }
        case PAYLOAD: {
          const payload = this.#payload as Buffer
          const take = Math.min(payload.length - this.#filled, chunk.length - i)
          payload.set(chunk.subarray(i, i + take), this.#filled)
          this.#filled += take
          i += take
          if (this.#filled === payload.length) this.#emit(out)
          break
        }
        case DATA: {
          const take = Math.min(this.#remaining, chunk.length - i)
          out.push({ kind: 'data', data: chunk.subarray(i, i + take) })
          this.#remaining -= take
          i += take
          if (this.#remaining === 0) this.#state = TYPE
          break
        }
        case SKIP: {
          const take = Math.min(this.#remaining, chunk.length - i)
          this.#remaining -= take
          i += take
          if (this.#remaining === 0) this.#state = TYPE
          break
        }
        default:
          // DONE: a WebTransport stream, or a failure. Nothing more is HTTP/3.
          return null
      }
    }
    return null
  }

  /** The stream ended (FIN): ending inside a frame is H3_FRAME_ERROR (§7.1). */
  end (): H3Failure | null {
    if (this.#state === DONE) return null
    if (!this.atBoundary) return this.#stop(failure('frame_truncated'))
    return null
  }

  /** Whether a frame of this type may come next on this stream; null when it may. */
  #check (type: number): H3Failure | null {
    const first = this.#frames === 0
    const webTransport = first && this.#webTransportAllowed && type === WEBTRANSPORT_BIDI_SIGNAL
    this.#webTransportAllowed = false
    if (webTransport) return null
    if (RESERVED_H2_FRAME_TYPES.has(type)) return failure('frame_reserved_h2', `HTTP/2 frame type 0x${type.toString(16)} on an HTTP/3 stream`)
    if (this.#kind === 'control') {
      if (first && type !== FRAME.SETTINGS) return failure('settings_missing', `control stream starts with frame type 0x${type.toString(16)}`)
      if (!first && type === FRAME.SETTINGS) return failure('settings_duplicate')
      if (type === FRAME.DATA || type === FRAME.HEADERS || type === FRAME.PUSH_PROMISE) return failure('frame_unexpected', `frame type 0x${type.toString(16)} on the control stream`)
      return null
    }
    if (type === FRAME.SETTINGS || type === FRAME.GOAWAY || type === FRAME.MAX_PUSH_ID || type === FRAME.CANCEL_PUSH) {
      return failure('frame_unexpected', `frame type 0x${type.toString(16)} on a request stream`)
    }
    if (type === WEBTRANSPORT_BIDI_SIGNAL) return failure('frame_unexpected', 'webtransport signal not at the start of a stream')
    return null
  }

  /** A frame header is complete: decide how its payload is read. */
  #begin (length: number, chunk: Uint8Array, at: number, out: FrameEvent[]): H3Failure | null {
    const type = this.#type
    if (type === WEBTRANSPORT_BIDI_SIGNAL && this.#frames === 1 && this.#kind === 'request') {
      out.push({ kind: 'webtransport', sessionId: length, rest: chunk.subarray(at) })
      this.#state = DONE
      return null
    }
    if (type === FRAME.DATA) {
      this.#remaining = length
      this.#state = length === 0 ? TYPE : DATA
      return null
    }
    const limit = collectLimit(type, this.#limits)
    if (limit < 0) {
      this.#skipped++
      this.#remaining = length
      this.#state = length === 0 ? TYPE : SKIP
      return null
    }
    if (length > limit) return failure('frame_too_large', `frame type 0x${type.toString(16)} of ${length} bytes exceeds ${limit}`)
    this.#payload = Buffer.allocUnsafe(length)
    this.#filled = 0
    this.#state = PAYLOAD
    if (length === 0) this.#emit(out)
    return null
  }

  #emit (out: FrameEvent[]): void {
    out.push({ kind: 'frame', type: this.#type, payload: this.#payload as Buffer })
    this.#payload = null
    this.#state = TYPE
  }

  #stop (result: H3Failure): H3Failure {
    this.#state = DONE
    this.#payload = null
    return result
  }
}

/** How many payload bytes of a frame type are collected; -1 for types skipped unread. */
function collectLimit (type: number, limits: FrameLimits): number {
  switch (type) {
    case FRAME.HEADERS:
    case FRAME.PUSH_PROMISE:
      return limits.maxHeadersBytes
    case FRAME.SETTINGS:
    case FRAME.GOAWAY:
    case FRAME.MAX_PUSH_ID:
    case FRAME.CANCEL_PUSH:
      return limits.maxControlFrameBytes
    default:
      return -1
  }
}

/** A frame header (type and length) on its own, to write before a payload sent separately (DATA). */
export function encodeFrameHeader (type: number, length: number): Buffer {
  const out = Buffer.allocUnsafe(varintSize(type) + varintSize(length))
  writeVarint(out, writeVarint(out, 0, type), length)
  return out
}

/** A whole frame. */
export function encodeFrame (type: number, payload: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(varintSize(type) + varintSize(payload.length) + payload.length)
  const at = writeVarint(out, writeVarint(out, 0, type), payload.length)
  out.set(payload, at)
  return out
}

/** A frame whose payload is one varint (GOAWAY, MAX_PUSH_ID, CANCEL_PUSH). */
export function encodeVarintFrame (type: number, value: number): Buffer {
  const size = varintSize(value)
  const out = Buffer.allocUnsafe(varintSize(type) + varintSize(size) + size)
  writeVarint(out, writeVarint(out, writeVarint(out, 0, type), size), value)
  return out
}

/** The one varint a GOAWAY, MAX_PUSH_ID or CANCEL_PUSH payload holds, or -1 when the payload is not exactly that (§7.1: H3_FRAME_ERROR). */
export function decodeVarintPayload (payload: Uint8Array): number {
  if (payload.length === 0 || varintLengthOf(payload[0] as number) !== payload.length) return -1
  return decodeVarint(payload, 0)
}
