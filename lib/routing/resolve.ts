/**
 * Route resolution (SPEC §4): a host from :authority or SNI, through the hostname template,
 * to a ready target of the current snapshot, or the reason it has none. Failures for a
 * missing or foreign host are shared constant objects; the hot path allocates nothing
 * beyond the identity that match() returns.
 */
import type { HostnameTemplate } from './hostname-template.ts'
import type { PodTarget, TargetSnapshot } from '../discovery/types.ts'

export type RouteFailure<M extends string, U extends string> =
  | { readonly ok: false, readonly reason: M }
  | { readonly ok: false, readonly reason: U }
  | { readonly ok: false, readonly reason: 'target_unavailable', readonly identity: string }

export type RouteResult<M extends string, U extends string> =
  | { readonly ok: true, readonly target: PodTarget }
  | RouteFailure<M, U>

export type AuthorityRoute = RouteResult<'missing_authority', 'unknown_authority'>
export type SniRoute = RouteResult<'missing_sni', 'unknown_sni'>

const MISSING_AUTHORITY = Object.freeze({ ok: false, reason: 'missing_authority' } as const)
const UNKNOWN_AUTHORITY = Object.freeze({ ok: false, reason: 'unknown_authority' } as const)
const MISSING_SNI = Object.freeze({ ok: false, reason: 'missing_sni' } as const)
const UNKNOWN_SNI = Object.freeze({ ok: false, reason: 'unknown_sni' } as const)

function resolve<M extends string, U extends string> (
  host: string | undefined | null | false,
  snapshot: TargetSnapshot,
  template: HostnameTemplate,
  missing: { readonly ok: false, readonly reason: M },
  unknown: { readonly ok: false, readonly reason: U }
): RouteResult<M, U> {
  if (typeof host !== 'string' || host === '') return missing
  const identity = template.match(host)
  if (identity === null) return unknown
  const target = snapshot.byIdentity.get(identity)
  if (target === undefined) return { ok: false, reason: 'target_unavailable', identity }
  return { ok: true, target }
}

/** For gRPC registration and HTTP: the :authority (or Host) header. */
export function resolveAuthority (authority: string | undefined | null, snapshot: TargetSnapshot, template: HostnameTemplate): AuthorityRoute {
  return resolve(authority, snapshot, template, MISSING_AUTHORITY, UNKNOWN_AUTHORITY)
}

/** For tunnels: the TLS server name the client sent (false/undefined when it sent none). */
export function resolveSni (serverName: string | undefined | null | false, snapshot: TargetSnapshot, template: HostnameTemplate): SniRoute {
  return resolve(serverName, snapshot, template, MISSING_SNI, UNKNOWN_SNI)
}
