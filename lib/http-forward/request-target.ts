/**
 * Which host a request names, and the path to send upstream. A request that names
 * two different hosts is refused (400 host_mismatch) rather than routed by one and seen by the
 * pod as the other, which is how requests are smuggled past host-based routing:
 *
 * - HTTP/2: a `host` header that differs from `:authority` (RFC 9113 §8.3.1 calls the request
 *   malformed);
 * - HTTP/1.1: an absolute-form request-target (`GET http://other/x`, RFC 9112 §3.2.2) whose
 *   authority differs from the Host header. When they agree the request goes upstream in
 *   origin-form, as pods expect.
 *
 * A target with a `#` is refused as 400 bad_request: RFC 9112 §3.2 never lets a request target
 * carry a fragment (a client strips it), so one that does is malformed, and the pod would read
 * it as part of the path.
 *
 * A host that is not a valid host[:port] (RFC 9110 §7.2, RFC 3986 §3.2: an unbalanced IPv6
 * bracket, userinfo, a port that is not a number, characters no authority has) is refused as
 * 400 bad_request (RFC 9112 §3.2: "a Host header field with an invalid field value"): it is the
 * client's fault, and must not reach undici, which asserts on `[` without `]` and would make
 * the router blame the pod (502 upstream_error).
 */
import { isValidAuthority } from '../host-port.ts'

export type RequestTarget =
  | { readonly ok: true, readonly host: string | undefined, readonly path: string }
  | { readonly ok: false, readonly code: 'host_mismatch' | 'bad_request' }

const HOST_MISMATCH = Object.freeze({ ok: false, code: 'host_mismatch' } as const)
/** A host, or a target, that is not valid: bad_request. */
const BAD_HOST = Object.freeze({ ok: false, code: 'bad_request' } as const)

function sameHost (a: string, b: string): boolean {
  return a.length === b.length && a.toLowerCase() === b.toLowerCase()
}

/** Length of a leading `http://` or `https://` (case-insensitive), else 0. */
function schemeLength (url: string): number {
  if (url.length < 8 || (url.charCodeAt(0) | 0x20) !== 0x68 /* h */) return 0
  const lower = url.slice(0, 8).toLowerCase()
  if (lower === 'https://') return 8
  if (lower.startsWith('http://')) return 7
  return 0
}

export function resolveRequestTarget (h2: boolean, url: string, hostHeader: string | undefined, authority: string | undefined): RequestTarget {
  if (url.includes('#')) return BAD_HOST
  if (h2) {
    if (authority !== undefined && hostHeader !== undefined && !sameHost(authority, hostHeader)) return HOST_MISMATCH
    const host = authority ?? hostHeader
    if (host !== undefined && !isValidAuthority(host)) return BAD_HOST
    return { ok: true, host, path: url }
  }
  if (hostHeader !== undefined && !isValidAuthority(hostHeader)) return BAD_HOST
  const scheme = schemeLength(url)
  if (scheme === 0) return { ok: true, host: hostHeader, path: url }
  let end = url.length
  for (let i = scheme; i < url.length; i++) {
    const c = url.charCodeAt(i)
    if (c === 0x2f /* / */ || c === 0x3f /* ? */ || c === 0x23 /* # */) { end = i; break }
  }
  const target = url.slice(scheme, end)
  if (target === '' || !isValidAuthority(target)) return BAD_HOST
  if (hostHeader !== undefined && !sameHost(target, hostHeader)) return HOST_MISMATCH
  const rest = url.slice(end)
  return { ok: true, host: target, path: rest === '' || rest.charCodeAt(0) !== 0x2f ? `/${rest}` : rest }
}
