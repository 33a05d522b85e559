/**
 * HTTP/3 SETTINGS (RFC 9114 §7.2.4) and the WebTransport draft both ends speak, chosen from
 * the SETTINGS exchange.
 *
 * Deployed peers, measured: Chromium 156 offers draft-02 by default — it sends
 * SETTINGS_ENABLE_WEBTRANSPORT (0x2b603742) = 1, SETTINGS_H3_DATAGRAM 0x33 and its draft-04
 * twin 0xffd277, and a GREASE setting; with a feature flag it also offers draft-07
 * (SETTINGS_WEBTRANSPORT_MAX_SESSIONS 0xc671706a). The Rust `h3` crate (0.0.8) under the real
 * Pylon and Stargate is draft-02 only, with 0x2b603743 as its max-sessions setting. Drafts
 * 13+ renamed the max-sessions setting to 0x14e9cd29 (SETTINGS_WT_MAX_SESSIONS); they are
 * recognised but not offered, because they add session flow control this relay does not
 * implement. The `sec-webtransport-http3-draft02: 1` request header proves nothing: Chromium
 * sends it whatever was negotiated.
 */
import { type H3Failure, failure } from './errors.ts'
import { FRAME } from './frames.ts'
import { decodeVarint, varintLengthOf, varintSize, writeVarint } from '../varint.ts'

export const SETTING = {
  QPACK_MAX_TABLE_CAPACITY: 0x01,
  MAX_FIELD_SECTION_SIZE: 0x06,
  QPACK_BLOCKED_STREAMS: 0x07,
  /** RFC 9220 §3: extended CONNECT. */
  ENABLE_CONNECT_PROTOCOL: 0x08,
  /** RFC 9297 §2.1.1. */
  H3_DATAGRAM: 0x33,
  /** draft-ietf-masque-h3-datagram-04, still sent by Chromium. */
  H3_DATAGRAM_DRAFT04: 0xffd277,
  /** draft-ietf-webtrans-http3-02. */
  ENABLE_WEBTRANSPORT: 0x2b603742,
  /** The h3 crate's max sessions for draft-02. */
  WEBTRANSPORT_MAX_SESSIONS_DRAFT02: 0x2b603743,
  /** draft-ietf-webtrans-http3-07 .. -12. */
  WEBTRANSPORT_MAX_SESSIONS: 0xc671706a,
  /** draft-ietf-webtrans-http3-13+. */
  WT_MAX_SESSIONS: 0x14e9cd29,
} as const

/** HTTP/2 settings that have no HTTP/3 meaning; receiving one is H3_SETTINGS_ERROR (§7.2.4.1). */
const RESERVED_H2_SETTINGS: ReadonlySet<number> = new Set([0x02, 0x03, 0x04, 0x05])
/** Settings whose value is a boolean; anything but 0 or 1 is H3_SETTINGS_ERROR (RFC 9220 §3, RFC 9297 §2.1.1). */
const BOOLEAN_SETTINGS: ReadonlySet<number> = new Set([SETTING.ENABLE_CONNECT_PROTOCOL, SETTING.H3_DATAGRAM, SETTING.ENABLE_WEBTRANSPORT])

export type WebTransportDraft = 'draft02' | 'draft07' | 'draft13'

/** What this implementation can speak, newest first. */
export const SUPPORTED_DRAFTS: readonly WebTransportDraft[] = ['draft07', 'draft02']

export type SettingsDecode =
  | { readonly ok: true, readonly settings: ReadonlyMap<number, number> }
  | { readonly ok: false, readonly failure: H3Failure }

/** A SETTINGS payload: identifier/value pairs, each identifier at most once. */
export function decodeSettings (payload: Uint8Array): SettingsDecode {
  const settings = new Map<number, number>()
  let at = 0
  while (at < payload.length) {
    const id = decodeVarint(payload, at)
    if (id < 0) return { ok: false, failure: failure('frame_malformed', 'SETTINGS payload ends inside an identifier') }
    at += varintLengthOf(payload[at] as number)
    const value = decodeVarint(payload, at)
    if (value < 0) return { ok: false, failure: failure('frame_malformed', 'SETTINGS payload ends inside a value') }
    at += varintLengthOf(payload[at] as number)
    if (RESERVED_H2_SETTINGS.has(id)) return { ok: false, failure: failure('settings_invalid', `HTTP/2 setting 0x${id.toString(16)}`) }
    if (settings.has(id)) return { ok: false, failure: failure('settings_invalid', `setting 0x${id.toString(16)} sent twice`) }
    if (BOOLEAN_SETTINGS.has(id) && value > 1) return { ok: false, failure: failure('settings_invalid', `setting 0x${id.toString(16)} must be 0 or 1, got ${value}`) }
    settings.set(id, value)
  }
  return { ok: true, settings }
}

/** A SETTINGS frame of the given identifier/value pairs, in order. */
export function encodeSettingsFrame (settings: readonly (readonly [id: number, value: number])[]): Buffer {
  let length = 0
  for (const [id, value] of settings) length += varintSize(id) + varintSize(value)
  const out = Buffer.allocUnsafe(varintSize(FRAME.SETTINGS) + varintSize(length) + length)
  let at = writeVarint(out, writeVarint(out, 0, FRAME.SETTINGS), length)
  for (const [id, value] of settings) at = writeVarint(out, writeVarint(out, at, id), value)
  return out
}

/** The settings of a peer that matter here, with RFC defaults for those it left out. */
export interface PeerSettings {
  /** RFC 9114 §7.2.4.1: unlimited when absent. */
  readonly maxFieldSectionSize: number
  readonly qpackMaxTableCapacity: number
  readonly enableConnectProtocol: boolean
  readonly h3Datagram: boolean
  /** The newest WebTransport draft the peer offers, or null. */
  readonly webTransport: WebTransportDraft | null
  /** The peer's max sessions for that draft (draft-02 without the h3 crate's setting: 1). */
  readonly webTransportMaxSessions: number
}

export function interpretSettings (settings: ReadonlyMap<number, number>): PeerSettings {
  const draft13 = settings.get(SETTING.WT_MAX_SESSIONS) ?? 0
  const draft07 = settings.get(SETTING.WEBTRANSPORT_MAX_SESSIONS) ?? 0
  const draft02 = settings.get(SETTING.ENABLE_WEBTRANSPORT) === 1
  let webTransport: WebTransportDraft | null = null
  let webTransportMaxSessions = 0
  if (draft13 > 0) {
    webTransport = 'draft13'
    webTransportMaxSessions = draft13
  } else if (draft07 > 0) {
    webTransport = 'draft07'
    webTransportMaxSessions = draft07
  } else if (draft02) {
    webTransport = 'draft02'
    webTransportMaxSessions = settings.get(SETTING.WEBTRANSPORT_MAX_SESSIONS_DRAFT02) ?? 1
  }
  return {
    maxFieldSectionSize: settings.get(SETTING.MAX_FIELD_SECTION_SIZE) ?? Number.POSITIVE_INFINITY,
    qpackMaxTableCapacity: settings.get(SETTING.QPACK_MAX_TABLE_CAPACITY) ?? 0,
    enableConnectProtocol: settings.get(SETTING.ENABLE_CONNECT_PROTOCOL) === 1,
    h3Datagram: settings.get(SETTING.H3_DATAGRAM) === 1 || settings.get(SETTING.H3_DATAGRAM_DRAFT04) === 1,
    webTransport,
    webTransportMaxSessions,
  }
}

/**
 * The draft both ends speak: the newest of ours that the peer's SETTINGS offer. A peer that
 * offers draft-07 also speaks draft-02 when it sends ENABLE_WEBTRANSPORT too (Chromium with
 * the draft-07 flag sends both), so older drafts are checked one by one, not only the
 * peer's newest. Every draft needs HTTP datagrams (draft-02 §3.1, draft-07 §3.1).
 */
export function negotiateWebTransport (settings: ReadonlyMap<number, number>, ours: readonly WebTransportDraft[] = SUPPORTED_DRAFTS): WebTransportDraft | null {
  const datagrams = settings.get(SETTING.H3_DATAGRAM) === 1 || settings.get(SETTING.H3_DATAGRAM_DRAFT04) === 1
  if (!datagrams) return null
  for (const draft of ours) {
    if (offers(settings, draft)) return draft
  }
  return null
}

function offers (settings: ReadonlyMap<number, number>, draft: WebTransportDraft): boolean {
  switch (draft) {
    case 'draft13': return (settings.get(SETTING.WT_MAX_SESSIONS) ?? 0) > 0
    case 'draft07': return (settings.get(SETTING.WEBTRANSPORT_MAX_SESSIONS) ?? 0) > 0
    case 'draft02': return settings.get(SETTING.ENABLE_WEBTRANSPORT) === 1
    default: {
      const never: never = draft
      return never
    }
  }
}

export interface LocalSettingsOptions {
  readonly role: 'client' | 'server'
  readonly maxFieldSectionSize: number
  /** WebTransport sessions this endpoint accepts per connection (0: no WebTransport). */
  readonly webTransportMaxSessions: number
  readonly drafts?: readonly WebTransportDraft[]
  /** Add one reserved setting (0x1f * N + 0x21) so peers keep ignoring unknown ones (§7.2.4.1). */
  readonly greaseId?: number | null
}

/**
 * What this endpoint sends: no dynamic table, its field section limit, extended CONNECT
 * (servers; RFC 9220 gives it no meaning from a client), HTTP datagrams, and every offered
 * WebTransport draft's settings, so the peer picks.
 */
export function localSettings (options: LocalSettingsOptions): [id: number, value: number][] {
  const drafts = options.drafts ?? SUPPORTED_DRAFTS
  const out: [number, number][] = [
    [SETTING.QPACK_MAX_TABLE_CAPACITY, 0],
    [SETTING.QPACK_BLOCKED_STREAMS, 0],
    [SETTING.MAX_FIELD_SECTION_SIZE, options.maxFieldSectionSize],
  ]
  if (options.role === 'server') out.push([SETTING.ENABLE_CONNECT_PROTOCOL, 1])
  if (options.webTransportMaxSessions > 0) {
    out.push([SETTING.H3_DATAGRAM, 1])
    for (const draft of drafts) {
      switch (draft) {
        case 'draft02':
          out.push([SETTING.ENABLE_WEBTRANSPORT, 1], [SETTING.WEBTRANSPORT_MAX_SESSIONS_DRAFT02, options.webTransportMaxSessions])
          break
        case 'draft07':
          out.push([SETTING.WEBTRANSPORT_MAX_SESSIONS, options.webTransportMaxSessions])
          break
        case 'draft13':
          out.push([SETTING.WT_MAX_SESSIONS, options.webTransportMaxSessions])
          break
        default: {
          const never: never = draft
          throw new Error(`unknown draft ${String(never)}`)
        }
      }
    }
  }
  if (options.greaseId !== undefined && options.greaseId !== null) out.push([options.greaseId, 0])
  return out
}

/** A reserved identifier 0x1f * N + 0x21 for a random N (§7.2.4.1), kept below 2^32 so it stays exact. */
export function greaseSettingId (random: () => number = Math.random): number {
  return 0x1f * Math.floor(random() * 0x7fffff) + 0x21
}
