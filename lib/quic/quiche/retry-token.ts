/**
 * Stateless Retry tokens (RFC 9000 §8.1.2): the server answers a client's first Initial with
 * a Retry carrying a token that binds the client's address and the original destination
 * connection ID; a client that echoes it back has proved it receives at that address, and the
 * server recovers the original DCID from the token without keeping any state.
 *
 *   token = expiry (u32, seconds) | odcid length (u8) | odcid | HMAC-SHA256(key, address | expiry | odcid)[0..16]
 *
 * The key is random per endpoint (a token only has to survive one round trip).
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto'

const MAC_LENGTH = 16

export class RetryTokens {
  readonly #key: Buffer
  readonly #lifetimeMs: number
  readonly #now: () => number

  constructor (options: { lifetimeMs?: number, now?: () => number } = {}) {
    this.#key = randomBytes(32)
    this.#lifetimeMs = options.lifetimeMs ?? 10_000
    this.#now = options.now ?? Date.now
  }

  mint (odcid: Uint8Array, address: string, port: number): Buffer {
    const expiry = Math.floor((this.#now() + this.#lifetimeMs) / 1000)
    const body = Buffer.allocUnsafe(5 + odcid.length)
    body.writeUInt32BE(expiry >>> 0, 0)
    body[4] = odcid.length
    body.set(odcid, 5)
    return Buffer.concat([body, this.#mac(body, address, port)])
  }

  /** The original DCID bound in a valid, unexpired token for this address; else null. */
  validate (token: Uint8Array, address: string, port: number): Buffer | null {
    if (token.length < 5 + MAC_LENGTH) return null
    const buf = Buffer.from(token.buffer, token.byteOffset, token.length)
    const odcidLength = buf[4] as number
    if (token.length !== 5 + odcidLength + MAC_LENGTH) return null
    const body = buf.subarray(0, 5 + odcidLength)
    const mac = buf.subarray(5 + odcidLength)
    if (!timingSafeEqual(mac, this.#mac(body, address, port))) return null
    if (buf.readUInt32BE(0) * 1000 < this.#now()) return null
    return Buffer.from(body.subarray(5))
  }

  #mac (body: Buffer, address: string, port: number): Buffer {
    return createHmac('sha256', this.#key).update(`${address}|${port}|`).update(body).digest().subarray(0, MAC_LENGTH)
  }
}
