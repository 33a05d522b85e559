/**
 * WebTransport over HTTP/3 wire pieces (draft-ietf-webtrans-http3, drafts 02 and 07+ alike):
 *
 *   bidirectional stream:   0x41 (varint, 2 bytes: 40 41) | session id (varint) | data
 *   unidirectional stream:  0x54 (varint, 2 bytes: 40 54) | session id (varint) | data
 *   datagram (RFC 9297):    quarter stream id = session id / 4 (varint) | payload
 *
 * The session id is the stream id of the session's extended CONNECT request, always a
 * client-initiated bidirectional stream (id % 4 === 0). A relay rewrites it between legs:
 * each leg's CONNECT stream has its own id. StreamHeaderReader collects a header that may
 * arrive split across chunks (at most 16 bytes) without holding up other streams.
 */
import { STREAM_TYPE, WEBTRANSPORT_BIDI_SIGNAL } from './frames.ts'
import { VarintAccumulator, decodeVarint, varintLengthOf, varintSize, writeVarint } from '../varint.ts'

/** The header a WebTransport stream of sessionId starts with. */
export function encodeStreamHeader (bidi: boolean, sessionId: number): Buffer {
  const type = bidi ? WEBTRANSPORT_BIDI_SIGNAL : STREAM_TYPE.WEBTRANSPORT_UNI
  const out = Buffer.allocUnsafe(varintSize(type) + varintSize(sessionId))
  writeVarint(out, writeVarint(out, 0, type), sessionId)
  return out
}

/** True for an id a client-initiated bidirectional stream can have: a possible session id. */
export function isSessionId (id: number): boolean {
  return Number.isSafeInteger(id) && id >= 0 && id % 4 === 0
}

export type StreamHeader =
  | { readonly status: 'incomplete' }
  | { readonly status: 'complete', readonly type: number, readonly sessionId: number, readonly consumed: number }

const INCOMPLETE: StreamHeader = Object.freeze({ status: 'incomplete' })

/**
 * Collects a stream's leading type varint and, for WebTransport types, the session id.
 * push() returns 'complete' with how many bytes of that chunk the header took (the rest is
 * stream data); for other types sessionId is -1 and consumed covers only the type.
 */
export class StreamHeaderReader {
  readonly #type = new VarintAccumulator()
  readonly #session = new VarintAccumulator()

  push (chunk: Uint8Array): StreamHeader {
    let at = 0
    if (this.#type.value < 0) {
      at += this.#type.push(chunk, 0)
      if (this.#type.value < 0) return INCOMPLETE
      const type = this.#type.value
      if (type !== WEBTRANSPORT_BIDI_SIGNAL && type !== STREAM_TYPE.WEBTRANSPORT_UNI) {
        return { status: 'complete', type, sessionId: -1, consumed: at }
      }
    }
    at += this.#session.push(chunk, at)
    if (this.#session.value < 0) return INCOMPLETE
    return { status: 'complete', type: this.#type.value, sessionId: this.#session.value, consumed: at }
  }

  /** Bytes collected so far (for a "header stalled" decision). */
  get length (): number {
    return this.#type.length + this.#session.length
  }
}

/**
 * The session an HTTP datagram belongs to: its quarter stream id × 4, or -1 when the
 * datagram is too short to hold one. payloadOffset says where the application data starts.
 */
export function datagramSessionId (datagram: Uint8Array): number {
  const quarter = decodeVarint(datagram, 0)
  return quarter < 0 ? -1 : quarter * 4
}

export function datagramPayloadOffset (datagram: Uint8Array): number {
  return datagram.length === 0 ? 0 : varintLengthOf(datagram[0] as number)
}

/** A datagram prefix (quarter stream id) for sessionId, to put before a payload. */
export function encodeDatagramPrefix (sessionId: number): Buffer {
  const quarter = sessionId / 4
  const out = Buffer.allocUnsafe(varintSize(quarter))
  writeVarint(out, 0, quarter)
  return out
}

/**
 * The same datagram for another session: the relay's datagram rewrite in TypeScript (the
 * engine's native bridge does the same through its mapping table). null when malformed.
 */
export function rewriteDatagram (datagram: Uint8Array, sessionId: number): Buffer | null {
  if (decodeVarint(datagram, 0) < 0) return null
  const payload = datagram.subarray(varintLengthOf(datagram[0] as number))
  const quarter = sessionId / 4
  const out = Buffer.allocUnsafe(varintSize(quarter) + payload.length)
  out.set(payload, writeVarint(out, 0, quarter))
  return out
}

/** Draft-02 responses carry this header; Chromium refuses a draft-02 session without it. */
export const DRAFT02_RESPONSE_HEADER = ['sec-webtransport-http3-draft', 'draft02'] as const
/** The request path every session uses (SPEC §7). */
export const WEBTRANSPORT_PROTOCOL = 'webtransport'
