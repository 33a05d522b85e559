/**
 * One hardened setup for every HTTP/2 listener the router runs (issue 17): the front door (h2c
 * and TLS, lib/front-door/listener.ts) and WebTransport over HTTP/2 (lib/tunnel/
 * webtransport-relay.ts). Both take their server options from hardenedHttp2Options and pass
 * every stream a client opens through Http2StreamGuard, so a limit set here holds on both.
 *
 * What each listener keeps for itself: its idle timeout (the front door's connection deadlines,
 * the relay's session tick; both close a session that carries no stream) and its answer to a
 * refused stream (an HTTP error body, a gRPC status, a WebTransport rejection).
 */
import type { ServerHttp2Session, ServerHttp2Stream, ServerOptions, Settings } from 'node:http2'
import { DEFAULT_RAPID_RESET, RapidResetGuard, type RapidResetGuardOptions } from './front-door/http2-guard.ts'

export interface Http2Limits {
  readonly maxConcurrentStreams: number
  /** Header lists over this (RFC 7541 §4.1 size) are answered 431 by the listener (see advertisedHeaderListSize). */
  readonly maxHeaderListSize: number
}

export const DEFAULT_HTTP2_LIMITS: Http2Limits = { maxConcurrentStreams: 1000, maxHeaderListSize: 16 * 1024 }

/**
 * The SETTINGS_MAX_HEADER_LIST_SIZE a listener advertises: twice the limit it answers 431
 * above. Node's binding enforces the advertised value itself once the client has acknowledged
 * the SETTINGS, and resets a stream over it with RST_STREAM ENHANCE_YOUR_CALM before any
 * handler sees it (src/node_http2.cc, Http2Stream::AddHeader); advertising the limit itself
 * turned the documented 431 into that reset for every client that acknowledges SETTINGS, i.e.
 * every real one. With twice the limit advertised, a list between the limit and twice it gets
 * the 431 (RFC 9113 §10.5.1); beyond that, the reset.
 */
export function advertisedHeaderListSize (limits: Http2Limits): number {
  return 2 * limits.maxHeaderListSize
}

/** Bytes a header field costs at least (RFC 7541 §4.1): 32 of overhead and a name of one. */
const MIN_FIELD_SIZE = 33

/** The options every router HTTP/2 server shares, with extra SETTINGS (e.g. extended CONNECT). */
export function hardenedHttp2Options (limits: Http2Limits, settings: Settings = {}): ServerOptions {
  const advertised = advertisedHeaderListSize(limits)
  return {
    settings: { ...settings, maxConcurrentStreams: limits.maxConcurrentStreams, maxHeaderListSize: advertised, enablePush: false },
    // Node resets a stream with more fields than this (ENHANCE_YOUR_CALM) whatever their size.
    // As many as fit in the advertised size, so the size decides: 300 short fields under the
    // limit are served, not reset.
    maxHeaderListPairs: Math.max(4, Math.floor(advertised / MIN_FIELD_SIZE)),
    // nghttp2's floods (CVE-2019-9512..9518): invalid frames, refused streams, SETTINGS and PINGs
    // a peer may make the server answer.
    maxSessionInvalidFrames: 100,
    maxSessionRejectedStreams: 100,
    maxSettings: 32,
    maxOutstandingPings: 10,
    // Registration and WebTransport streams are long-lived and many per session; Node's 10 MB
    // default session memory would refuse streams under load.
    maxSessionMemory: 64,
  }
}

/** RFC 7541 §4.1 size of a raw header list: name + value + 32 bytes per field. */
export function headerListSize (raw: readonly string[]): number {
  let size = 0
  for (let i = 0; i < raw.length; i++) size += (raw[i] as string).length
  return size + 16 * raw.length // 32 bytes of overhead per field, two entries per field
}

export type StreamAdmission = 'ok' | 'reset' | 'headers_too_large'

export interface Http2StreamGuardOptions {
  readonly maxHeaderListSize: number
  readonly rapidReset?: RapidResetGuardOptions
  /** A session told GOAWAY ENHANCE_YOUR_CALM for rapid resets (log and count it). */
  readonly onRapidReset: (session: ServerHttp2Session, resets: number, opened: number) => void
}

/** The per-stream checks of every router HTTP/2 listener: rapid reset, then the header list size. */
export class Http2StreamGuard {
  readonly #guard: RapidResetGuard
  readonly #maxHeaderListSize: number

  constructor (options: Http2StreamGuardOptions) {
    this.#maxHeaderListSize = options.maxHeaderListSize
    this.#guard = new RapidResetGuard({ ...(options.rapidReset ?? DEFAULT_RAPID_RESET), onTrip: options.onRapidReset })
  }

  /**
   * Call from the session's 'stream' event (which carries the session even for streams reset
   * before it ran): 'reset' when the client already reset the stream, 'headers_too_large' when
   * its header list is over the limit (the caller answers), else 'ok'.
   */
  admit (session: ServerHttp2Session, stream: ServerHttp2Stream, rawHeaders: readonly string[]): StreamAdmission {
    this.#guard.onStream(session, stream)
    if (stream.destroyed || stream.closed) return 'reset'
    return headerListSize(rawHeaders) > this.#maxHeaderListSize ? 'headers_too_large' : 'ok'
  }
}
