/**
 * QUIC v1 packet headers, read in JavaScript on the receive path (RFC 9000 §17):
 *
 *   long header:  1 1 T T x x x x | version(32) | dcid len | dcid | scid len | scid | ...
 *                 Initial: token length (varint) | token | length (varint) | pn + payload
 *                 0-RTT, Handshake: length (varint) | pn + payload
 *   short header: 0 1 x x x x x x | dcid (our fixed length) | pn + payload
 *
 * The endpoint routes each datagram by its destination connection ID without calling into
 * quiche, and drops datagrams whose headers are malformed before quiche sees them: quiche
 * closes a connection that is handed a structurally invalid packet (quiche::Connection::recv
 * closes on any error other than Done), so forged or truncated packets aimed at a
 * handshaking connection would otherwise kill it. Packets that parse but do not decrypt are
 * harmless: quiche drops them.
 */

export const QUIC_V1 = 0x00000001
export const MAX_CID_LENGTH = 20
/** RFC 9000 §14.1: a client's first datagram is padded to at least 1200 bytes. */
export const MIN_INITIAL_DATAGRAM = 1200

export const LONG_INITIAL = 0
export const LONG_ZERO_RTT = 1
export const LONG_HANDSHAKE = 2
export const LONG_RETRY = 3

/** Smallest protected payload: a 1-byte packet number is sampled 4 bytes on, for 16 bytes. */
const MIN_PROTECTED_PAYLOAD = 20

export function isLongHeader (buf: Uint8Array): boolean {
  return ((buf[0] ?? 0) & 0x80) !== 0
}

/** Long-header packet type (LONG_*), for a buffer known to start with a long header. */
export function longType (buf: Uint8Array): number {
  return ((buf[0] ?? 0) >> 4) & 0x03
}

export function longVersion (buf: Uint8Array): number {
  return (((buf[1] ?? 0) << 24) | ((buf[2] ?? 0) << 16) | ((buf[3] ?? 0) << 8) | (buf[4] ?? 0)) >>> 0
}

/**
 * A QUIC variable-length integer at offset: its value, or -1 when it runs past the end.
 * Values above 2^53 are not needed here (lengths); they read as imprecise but positive.
 */
export function readVarint (buf: Uint8Array, offset: number): { value: number, next: number } | null {
  if (offset >= buf.length) return null
  const first = buf[offset] as number
  const size = 1 << (first >> 6)
  if (offset + size > buf.length) return null
  let value = first & 0x3f
  for (let i = 1; i < size; i++) value = value * 256 + (buf[offset + i] as number)
  return { value, next: offset + size }
}

/**
 * The routing key of a datagram: its destination connection ID as a latin1 string (one
 * character per byte), or null when the header is too short to hold one. Short headers carry
 * no length, so their DCID is read with our own fixed length.
 */
export function dcidKey (buf: Buffer, shortDcidLength: number): string | null {
  if (isLongHeader(buf)) {
    if (buf.length < 7) return null
    const length = buf[5] as number
    if (length > MAX_CID_LENGTH || 6 + length > buf.length) return null
    return buf.toString('latin1', 6, 6 + length)
  }
  if (buf.length < 1 + shortDcidLength) return null
  return buf.toString('latin1', 1, 1 + shortDcidLength)
}

/**
 * True when every packet coalesced in the datagram has a well-formed QUIC v1 header whose
 * length fields stay inside the datagram (RFC 9000 §12.2), the fixed bit set (§17.2), no
 * Retry or Version Negotiation (which only servers send), and room for the header
 * protection sample. A short-header packet ends the datagram, and so does a byte without
 * the fixed bit after the first packet (padding).
 */
export function isWellFormedDatagram (buf: Uint8Array, shortDcidLength: number): boolean {
  let offset = 0
  while (offset < buf.length) {
    const first = buf[offset] as number
    if ((first & 0x40) === 0) {
      // quiche pads a client's first datagram with zeros after the Initial packet; what
      // follows a packet without the fixed bit is padding that quiche skips.
      return offset > 0
    }
    if ((first & 0x80) === 0) return buf.length - offset >= 1 + shortDcidLength + MIN_PROTECTED_PAYLOAD
    if (buf.length - offset < 7) return false
    const version = longVersion(buf.subarray(offset))
    if (version !== QUIC_V1) return false
    const type = (first >> 4) & 0x03
    if (type === LONG_RETRY) return false
    let at = offset + 5
    const dcidLength = buf[at] as number
    if (dcidLength > MAX_CID_LENGTH) return false
    at += 1 + dcidLength
    if (at >= buf.length) return false
    const scidLength = buf[at] as number
    if (scidLength > MAX_CID_LENGTH) return false
    at += 1 + scidLength
    if (type === LONG_INITIAL) {
      const token = readVarint(buf, at)
      if (token === null || token.next + token.value > buf.length) return false
      at = token.next + token.value
    }
    const length = readVarint(buf, at)
    if (length === null || length.value < MIN_PROTECTED_PAYLOAD || length.next + length.value > buf.length) return false
    offset = length.next + length.value
  }
  return true
}

/** The fields of a client's Initial packet that the endpoint needs before accepting it. */
export interface InitialHeader {
  readonly version: number
  readonly dcid: Buffer
  readonly scid: Buffer
  readonly token: Buffer
}

/**
 * Reads the header of a long-header packet that may open a connection (Initial, or any
 * version, so that unsupported versions can be answered with Version Negotiation). The
 * returned buffers are views into buf. Null when it is not a long header or is truncated.
 */
export function readLongHeader (buf: Buffer): (InitialHeader & { readonly type: number }) | null {
  if (buf.length < 7 || !isLongHeader(buf)) return null
  const version = longVersion(buf)
  const dcidLength = buf[5] as number
  if (dcidLength > MAX_CID_LENGTH || 7 + dcidLength > buf.length) return null
  const dcid = buf.subarray(6, 6 + dcidLength)
  const scidAt = 6 + dcidLength
  const scidLength = buf[scidAt] as number
  if (scidLength > MAX_CID_LENGTH || scidAt + 1 + scidLength > buf.length) return null
  const scid = buf.subarray(scidAt + 1, scidAt + 1 + scidLength)
  const type = longType(buf)
  let token = buf.subarray(0, 0)
  if (version === QUIC_V1 && type === LONG_INITIAL) {
    const length = readVarint(buf, scidAt + 1 + scidLength)
    if (length === null || length.next + length.value > buf.length) return null
    token = buf.subarray(length.next, length.next + length.value)
  }
  return { type, version, dcid, scid, token }
}
