/**
 * The pure rules of a WebTransport session request (SPEC §7): which extended CONNECT
 * requests are session requests, which pod a session goes to, and which headers the
 * upstream CONNECT carries. The relays (webtransport-h2/, webtransport-h3/) do the I/O.
 *
 * Rejections are one table, code → HTTP status, metric outcome and message, so the status a
 * Pylon sees, the outcome an operator counts and the text in the log cannot drift apart.
 */
import http2, { type IncomingHttpHeaders, type IncomingHttpStatusHeader, type OutgoingHttpHeaders } from 'node:http2'
import type { HostnameTemplate } from '../routing/hostname-template.ts'
import type { PodTarget, TargetSnapshot } from '../discovery/types.ts'
import { resolveAuthority, resolveSni } from '../routing/resolve.ts'
import type { WebTransportOutcome } from './webtransport-metrics.ts'
import { SNI_REFUSALS } from './errors.ts'
import { catalogueArea, type ErrorDoc } from '../error-catalogue.ts'
import type { RequestHead } from '../quic/h3/message.ts'
import type { FieldLine } from '../quic/h3/qpack.ts'
import { splitHostPort } from '../host-port.ts'
import { CONNECTION_SPECIFIC_FIELDS, SENSITIVE_FIELDS } from '../http-fields.ts'

/** The only path a session request may use. */
export const SESSION_PATH = '/_stargate/webtransport'

export const REJECTIONS = {
  wrong_method: {
    status: 400,
    outcome: 'invalid_connect',
    message: 'webtransport session requests use the CONNECT method',
    meaning: 'a request to the WebTransport port that is not an extended CONNECT',
    action: 'fix the client: open sessions with extended CONNECT (RFC 8441, RFC 9220)',
  },
  missing_protocol: {
    status: 400,
    outcome: 'invalid_connect',
    message: 'webtransport session requests need the :protocol pseudo-header webtransport (extended CONNECT, RFC 8441)',
    meaning: 'a CONNECT without :protocol (a plain CONNECT tunnel, which the router does not offer)',
    action: 'fix the client: send :protocol webtransport',
  },
  wrong_protocol: {
    status: 400,
    outcome: 'invalid_connect',
    message: ':protocol must be webtransport',
    meaning: 'an extended CONNECT for another protocol (e.g. websocket)',
    action: 'fix the client: send :protocol webtransport',
  },
  wrong_path: {
    status: 400,
    outcome: 'invalid_connect',
    message: `webtransport session path must be ${SESSION_PATH}`,
    meaning: 'the session request\'s :path is not /_stargate/webtransport',
    action: 'fix the client\'s session URL: the path is /_stargate/webtransport',
  },
  headers_too_large: {
    status: 431,
    outcome: 'invalid_connect',
    message: 'webtransport session request headers exceed --http2-max-header-list-bytes',
    meaning: 'over HTTP/2: the session request\'s header list is larger than --http2-max-header-list-bytes (RFC 7541 §4.1 size), up to twice that, the SETTINGS_MAX_HEADER_LIST_SIZE the listener advertises (beyond it the stream is reset ENHANCE_YOUR_CALM)',
    action: 'send fewer or smaller headers, or raise --http2-max-header-list-bytes',
  },
  missing_sni: {
    status: 400,
    outcome: 'missing_sni',
    message: SNI_REFUSALS.missing_sni,
    meaning: 'neither the TLS server name nor :authority names a stargate',
    action: 'configure the Pylon to dial the advertised stargate host name',
  },
  unknown_sni: {
    status: 404,
    outcome: 'unknown_sni',
    message: SNI_REFUSALS.unknown_sni,
    meaning: 'the server name (or :authority) does not render from --advertised-hostname-template (a name that does but names no ready pod is `target_unavailable`)',
    action: 'check the Pylon\'s target against WatchStargates and --advertised-hostname-template',
  },
  target_unavailable: {
    status: 503,
    outcome: 'target_unavailable',
    message: SNI_REFUSALS.target_unavailable,
    meaning: 'the name renders from the template but names no ready pod: one that is not ready, has no quic port, or does not exist',
    action: 'none: the Pylon retries; if it persists, check the pod\'s readiness',
  },
  upstream_timeout: {
    status: 502,
    outcome: 'upstream_connect_error',
    message: 'timed out connecting to stargate target',
    meaning: 'the pod did not connect, or sent no SETTINGS, within --connect-timeout-ms',
    action: 'check the pod\'s load and network',
  },
  upstream_unreachable: {
    status: 502,
    outcome: 'upstream_connect_error',
    message: 'failed to connect to stargate target',
    meaning: 'the connection to the pod failed or closed before it answered (the info log has the cause)',
    action: 'check the pod, its port and --upstream-tls',
  },
  upstream_no_webtransport: {
    status: 502,
    outcome: 'upstream_connect_error',
    message: 'stargate target does not accept extended CONNECT (SETTINGS_ENABLE_CONNECT_PROTOCOL)',
    meaning: 'the pod does not offer extended CONNECT, so it cannot take a WebTransport session',
    action: 'run the stargate with WebTransport enabled, or use --tunnel-protocol raw-quic',
  },
  upstream_invalid_response: {
    status: 502,
    outcome: 'upstream_connect_error',
    message: 'the stargate sent a response the router cannot forward',
    meaning: 'the pod answered the session request with a status or fields HTTP/2 cannot carry (e.g. :status 600; the router\'s warn log names the error)',
    action: 'fix the stargate; the router\'s warn log names the pod and the error',
  },
  upstream_no_answer: {
    status: 504,
    outcome: 'upstream_connect_error',
    message: 'stargate target did not answer the session request in time',
    meaning: 'the pod accepted the connection but did not answer (or reset) the session request in time',
    action: 'check the stargate\'s logs',
  },
  shutting_down: {
    status: 503,
    outcome: null,
    message: 'router is shutting down',
    meaning: 'the router is draining (SIGTERM) and takes no new sessions',
    action: 'none: the Pylon reconnects to another replica',
  },
  // Session caps: counted in webtransport_sessions_refused_total, not as an outcome.
  connection_session_limit: {
    status: 429,
    outcome: null,
    message: 'too many webtransport sessions on this connection; open another connection',
    meaning: 'this connection already carries as many sessions as the router allows per connection',
    action: 'open another connection',
  },
  total_session_limit: {
    status: 503,
    outcome: null,
    message: 'the router carries as many webtransport sessions as it may; retry later',
    meaning: 'the router carries as many WebTransport sessions as it allows in total',
    action: 'retry later, or add router replicas',
  },
} as const satisfies Record<string, ErrorDoc & { status: number, outcome: WebTransportOutcome | null, message: string }>

export type RejectionCode = keyof typeof REJECTIONS

export const WEBTRANSPORT_REJECTION_AREA = catalogueArea(REJECTIONS, 'REJECTIONS', 'lib/tunnel/webtransport-connect.ts', (e) => `HTTP ${e.status} \`${e.message}\``, {
  title: 'WebTransport sessions: refused requests (tunnel port)',
  where: 'The answer to a session request (extended CONNECT over HTTP/3 or HTTP/2): the status, the message as a text/plain body and the code in `x-stargate-error-code`.',
})

export type ConnectCheck = { readonly ok: true } | { readonly ok: false, readonly code: 'wrong_method' | 'missing_protocol' | 'wrong_protocol' | 'wrong_path' }

const OK: ConnectCheck = Object.freeze({ ok: true })

/** Whether a request is a WebTransport session request at SESSION_PATH (a query string is allowed). */
export function checkConnect (headers: IncomingHttpHeaders): ConnectCheck {
  const path = headers[':path']
  return checkConnectHead(headers[':method'], headers[':protocol'], typeof path === 'string' ? path : undefined)
}

/** The same rules on a decoded request head (HTTP/3: lib/quic/h3/message.ts). */
export function checkConnectHead (method: string | undefined, protocol: string | null | undefined, path: string | null | undefined): ConnectCheck {
  if (method !== 'CONNECT') return { ok: false, code: 'wrong_method' }
  if (protocol === undefined || protocol === null) return { ok: false, code: 'missing_protocol' }
  if (protocol !== 'webtransport') return { ok: false, code: 'wrong_protocol' }
  if (typeof path !== 'string') return { ok: false, code: 'wrong_path' }
  const query = path.indexOf('?')
  const bare = query < 0 ? path : path.slice(0, query)
  return bare === SESSION_PATH ? OK : { ok: false, code: 'wrong_path' }
}

export type SessionRoute =
  | { readonly ok: true, readonly target: PodTarget, readonly serverName: string }
  | { readonly ok: false, readonly code: 'missing_sni' | 'unknown_sni' | 'target_unavailable' }

/**
 * The pod of a session: by the TLS server name when the client sent one, else by
 * :authority (a client that dials by IP sends no SNI). A server name that does not match the
 * template is not retried as :authority: the TLS identity names the target. serverName is
 * what the upstream TLS handshake sends and verifies: the same name.
 */
export function routeSession (sni: string | false | null | undefined, authority: string | undefined, snapshot: TargetSnapshot, template: HostnameTemplate): SessionRoute {
  if (typeof sni === 'string' && sni !== '') {
    const route = resolveSni(sni, snapshot, template)
    if (route.ok) return { ok: true, target: route.target, serverName: sni.toLowerCase() }
    return { ok: false, code: route.reason }
  }
  const route = resolveAuthority(authority, snapshot, template)
  if (route.ok) return { ok: true, target: route.target, serverName: hostOf(authority ?? '') }
  switch (route.reason) {
    case 'missing_authority': return { ok: false, code: 'missing_sni' }
    case 'unknown_authority': return { ok: false, code: 'unknown_sni' }
    case 'target_unavailable': return { ok: false, code: 'target_unavailable' }
    default: {
      const never: never = route
      return never
    }
  }
}

/** The host of an :authority, lower-cased, without port or trailing dot. */
export function hostOf (authority: string): string {
  const host = splitHostPort(authority).host
  return (host.endsWith('.') ? host.slice(0, -1) : host).toLowerCase()
}

/** Connection-specific fields: never legal in HTTP/2 (RFC 9113 §8.2.2); Node refuses to send them. */
const CONNECTION_SPECIFIC: ReadonlySet<string> = new Set([...CONNECTION_SPECIFIC_FIELDS, 'te', 'host', 'http2-settings'])

/**
 * The upstream CONNECT: every field of the downstream request, in order, a repeated field
 * kept as repeated fields (an array value makes Node send one field per entry), and the
 * pseudo-headers as received. Credentials go out as never-indexed fields.
 */
export function upstreamHeaders (rawHeaders: readonly string[]): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {}
  const sensitive: string[] = []
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = (rawHeaders[i] as string).toLowerCase()
    const value = rawHeaders[i + 1] as string
    if (CONNECTION_SPECIFIC.has(name)) continue
    const existing = out[name]
    if (existing === undefined) {
      out[name] = value
      if (SENSITIVE_FIELDS.has(name)) sensitive.push(name)
    } else if (name.charCodeAt(0) === 58 /* : */) {
      continue // a repeated pseudo-header is malformed; nghttp2 rejects it before we see it
    } else if (Array.isArray(existing)) {
      existing.push(value)
    } else {
      out[name] = [String(existing), value]
    }
  }
  if (sensitive.length > 0) (out as Record<symbol, unknown>)[http2.sensitiveHeaders] = sensitive
  return out
}

/** The downstream response to a rejected upstream session: status and fields, minus pseudo and connection-specific ones. */
export function downstreamResponseHeaders (upstream: IncomingHttpHeaders & IncomingHttpStatusHeader): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {}
  for (const name of Object.keys(upstream)) {
    if (name.charCodeAt(0) === 58 || CONNECTION_SPECIFIC.has(name)) continue
    out[name] = upstream[name] as string | string[] | undefined
  }
  out[':status'] = upstream[':status'] ?? 502
  return out
}

/** Hop-by-hop in HTTP/3 WebTransport: the draft-02 answer header belongs to each leg's own draft. */
const H3_PER_HOP = new Set(['sec-webtransport-http3-draft'])

/**
 * The upstream HTTP/3 CONNECT (SPEC §7): the downstream request's pseudo-headers as received
 * and then every regular field in order, repeated ones repeated (the HTTP/3 layer already
 * refused connection-specific fields as malformed).
 */
export function upstreamH3Fields (head: RequestHead): FieldLine[] {
  const out: FieldLine[] = [[':method', head.method], [':protocol', head.protocol ?? 'webtransport'], [':scheme', head.scheme ?? 'https']]
  if (head.authority !== null) out.push([':authority', head.authority])
  out.push([':path', head.path ?? SESSION_PATH])
  for (const line of head.fields) out.push(line)
  return out
}

/** The pod's response fields to pass to the Pylon: all but the per-hop ones. */
export function downstreamH3Fields (fields: readonly FieldLine[]): FieldLine[] {
  return fields.filter(([name]) => !H3_PER_HOP.has(name))
}
