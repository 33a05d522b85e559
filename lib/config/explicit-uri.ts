/**
 * The rule the Rust router applies to --grpc-pylon-dial-addr and --remote-stargate-url: an
 * explicit http:// or https:// URI with a host (issue 13). Pylons dial these values as given,
 * so a bare `host:port` (which WHATWG URL parsing reads as a URI with scheme `host:`), another
 * scheme, user info, an empty host or a port above 65535 is refused at start-up rather than
 * at a Pylon. Pure; the caller words the message.
 */
import { splitHostPort } from '../host-port.ts'

export type UriProblem = 'no_scheme' | 'scheme' | 'userinfo' | 'no_host' | 'port' | 'malformed'

export type UriCheck =
  | { readonly ok: true, readonly scheme: 'http' | 'https' }
  | { readonly ok: false, readonly problem: UriProblem }

/** The authority of `scheme://authority/...`, or null when there is no `://`. */
function authorityOf (value: string): string | null {
  const start = value.indexOf('://')
  if (start < 0) return null
  let end = value.length
  for (const stop of ['/', '?', '#']) {
    const at = value.indexOf(stop, start + 3)
    if (at >= 0 && at < end) end = at
  }
  return value.slice(start + 3, end)
}

export function checkExplicitUri (value: string): UriCheck {
  const authority = authorityOf(value)
  if (authority === null) return { ok: false, problem: 'no_scheme' }
  const scheme = value.slice(0, value.indexOf('://')).toLowerCase()
  if (scheme !== 'http' && scheme !== 'https') return { ok: false, problem: 'scheme' }
  // Checked on the raw text: URL parsing drops an empty user info (`http://@host`).
  if (authority.includes('@')) return { ok: false, problem: 'userinfo' }
  const { host, port } = splitHostPort(authority)
  if (host === '' || host === '[]') return { ok: false, problem: 'no_host' }
  if (port !== null && port !== '' && (!/^\d+$/.test(port) || Number(port) > 65535)) return { ok: false, problem: 'port' }
  const parsed = URL.parse(value)
  if (parsed === null || parsed.hostname === '') return { ok: false, problem: 'malformed' }
  return { ok: true, scheme }
}

/** What is wrong, for the start-up line. Never echoes a value that carries user info. */
export function describeUriProblem (value: string, problem: UriProblem): string {
  switch (problem) {
    case 'no_scheme': return `got '${value}', which has no http:// or https:// scheme`
    case 'scheme': return `got '${value}', whose scheme is not http or https`
    case 'userinfo': return 'got a URI with user info (user@ or user:password@), which is not allowed'
    case 'no_host': return `got '${value}', which has no host`
    case 'port': return `got '${value}', whose port is not a number up to 65535`
    case 'malformed': return `got '${value}', which is not a valid URI`
    default: return unreachable(problem)
  }
}

function unreachable (value: never): never {
  throw new Error(`unexpected uri problem ${String(value)}`)
}
