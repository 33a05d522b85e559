/**
 * The one rule for `host:port` text: the port colon is the last colon after any `]`, so an IPv6
 * literal keeps its colons (`[::1]:443`, RFC 3986 §3.2.2). Callers that need more (a listen
 * address must have a port; a URI's port must be a number) check the parts; a Host or
 * :authority a client sent is checked whole with isValidAuthority.
 */
import { isIPv6 } from 'node:net'

export interface HostPort {
  /** The host as written, IPv6 brackets included (`[::1]`). */
  readonly host: string
  /** The text after the port colon (`''` for `host:`), or null when there is no port colon. */
  readonly port: string | null
}

export function splitHostPort (authority: string): HostPort {
  const colon = authority.lastIndexOf(':')
  if (colon < 0 || colon < authority.lastIndexOf(']')) return { host: authority, port: null }
  return { host: authority.slice(0, colon), port: authority.slice(colon + 1) }
}

/** The address ready for `host:port` strings: an IPv6 literal is bracketed. */
export function formatHost (address: string): string {
  return address.includes(':') ? `[${address}]` : address
}

/** By char code: 1 for the characters of a reg-name or IPv4 address (RFC 3986 unreserved and sub-delims). */
const REG_NAME_CHARS = (() => {
  const table = new Uint8Array(128)
  const allowed = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&\'()*+,;='
  for (let i = 0; i < allowed.length; i++) table[allowed.charCodeAt(i)] = 1
  return table
})()

/** RFC 3986 §3.2.2 IPvFuture: "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" ). */
const IP_FUTURE = /^v[0-9a-f]+\.[a-z0-9\-._~!$&'()*+,;=:]+$/i

function isHexDigit (c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || ((c | 0x20) >= 0x61 && (c | 0x20) <= 0x66)
}

function isDigits (text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c < 0x30 || c > 0x39) return false
  }
  return true
}

function isRegName (host: string): boolean {
  for (let i = 0; i < host.length; i++) {
    const c = host.charCodeAt(i)
    if (c === 0x25 /* % */) {
      if (!isHexDigit(host.charCodeAt(i + 1)) || !isHexDigit(host.charCodeAt(i + 2))) return false
      i += 2
    } else if (c > 0x7f || REG_NAME_CHARS[c] === 0) {
      return false
    }
  }
  return true
}

/**
 * A Host field value or :authority as HTTP allows it (RFC 9110 §7.2: uri-host [":" port], the
 * authority of RFC 3986 §3.2 without userinfo): a reg-name or IPv4 address, or an IPv6 or
 * IPvFuture literal in balanced brackets, and a port of digits. Empty is valid (a target URI
 * without authority). What fails it cannot be routed or sent upstream as given (an unbalanced
 * `[` makes undici assert while deriving a server name from it).
 */
export function isValidAuthority (authority: string): boolean {
  const { host, port } = splitHostPort(authority)
  if (port !== null && !isDigits(port)) return false
  if (host.charCodeAt(0) !== 0x5b /* [ */) return isRegName(host)
  if (host.length < 2 || host.charCodeAt(host.length - 1) !== 0x5d /* ] */) return false
  const literal = host.slice(1, -1)
  return isIPv6(literal) || IP_FUTURE.test(literal)
}
