/**
 * The SNI and ALPN list of a client's first Initial packet, read before quiche sees it
 * (RFC 9001 §5: Initial packets are protected with keys derived from the client's
 * destination connection ID, which anyone can compute).
 *
 * Why: quiche over BoringSSL needs the server's ALPN list up front and fails the handshake
 * when it shares no protocol with the client. A relay must accept whatever the client offers
 * and forward it upstream (SPEC §7: "ALPN as offered by the client is forwarded upstream"),
 * so the endpoint reads the offer first and builds (or reuses) a Config that accepts exactly
 * it. The ClientHello usually fits in the first datagram; when it does not (very large
 * key shares), this returns null and the caller falls back to its default list.
 *
 *   initial_secret = HKDF-Extract(0x38762cf7…, client DCID)
 *   client secret  = HKDF-Expand-Label(initial_secret, "client in", "", 32)
 *   key/iv/hp      = HKDF-Expand-Label(client secret, "quic key"/"quic iv"/"quic hp", "", 16/12/16)
 *   remove header protection (AES-ECB of a 16-byte sample), AES-128-GCM open the payload,
 *   collect CRYPTO frames from offset 0, parse the TLS ClientHello (RFC 8446 §4.1.2).
 */
import { createCipheriv, createDecipheriv, createHmac } from 'node:crypto'
import { LONG_INITIAL, QUIC_V1, isLongHeader, longType, longVersion, readVarint } from './packet.ts'

export interface ClientHelloInfo {
  /** server_name (host_name), or null when the client sent none. */
  readonly serverName: string | null
  /** ALPN protocols in the client's order (empty when none were offered). */
  readonly alpn: readonly string[]
}

const INITIAL_SALT_V1 = Buffer.from('38762cf7f55934b34d179ae6a4c80cadccbb7f0a', 'hex')

function hkdfExpandLabel (secret: Buffer, label: string, length: number): Buffer {
  const full = Buffer.from(`tls13 ${label}`, 'latin1')
  const info = Buffer.alloc(2 + 1 + full.length + 1 + 1)
  info.writeUInt16BE(length, 0)
  info[2] = full.length
  full.copy(info, 3)
  info[3 + full.length] = 0 // empty context
  info[4 + full.length] = 1 // HKDF-Expand counter: one SHA-256 block covers every length used here
  return createHmac('sha256', secret).update(info).digest().subarray(0, length)
}

/** Decrypts the first (Initial) packet of a client datagram; null when it is not one or does not open. */
export function openInitial (datagram: Buffer): Buffer | null {
  if (datagram.length < 7 || !isLongHeader(datagram) || longVersion(datagram) !== QUIC_V1 || longType(datagram) !== LONG_INITIAL) return null
  const dcidLength = datagram[5] as number
  const dcid = datagram.subarray(6, 6 + dcidLength)
  let at = 6 + dcidLength
  at += 1 + (datagram[at] as number)
  const token = readVarint(datagram, at)
  if (token === null) return null
  const length = readVarint(datagram, token.next + token.value)
  if (length === null) return null
  const pnOffset = length.next
  const end = pnOffset + length.value
  if (end > datagram.length || length.value < 20) return null

  const initialSecret = createHmac('sha256', INITIAL_SALT_V1).update(dcid).digest()
  const clientSecret = hkdfExpandLabel(initialSecret, 'client in', 32)
  const key = hkdfExpandLabel(clientSecret, 'quic key', 16)
  const iv = hkdfExpandLabel(clientSecret, 'quic iv', 12)
  const hp = hkdfExpandLabel(clientSecret, 'quic hp', 16)

  const sample = datagram.subarray(pnOffset + 4, pnOffset + 20)
  const ecb = createCipheriv('aes-128-ecb', hp, null)
  const mask = ecb.update(sample)
  const header = Buffer.from(datagram.subarray(0, pnOffset + 4))
  header[0] = (header[0] as number) ^ ((mask[0] as number) & 0x0f)
  const pnLength = ((header[0] as number) & 0x03) + 1
  let pn = 0
  for (let i = 0; i < pnLength; i++) {
    const byte = (header[pnOffset + i] as number) ^ (mask[1 + i] as number)
    header[pnOffset + i] = byte
    pn = pn * 256 + byte
  }
  const aad = header.subarray(0, pnOffset + pnLength)
  const nonce = Buffer.from(iv)
  for (let i = 0; i < 4; i++) nonce[11 - i] = (nonce[11 - i] as number) ^ ((pn >>> (8 * i)) & 0xff)
  const ciphertext = datagram.subarray(pnOffset + pnLength, end - 16)
  const tag = datagram.subarray(end - 16, end)
  try {
    const gcm = createDecipheriv('aes-128-gcm', key, nonce)
    gcm.setAAD(aad)
    gcm.setAuthTag(tag)
    return Buffer.concat([gcm.update(ciphertext), gcm.final()])
  } catch {
    return null
  }
}

/** The CRYPTO stream bytes from offset 0 that an Initial payload carries contiguously. */
export function cryptoData (payload: Buffer): Buffer | null {
  const pieces: Array<{ offset: number, data: Buffer }> = []
  let at = 0
  while (at < payload.length) {
    const type = readVarint(payload, at)
    if (type === null) return null
    at = type.next
    if (type.value === 0x00 || type.value === 0x01) continue // PADDING, PING
    if (type.value === 0x02 || type.value === 0x03) { // ACK
      const fields: number[] = []
      for (let i = 0; i < 4; i++) {
        const v = readVarint(payload, at)
        if (v === null) return null
        fields.push(v.value)
        at = v.next
      }
      const extra = 2 * (fields[2] as number) + (type.value === 0x03 ? 3 : 0)
      for (let i = 0; i < extra; i++) {
        const v = readVarint(payload, at)
        if (v === null) return null
        at = v.next
      }
      continue
    }
    if (type.value === 0x06) { // CRYPTO
      const offset = readVarint(payload, at)
      if (offset === null) return null
      const length = readVarint(payload, offset.next)
      if (length === null || length.next + length.value > payload.length) return null
      pieces.push({ offset: offset.value, data: payload.subarray(length.next, length.next + length.value) })
      at = length.next + length.value
      continue
    }
    break // anything else cannot precede the ClientHello in a first Initial
  }
  pieces.sort((a, b) => a.offset - b.offset)
  const parts: Buffer[] = []
  let next = 0
  for (const piece of pieces) {
    if (piece.offset > next) break
    const from = next - piece.offset
    if (from < piece.data.length) {
      parts.push(piece.data.subarray(from))
      next = piece.offset + piece.data.length
    }
  }
  return parts.length === 0 ? null : Buffer.concat(parts)
}

/** SNI and ALPN of a complete TLS ClientHello handshake message; null when truncated or not one. */
export function parseClientHello (hello: Buffer): ClientHelloInfo | null {
  if (hello.length < 4 || hello[0] !== 0x01) return null
  const length = hello.readUIntBE(1, 3)
  if (hello.length < 4 + length) return null
  const body = hello.subarray(4, 4 + length)
  let at = 2 + 32 // legacy_version, random
  if (at >= body.length) return null
  at += 1 + (body[at] as number) // session id
  if (at + 2 > body.length) return null
  at += 2 + body.readUInt16BE(at) // cipher suites
  if (at >= body.length) return null
  at += 1 + (body[at] as number) // compression methods
  if (at + 2 > body.length) return null
  const extensionsEnd = Math.min(body.length, at + 2 + body.readUInt16BE(at))
  at += 2
  let serverName: string | null = null
  const alpn: string[] = []
  while (at + 4 <= extensionsEnd) {
    const type = body.readUInt16BE(at)
    const size = body.readUInt16BE(at + 2)
    const data = body.subarray(at + 4, at + 4 + size)
    at += 4 + size
    if (data.length !== size) return null
    if (type === 0x0000 && data.length >= 5) { // server_name: list length, type, name length, name
      if (data[2] === 0x00) {
        const nameLength = data.readUInt16BE(3)
        if (5 + nameLength <= data.length) serverName = data.toString('latin1', 5, 5 + nameLength)
      }
    } else if (type === 0x0010 && data.length >= 2) { // application_layer_protocol_negotiation
      const listEnd = Math.min(data.length, 2 + data.readUInt16BE(0))
      let p = 2
      while (p < listEnd) {
        const n = data[p] as number
        if (n === 0 || p + 1 + n > listEnd) break
        alpn.push(data.toString('latin1', p + 1, p + 1 + n))
        p += 1 + n
      }
    }
  }
  return { serverName, alpn }
}

/** SNI and ALPN offered in a client's first datagram, or null when they cannot be read from it. */
export function readClientHello (datagram: Buffer): ClientHelloInfo | null {
  const payload = openInitial(datagram)
  if (payload === null) return null
  const crypto = cryptoData(payload)
  return crypto === null ? null : parseClientHello(crypto)
}
