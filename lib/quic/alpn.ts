/**
 * ALPN protocol lists in TLS wire format (RFC 7301 §3.1): each name as one length byte and
 * 1–255 bytes. The engine passes lists this way in both directions; an empty list is "no ALPN"
 * (what real Pylons and Stargates use for raw QUIC, SPEC §7).
 */

/** Encodes a protocol list; null for an empty one. Throws on an empty or over-long name. */
export function encodeAlpn (protocols: readonly string[]): Buffer | null {
  if (protocols.length === 0) return null
  const parts: Buffer[] = []
  for (const name of protocols) {
    const bytes = Buffer.from(name, 'latin1')
    if (bytes.length === 0 || bytes.length > 255) throw new Error(`an ALPN protocol name must be 1 to 255 bytes, got ${bytes.length}`)
    parts.push(Buffer.from([bytes.length]), bytes)
  }
  return Buffer.concat(parts)
}
