/**
 * Well-formed HTTP/3 messages (RFC 9114 §4.1.2, §4.2, §4.3; RFC 9220 §3 for extended
 * CONNECT). A malformed request or response is a stream error H3_MESSAGE_ERROR: the
 * connection and its other streams carry on.
 *
 * Checked: field names are lower-case tokens; values hold no NUL, CR or LF and no leading or
 * trailing whitespace; pseudo-header fields come first, each at most once, only the ones the
 * message kind defines; no connection-specific fields (TE only as "trailers"); the
 * pseudo-header combination of the method (CONNECT without :protocol: no :scheme and
 * :path; extended CONNECT and every other method: :scheme and :path, and an authority).
 */
import type { FieldLine } from './qpack.ts'
import { CONNECTION_SPECIFIC_FIELDS } from '../../http-fields.ts'

export interface RequestHead {
  readonly method: string
  readonly scheme: string | null
  readonly authority: string | null
  readonly path: string | null
  /** The extended CONNECT protocol (RFC 9220), e.g. "webtransport". */
  readonly protocol: string | null
  /** The regular (non-pseudo) fields, in order, repeated ones kept. */
  readonly fields: FieldLine[]
}

export interface ResponseHead {
  readonly status: number
  readonly fields: FieldLine[]
}

export type Validated<T> = { readonly ok: true, readonly head: T } | { readonly ok: false, readonly detail: string }

const CONNECTION_SPECIFIC: ReadonlySet<string> = new Set(CONNECTION_SPECIFIC_FIELDS)
const REQUEST_PSEUDO: ReadonlySet<string> = new Set([':method', ':scheme', ':authority', ':path', ':protocol'])

/** tchar (RFC 9110 §5.6.2) without upper-case letters. */
const TOKEN: Uint8Array = (() => {
  const table = new Uint8Array(128)
  for (const c of "!#$%&'*+-.^_`|~") table[c.charCodeAt(0)] = 1
  for (let c = 0x30; c <= 0x39; c++) table[c] = 1
  for (let c = 0x61; c <= 0x7a; c++) table[c] = 1
  return table
})()

/** Why a field line is not allowed in HTTP/3, or null when it is. */
export function checkFieldLine (name: string, value: string): string | null {
  const start = name.charCodeAt(0) === 0x3a /* : */ ? 1 : 0
  if (name.length === start) return 'empty field name'
  for (let i = start; i < name.length; i++) {
    const c = name.charCodeAt(i)
    if (c >= 128 || TOKEN[c] !== 1) return (c >= 0x41 && c <= 0x5a) ? `field name ${JSON.stringify(name)} is not lower-case` : `field name ${JSON.stringify(name)} has an invalid character`
  }
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i)
    if (c === 0 || c === 0x0a || c === 0x0d) return `field ${name} has a NUL, CR or LF in its value`
  }
  if (value.length > 0) {
    const first = value.charCodeAt(0)
    const last = value.charCodeAt(value.length - 1)
    if (first === 0x20 || first === 0x09 || last === 0x20 || last === 0x09) return `field ${name} has surrounding whitespace`
  }
  if (start === 0) {
    if (CONNECTION_SPECIFIC.has(name)) return `connection-specific field ${name}`
    if (name === 'te' && value !== 'trailers') return 'te other than "trailers"'
  }
  return null
}

type Split = { readonly ok: true, readonly pseudo: ReadonlyMap<string, string>, readonly fields: FieldLine[] } | { readonly ok: false, readonly detail: string }

const RESPONSE_PSEUDO: ReadonlySet<string> = new Set([':status'])

/** Checks every line and splits pseudo-headers (first, each once, of the allowed set) from regular fields. */
function splitSection (section: readonly FieldLine[], allowed: ReadonlySet<string>, kind: string): Split {
  const pseudo = new Map<string, string>()
  const fields: FieldLine[] = []
  for (const line of section) {
    const [name, value] = line
    const bad = checkFieldLine(name, value)
    if (bad !== null) return { ok: false, detail: bad }
    if (name.charCodeAt(0) === 0x3a) {
      if (fields.length > 0) return { ok: false, detail: `pseudo-header ${name} after regular fields` }
      if (!allowed.has(name)) return { ok: false, detail: `pseudo-header ${name} is not a ${kind} pseudo-header` }
      if (pseudo.has(name)) return { ok: false, detail: `pseudo-header ${name} repeated` }
      pseudo.set(name, value)
    } else {
      fields.push(line)
    }
  }
  return { ok: true, pseudo, fields }
}

/** The request head of a field section, or why it is malformed. */
export function validateRequest (section: readonly FieldLine[]): Validated<RequestHead> {
  const split = splitSection(section, REQUEST_PSEUDO, 'request')
  if (!split.ok) return split
  const { pseudo, fields } = split
  const method = pseudo.get(':method')
  if (method === undefined || method === '') return { ok: false, detail: 'request without :method' }
  const scheme = pseudo.get(':scheme') ?? null
  const path = pseudo.get(':path') ?? null
  const protocol = pseudo.get(':protocol') ?? null
  let authority = pseudo.get(':authority') ?? null
  if (protocol !== null && method !== 'CONNECT') return { ok: false, detail: ':protocol on a request that is not CONNECT' }
  if (method === 'CONNECT' && protocol === null) {
    if (scheme !== null || path !== null) return { ok: false, detail: 'CONNECT with :scheme or :path (RFC 9114 §4.4)' }
    if (authority === null || authority === '') return { ok: false, detail: 'CONNECT without :authority' }
  } else {
    if (scheme === null || scheme === '') return { ok: false, detail: 'request without :scheme' }
    if (path === null || path === '') return { ok: false, detail: 'request without :path' }
    if (authority === null) {
      for (const [name, value] of fields) if (name === 'host') { authority = value; break }
    }
    if (protocol !== null && (authority === null || authority === '')) return { ok: false, detail: 'extended CONNECT without :authority' }
  }
  return { ok: true, head: { method, scheme, authority, path, protocol, fields } }
}

/** The response head of a field section, or why it is malformed. */
export function validateResponse (section: readonly FieldLine[]): Validated<ResponseHead> {
  const split = splitSection(section, RESPONSE_PSEUDO, 'response')
  if (!split.ok) return split
  const status = split.pseudo.get(':status')
  if (status === undefined) return { ok: false, detail: 'response without :status' }
  const code = statusCode(status)
  if (code < 0) return { ok: false, detail: `:status ${JSON.stringify(status)} is not a 3-digit code` }
  if (code === 101) return { ok: false, detail: '101 Switching Protocols does not exist in HTTP/3 (RFC 9114 §4.5)' }
  return { ok: true, head: { status: code, fields: split.fields } }
}

/** A 3-digit status 100..599 as a number, else -1. */
function statusCode (status: string): number {
  if (status.length !== 3) return -1
  let code = 0
  for (let i = 0; i < 3; i++) {
    const digit = status.charCodeAt(i) - 0x30
    if (digit < 0 || digit > 9) return -1
    code = code * 10 + digit
  }
  return code >= 100 && code <= 599 ? code : -1
}

/** A trailer section: regular fields only. */
export function validateTrailers (section: readonly FieldLine[]): Validated<FieldLine[]> {
  for (const [name, value] of section) {
    if (name.charCodeAt(0) === 0x3a) return { ok: false, detail: `pseudo-header ${name} in trailers` }
    const bad = checkFieldLine(name, value)
    if (bad !== null) return { ok: false, detail: bad }
  }
  return { ok: true, head: [...section] }
}
