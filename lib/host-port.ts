/**
 * The one rule for `host:port` text: the port colon is the last colon after any
 * `]`, so an IPv6 literal keeps its colons (`[::1]:443`, RFC 3986 §3.2.2). Callers that need
 * more (a listen address must have a port; a URI's port must be a number) check the parts.
 */

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
