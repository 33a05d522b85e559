/**
 * The rule upstream's shared parser (`parse_explicit_http_uri`, which Pylons use too) applies
 * to --grpc-pylon-dial-addr and --remote-stargate-url: after trimming, an explicit http:// or
 * https:// URI naming a host and at most a port, nothing else. These are gRPC authorities, not
 * resources, and Pylons dial them as given, so a bare `host:port` (which WHATWG URL parsing
 * reads as a URI with scheme `host:`), another scheme, user info, an empty host, a port that is
 * empty, 0 or above 65535, a path (a lone `/` is allowed), a query or a fragment is refused at
 * start-up rather than at a Pylon. Pure; the caller words the message.
 */
import { splitHostPort } from '../host-port.ts'

export type UriProblem =
  | 'no_scheme' | 'scheme' | 'userinfo' | 'no_host' | 'empty_port' | 'port' | 'path' | 'query' | 'fragment' | 'malformed'

export type UriCheck =
  | { readonly ok: true, readonly scheme: 'http' | 'https', /** The value trimmed: what is used and sent. */ readonly uri: string }
  | { readonly ok: false, readonly problem: UriProblem }

/** Whitespace or a control character: http::Uri refuses them anywhere in a URI. */
function hasSpaceOrControl (value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i)
    if (c <= 0x20 || c === 0x7f) return true
  }
  return false
}

export function checkExplicitUri (raw: string): UriCheck {
  const value = raw.trim()
  const start = value.indexOf('://')
  if (start < 0) return { ok: false, problem: 'no_scheme' }
  const scheme = value.slice(0, start).toLowerCase()
  if (scheme !== 'http' && scheme !== 'https') return { ok: false, problem: 'scheme' }
  let end = value.length
  for (const stop of ['/', '?', '#']) {
    const at = value.indexOf(stop, start + 3)
    if (at >= 0 && at < end) end = at
  }
  const authority = value.slice(start + 3, end)
  // Checked on the raw text: URL parsing drops an empty user info (`http://@host`).
  if (authority.includes('@')) return { ok: false, problem: 'userinfo' }
  const { host, port } = splitHostPort(authority)
  if (host === '' || host === '[]') return { ok: false, problem: 'no_host' }
  if (port === '') return { ok: false, problem: 'empty_port' }
  if (port !== null && (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535)) return { ok: false, problem: 'port' }
  const rest = value.slice(end)
  const query = rest.indexOf('?')
  const fragment = rest.indexOf('#')
  if (query >= 0 && (fragment < 0 || query < fragment)) return { ok: false, problem: 'query' }
  if (fragment >= 0) return { ok: false, problem: 'fragment' }
  if (rest !== '' && rest !== '/') return { ok: false, problem: 'path' }
  if (hasSpaceOrControl(value)) return { ok: false, problem: 'malformed' }
  const parsed = URL.parse(value)
  if (parsed === null || parsed.hostname === '') return { ok: false, problem: 'malformed' }
  return { ok: true, scheme, uri: value }
}

/**
 * What is wrong, for the start-up line. Never echoes user info, a query or a fragment (they
 * may carry a credential): the value is cut before them.
 */
export function describeUriProblem (raw: string, problem: UriProblem): string {
  const value = raw.trim()
  switch (problem) {
    case 'no_scheme': return `got '${value}', which has no http:// or https:// scheme`
    case 'scheme': return `got '${value}', whose scheme is not http or https`
    case 'userinfo': return 'got a URI with user info (user@ or user:password@), which is not allowed'
    case 'no_host': return `got '${value}', which has no host`
    case 'empty_port': return `got '${value}', whose port is empty (a colon with no number after it)`
    case 'port': return `got '${value}', whose port is not a number from 1 to 65535`
    case 'path': return `got '${value}', which has a path: nothing may follow the host and port but one /`
    case 'query': return `got '${cutAt(value, '?')}?…', which has a query: nothing may follow the host and port but one /`
    case 'fragment': return `got '${cutAt(value, '#')}#…', which has a fragment: nothing may follow the host and port but one /`
    case 'malformed': return `got '${value}', which is not a valid URI`
    default: return unreachable(problem)
  }
}

function cutAt (value: string, mark: string): string {
  const at = value.indexOf(mark, value.indexOf('://') + 3)
  return at < 0 ? value : value.slice(0, at)
}

function unreachable (value: never): never {
  throw new Error(`unexpected uri problem ${String(value)}`)
}
