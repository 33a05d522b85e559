/**
 * HTTP/3, QPACK, HTTP datagram and WebTransport error codes, and which protocol condition
 * closes with which code. One table so the code a peer sees, the reason text and the scope
 * (whole connection or one stream) cannot drift apart.
 *
 * Sources: RFC 9114 §8.1 (H3_*), RFC 9204 §6 (QPACK_*), RFC 9297 §2.1.1 (H3_DATAGRAM_ERROR),
 * draft-ietf-webtrans-http3 §9.5 (WebTransport codes and the application error code space).
 */

export const H3_ERROR = {
  H3_NO_ERROR: 0x100,
  H3_GENERAL_PROTOCOL_ERROR: 0x101,
  H3_INTERNAL_ERROR: 0x102,
  H3_STREAM_CREATION_ERROR: 0x103,
  H3_CLOSED_CRITICAL_STREAM: 0x104,
  H3_FRAME_UNEXPECTED: 0x105,
  H3_FRAME_ERROR: 0x106,
  H3_EXCESSIVE_LOAD: 0x107,
  H3_ID_ERROR: 0x108,
  H3_SETTINGS_ERROR: 0x109,
  H3_MISSING_SETTINGS: 0x10a,
  H3_REQUEST_REJECTED: 0x10b,
  H3_REQUEST_CANCELLED: 0x10c,
  H3_REQUEST_INCOMPLETE: 0x10d,
  H3_MESSAGE_ERROR: 0x10e,
  H3_CONNECT_ERROR: 0x10f,
  H3_VERSION_FALLBACK: 0x110,
  QPACK_DECOMPRESSION_FAILED: 0x200,
  QPACK_ENCODER_STREAM_ERROR: 0x201,
  QPACK_DECODER_STREAM_ERROR: 0x202,
  H3_DATAGRAM_ERROR: 0x33,
  /** A WebTransport stream for a session that never came (draft-ietf-webtrans-http3 §4.6). */
  WT_BUFFERED_STREAM_REJECTED: 0x3994bd84,
  /** A WebTransport stream whose session has ended. */
  WT_SESSION_GONE: 0x170d7b68,
} as const

/**
 * Protocol violations this implementation detects, each with the code it closes with and
 * whether the whole connection (RFC 9114 "connection error") or only the stream goes.
 */
export const H3_VIOLATIONS = {
  frame_malformed: { code: H3_ERROR.H3_FRAME_ERROR, scope: 'connection', reason: 'malformed frame' },
  frame_truncated: { code: H3_ERROR.H3_FRAME_ERROR, scope: 'connection', reason: 'stream ended inside a frame' },
  frame_too_large: { code: H3_ERROR.H3_EXCESSIVE_LOAD, scope: 'connection', reason: 'frame larger than this endpoint accepts' },
  frame_unexpected: { code: H3_ERROR.H3_FRAME_UNEXPECTED, scope: 'connection', reason: 'frame not allowed on this stream' },
  frame_reserved_h2: { code: H3_ERROR.H3_FRAME_UNEXPECTED, scope: 'connection', reason: 'HTTP/2 frame type' },
  settings_missing: { code: H3_ERROR.H3_MISSING_SETTINGS, scope: 'connection', reason: 'control stream must start with SETTINGS' },
  settings_duplicate: { code: H3_ERROR.H3_FRAME_UNEXPECTED, scope: 'connection', reason: 'second SETTINGS frame' },
  settings_invalid: { code: H3_ERROR.H3_SETTINGS_ERROR, scope: 'connection', reason: 'invalid setting' },
  critical_stream_closed: { code: H3_ERROR.H3_CLOSED_CRITICAL_STREAM, scope: 'connection', reason: 'critical stream closed' },
  stream_duplicate: { code: H3_ERROR.H3_STREAM_CREATION_ERROR, scope: 'connection', reason: 'second stream of a unique type' },
  stream_wrong_direction: { code: H3_ERROR.H3_STREAM_CREATION_ERROR, scope: 'connection', reason: 'stream not allowed from this peer' },
  push_refused: { code: H3_ERROR.H3_ID_ERROR, scope: 'connection', reason: 'server push was never allowed' },
  goaway_increased: { code: H3_ERROR.H3_ID_ERROR, scope: 'connection', reason: 'GOAWAY identifier increased' },
  goaway_invalid: { code: H3_ERROR.H3_ID_ERROR, scope: 'connection', reason: 'GOAWAY identifier is not a client-initiated bidirectional stream' },
  qpack_decompression: { code: H3_ERROR.QPACK_DECOMPRESSION_FAILED, scope: 'connection', reason: 'field section cannot be decoded' },
  qpack_encoder_stream: { code: H3_ERROR.QPACK_ENCODER_STREAM_ERROR, scope: 'connection', reason: 'encoder stream instruction with no dynamic table' },
  qpack_decoder_stream: { code: H3_ERROR.QPACK_DECODER_STREAM_ERROR, scope: 'connection', reason: 'decoder stream instruction for a dynamic table never used' },
  datagram_malformed: { code: H3_ERROR.H3_DATAGRAM_ERROR, scope: 'connection', reason: 'malformed HTTP datagram' },
  unknown_stream_type: { code: H3_ERROR.H3_STREAM_CREATION_ERROR, scope: 'stream', reason: 'unknown unidirectional stream type' },
  message_malformed: { code: H3_ERROR.H3_MESSAGE_ERROR, scope: 'stream', reason: 'malformed message' },
  field_section_too_large: { code: H3_ERROR.H3_EXCESSIVE_LOAD, scope: 'stream', reason: 'field section larger than this endpoint accepts' },
  request_incomplete: { code: H3_ERROR.H3_REQUEST_INCOMPLETE, scope: 'stream', reason: 'stream ended before the request head' },
  request_rejected: { code: H3_ERROR.H3_REQUEST_REJECTED, scope: 'stream', reason: 'request refused before processing' },
  capsule_malformed: { code: H3_ERROR.H3_MESSAGE_ERROR, scope: 'stream', reason: 'malformed capsule' },
  session_unknown: { code: H3_ERROR.WT_BUFFERED_STREAM_REJECTED, scope: 'stream', reason: 'webtransport stream for no session' },
  session_gone: { code: H3_ERROR.WT_SESSION_GONE, scope: 'stream', reason: 'webtransport session has ended' },
} as const satisfies Record<string, { code: number, scope: 'connection' | 'stream', reason: string }>

export type H3Violation = keyof typeof H3_VIOLATIONS

/** A detected violation: the table row's name plus detail for logs (never secrets). */
export interface H3Failure {
  readonly violation: H3Violation
  readonly detail: string
}

export function failure (violation: H3Violation, detail: string = H3_VIOLATIONS[violation].reason): H3Failure {
  return { violation, detail }
}

/**
 * WebTransport application error codes (32 bits) live in a slice of the HTTP/3 code space
 * that skips the reserved GREASE codepoints 0x1f * N + 0x21 (draft-ietf-webtrans-http3 §4.4):
 * one reserved value after every 0x1e application codes.
 */
export const WT_APPLICATION_ERROR_FIRST = 0x52e4a40fa8db
export const WT_APPLICATION_ERROR_LAST = 0x52e5ac983162

export function webTransportCodeToHttp3 (code: number): number {
  if (!Number.isInteger(code) || code < 0 || code > 0xffffffff) throw new RangeError(`webtransport error code must be a 32-bit unsigned integer, got ${code}`)
  return WT_APPLICATION_ERROR_FIRST + code + Math.floor(code / 0x1e)
}

/** The WebTransport code an HTTP/3 reset code carries, or null when it carries none. */
export function http3CodeToWebTransport (code: number): number | null {
  if (code < WT_APPLICATION_ERROR_FIRST || code > WT_APPLICATION_ERROR_LAST) return null
  const shifted = code - WT_APPLICATION_ERROR_FIRST
  if ((shifted % 0x1f) === 0x1e) return null // a GREASE codepoint inside the range
  return shifted - Math.floor(shifted / 0x1f)
}
