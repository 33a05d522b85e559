/**
 * Header rewriting of the HTTP forwarder (SPEC §6, RFC 9110 §7.6.1): hop-by-hop fields and
 * the fields a Connection header names are dropped in both directions; the upstream request
 * gets x-forwarded-for/-proto/-host and x-request-id. Works on flat raw header lists
 * ([name, value, name, value, ...]) so duplicates and order survive.
 *
 * Forwarding fields: from a peer outside --trusted-proxy-cidrs, a client's own
 * x-forwarded-*, forwarded and x-real-ip are dropped and x-forwarded-* are the router's; from a
 * trusted proxy, x-forwarded-for is appended to and the rest pass as the proxy set them.
 * `expect` is answered by the router itself (100 Continue), so it is not forwarded.
 */

import { randomUUID } from 'node:crypto'
import { CONNECTION_SPECIFIC_FIELDS } from '../http-fields.ts'

/** The connection-specific fields and the other hop-by-hop ones of HTTP/1.1 (RFC 9110 §7.6.1). */
const HOP_BY_HOP: ReadonlySet<string> = new Set([...CONNECTION_SPECIFIC_FIELDS, 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'http2-settings'])

/** Extra hop-by-hop names listed in Connection headers (lower-case), or null when none. */
function connectionListed (raw: readonly string[]): Set<string> | null {
  let listed: Set<string> | null = null
  for (let i = 0; i < raw.length; i += 2) {
    if ((raw[i] as string).toLowerCase() !== 'connection') continue
    for (const token of (raw[i + 1] as string).split(',')) {
      const name = token.trim().toLowerCase()
      if (name !== '') (listed ??= new Set()).add(name)
    }
  }
  return listed
}

/** A request-id a client may choose: visible ASCII, at most 200 characters. */
export function isValidRequestId (value: string): boolean {
  if (value.length === 0 || value.length > 200) return false
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i)
    if (c < 0x21 || c > 0x7e) return false
  }
  return true
}

/** The request's id: the client's x-request-id when it may choose it (isValidRequestId), else a new UUID. */
export function requestIdOf (field: string | string[] | undefined): string {
  return typeof field === 'string' && isValidRequestId(field) ? field : randomUUID()
}

export interface ForwardedFor {
  readonly clientAddress: string
  readonly proto: 'http' | 'https'
  readonly host: string
  readonly requestId: string
  /** The peer is a trusted proxy: its forwarding fields are kept (x-forwarded-for appended to). */
  readonly trusted: boolean
}

/** Fields a client outside the trusted proxies may not set (they claim who the client is). */
const CLIENT_CLAIMS = new Set(['forwarded', 'x-real-ip'])

/**
 * The header list for the upstream request: the client's fields minus hop-by-hop ones,
 * pseudo-headers and `expect`, `host` kept (from :authority for HTTP/2 clients), forwarding
 * fields as the module comment says, x-request-id set.
 */
export function upstreamRequestHeaders (raw: readonly string[], forwarded: ForwardedFor): string[] {
  const listed = connectionListed(raw)
  const out: string[] = []
  const trusted = forwarded.trusted
  let priorFor: string | null = null
  let priorProto: string | null = null
  let priorHost: string | null = null
  let sawHost = false
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i] as string
    if (name.charCodeAt(0) === 58 /* : */) continue
    const lower = name.toLowerCase()
    if (HOP_BY_HOP.has(lower) || (listed !== null && listed.has(lower)) || lower === 'expect' || lower === 'x-request-id') continue
    const value = raw[i + 1] as string
    if (lower === 'x-forwarded-for') {
      if (trusted) priorFor = priorFor === null ? value : `${priorFor}, ${value}`
      continue
    }
    if (lower === 'x-forwarded-proto') { if (trusted) priorProto ??= value; continue }
    if (lower === 'x-forwarded-host') { if (trusted) priorHost ??= value; continue }
    if (!trusted && CLIENT_CLAIMS.has(lower)) continue
    if (lower === 'host') sawHost = true
    out.push(name, value)
  }
  if (!sawHost && forwarded.host !== '') out.push('host', forwarded.host)
  out.push(
    'x-forwarded-for', priorFor === null ? forwarded.clientAddress : `${priorFor}, ${forwarded.clientAddress}`,
    'x-forwarded-proto', priorProto ?? forwarded.proto,
    'x-forwarded-host', priorHost ?? forwarded.host,
    'x-request-id', forwarded.requestId,
  )
  return out
}

/**
 * Response fields for the client: the pod's minus hop-by-hop ones, as strings. A 204 carries
 * no content-length (RFC 9110 §8.6): over HTTP/2 a client resets a stream whose 204 declares
 * a body (curl: PROTOCOL_ERROR), so a pod's would cost the client its answer.
 */
export function downstreamResponseHeaders (raw: readonly Buffer[], requestId: string, status = 200): string[] {
  const out: string[] = []
  let listed: Set<string> | null = null
  for (let i = 0; i < raw.length; i += 2) {
    if ((raw[i] as Buffer).length === 10 && (raw[i] as Buffer).toString('latin1').toLowerCase() === 'connection') {
      for (const token of (raw[i + 1] as Buffer).toString('latin1').split(',')) {
        const name = token.trim().toLowerCase()
        if (name !== '') (listed ??= new Set()).add(name)
      }
    }
  }
  let sawRequestId = false
  for (let i = 0; i < raw.length; i += 2) {
    const name = (raw[i] as Buffer).toString('latin1')
    const lower = name.toLowerCase()
    if (HOP_BY_HOP.has(lower) || (listed !== null && listed.has(lower))) continue
    if (status === 204 && lower === 'content-length') continue
    if (lower === 'x-request-id') sawRequestId = true
    out.push(name, (raw[i + 1] as Buffer).toString('latin1'))
  }
  if (!sawRequestId) out.push('x-request-id', requestId)
  return out
}
