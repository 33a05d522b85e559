/**
 * Capsule framing of WebTransport over HTTP/2 (draft-ietf-webtrans-http2; capsules are
 * RFC 9297 §3.2: Type varint, Length varint, Value). The relay forwards the capsules of a
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
 */

/** CLOSE_WEBTRANSPORT_SESSION (draft-ietf-webtrans-http3 §5, used unchanged over HTTP/2). */
export const CLOSE_WEBTRANSPORT_SESSION = 0x2843
/** DRAIN_WEBTRANSPORT_SESSION. */
export const DRAIN_WEBTRANSPORT_SESSION = 0x78ae
/** The reason of a close capsule is at most 1024 bytes of UTF-8 (draft-ietf-webtrans-http3 §5). */
export const MAX_CLOSE_REASON_BYTES = 1024

/**
 * HTTP/2 SETTINGS of WebTransport over HTTP/2 (draft-ietf-webtrans-http2 §11.2): the initial
 * flow-control credit and stream limits of sessions on a connection. They are per hop, but
 * with capsules forwarded end to end the endpoints' flow control is end to end, so the relay
 * advertises to Pylons the values the library's endpoints use by default (what Stargate pods
 * advertise, unless configured otherwise), and to a pod the values the Pylon advertised.
 */
export const WT_SETTINGS = {
  initialMaxData: 0x2b61,
  initialMaxStreamDataUni: 0x2b62,
  initialMaxStreamDataBidi: 0x2b63,
  initialMaxStreamsUni: 0x2b64,
  initialMaxStreamsBidi: 0x2b65,
} as const
export const WT_SETTING_IDS: number[] = Object.values(WT_SETTINGS)
/** @fails-components/webtransport's defaults (16 KiB of credit, 100 streams each way). */
export const DEFAULT_WT_SETTINGS: Readonly<Record<number, number>> = Object.freeze({
  [WT_SETTINGS.initialMaxData]: 16 * 1024,
  [WT_SETTINGS.initialMaxStreamDataUni]: 16 * 1024,
  [WT_SETTINGS.initialMaxStreamDataBidi]: 16 * 1024,
  [WT_SETTINGS.initialMaxStreamsUni]: 100,
  [WT_SETTINGS.initialMaxStreamsBidi]: 100,
})

/** The WebTransport settings among a peer's custom settings; null when it sent none. */
export function pickWtSettings (custom: Readonly<Record<number, number>> | undefined): Record<number, number> | null {
  if (custom === undefined) return null
  let found: Record<number, number> | null = null
  for (const id of WT_SETTING_IDS) {
    const value = custom[id]
    if (typeof value === 'number') (found ??= {})[id] = value
  }
  return found
}

/** Bytes of a QUIC variable-length integer (RFC 9000 §16) from its first byte. */
function varintLength (first: number): number {
  return 1 << (first >> 6)
}

/** A varint whose bytes are all in buf at offset (callers check the length first). */
function readVarint (buf: Uint8Array, offset: number, length: number): number {
  let value = (buf[offset] as number) & 0x3f
  // Multiplication, not shifts: values above 2^31 must stay exact (up to 2^53).
  for (let i = 1; i < length; i++) value = value * 256 + (buf[offset + i] as number)
  return value
}

function writeVarint (out: Buffer, offset: number, value: number): number {
  if (value < 0x40) {
    out[offset] = value
    return offset + 1
  }
  if (value < 0x4000) {
    out.writeUInt16BE(0x4000 | value, offset)
    return offset + 2
  }
  if (value < 0x40000000) {
    out.writeUInt32BE((0x80000000 | value) >>> 0, offset)
    return offset + 4
  }
  throw new RangeError(`varint value ${value} is out of the range the relay writes`)
}

function varintSize (value: number): number {
  return value < 0x40 ? 1 : value < 0x4000 ? 2 : value < 0x40000000 ? 4 : 8
}

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

/** The code and reason of a close capsule's value, or null when it is shorter than 4 bytes. */
export function decodeCloseValue (value: Uint8Array): { readonly code: number, readonly reason: string } | null {
  if (value.length < 4) return null
  const code = (((value[0] as number) << 24) >>> 0) + ((value[1] as number) << 16) + ((value[2] as number) << 8) + (value[3] as number)
  return { code, reason: Buffer.from(value.buffer, value.byteOffset + 4, value.length - 4).toString('utf8') }
}

/** Longest capsule header: two 8-byte varints. */
const MAX_HEADER = 16

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
    const typeLength = varintLength(header[0] as number)
    if (this.#headerLength < typeLength + 1) return false
    const lengthLength = varintLength(header[typeLength] as number)
    if (this.#headerLength < typeLength + lengthLength) return false
    const type = readVarint(header, 0, typeLength)
    this.#remaining = readVarint(header, typeLength, lengthLength)
    this.#headerLength = 0
    this.#capsules++
    if (type === CLOSE_WEBTRANSPORT_SESSION) this.#closeSeen = true
    return true
  }
}
