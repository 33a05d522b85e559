/**
 * What every HTTP/2 listener of the router admits, in one place: the front door (h2c and TLS,
 * lib/front-door/listener.ts) and WebTransport over HTTP/2 (lib/tunnel/webtransport-h2/relay.ts).
 * Both take their server options from hardenedHttp2Options and pass every stream a client
 * opens through Http2StreamGuard (rapid reset, then the header list size), so a limit set here
 * holds on both.
 *
 * What each listener keeps for itself: its idle timeout (the front door's connection deadlines,
 * the relay's session tick; both close a session that carries no stream), its answer to a
 * refused stream (an HTTP error body, a gRPC status, a WebTransport rejection), and its log
 * line and metric when the rapid-reset guard trips.
 *
 * Rapid reset (CVE-2023-44487, SPEC §12): a client that opens streams and resets them at once
 * makes the server do work for nothing. Each session counts, per window, the streams the client
 * opened and those it reset within earlyMs of opening; when the window holds at least minResets
 * early resets and they are most of the streams, the session is told GOAWAY ENHANCE_YOUR_CALM
 * and closed. A reset is any stream closed before its response was ended, whatever the code
 * (RST_STREAM NO_ERROR too). nghttp2's own reset rate limit stays in force below it. Streams that close
 * because their connection ended are not resets (see RapidResetGuard.recordAbort).
 */
import { constants, type ServerHttp2Session, type ServerHttp2Stream, type ServerOptions, type Settings } from 'node:http2'
import { destroyIfOpen, goawayIfOpen } from './safe-io.ts'

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

export interface RapidResetGuardOptions {
  readonly windowMs: number
  readonly minResets: number
  /** Fraction of opened streams that must be early resets (0..1). */
  readonly ratio: number
  readonly earlyMs: number
  readonly onTrip?: (session: ServerHttp2Session, resets: number, opened: number) => void
  readonly now?: () => number
}

export const DEFAULT_RAPID_RESET: RapidResetGuardOptions = { windowMs: 10_000, minResets: 200, ratio: 0.5, earlyMs: 1000 }

const GOAWAY_FLUSH_MS = 50

const kState = Symbol('rapid-reset')
const kOpenedAt = Symbol('opened-at')

interface GuardState {
  readonly guard: RapidResetGuard
  readonly session: ServerHttp2Session
  windowStart: number
  opened: number
  resets: number
  tripped: boolean
}

type GuardedSession = ServerHttp2Session & { [kState]?: GuardState }
type GuardedStream = ServerHttp2Stream & { [kOpenedAt]?: number, [kState]?: GuardState }

/**
 * A stream counts as reset when it closed before the router finished its response (Node marks
 * it aborted), whatever the RST_STREAM code: NO_ERROR included, which a client may send
 * (RFC 9113 §8.1) and which an attacker sends to look like a stream that completed. A client
 * that sends RST_STREAM NO_ERROR after the whole response (as gRPC clients may once they have
 * the trailers) is not counted: the response was ended first.
 */
function resetEarly (stream: ServerHttp2Stream): boolean {
  return stream.aborted || stream.rstCode !== constants.NGHTTP2_NO_ERROR
}

function onStreamClose (this: GuardedStream): void {
  if (resetEarly(this)) this[kState]?.guard.recordAbort(this)
}

export class RapidResetGuard {
  readonly #options: RapidResetGuardOptions
  readonly #now: () => number

  constructor (options: RapidResetGuardOptions = DEFAULT_RAPID_RESET) {
    this.#options = options
    this.#now = options.now ?? performance.now.bind(performance)
  }

  /**
   * Call for every stream the client opens, with its session: a stream whose HEADERS and
   * RST_STREAM arrived in one read is already closed (and detached from its session) when
   * the 'stream' event runs, which is exactly the burst this guard exists for.
   */
  onStream (session: GuardedSession, stream: GuardedStream): void {
    const now = this.#now()
    let state = session[kState]
    if (state === undefined) {
      state = { guard: this, session, windowStart: now, opened: 0, resets: 0, tripped: false }
      session[kState] = state
    }
    if (now - state.windowStart > this.#options.windowMs) {
      state.windowStart = now
      state.opened = 0
      state.resets = 0
    }
    state.opened++
    stream[kOpenedAt] = now
    stream[kState] = state
    if (stream.destroyed) {
      if (resetEarly(stream)) this.recordAbort(stream)
    } else {
      stream.once('close', onStreamClose)
    }
  }

  /** A stream that closed with a reset (RST_STREAM) rather than by completing. */
  recordAbort (stream: GuardedStream): void {
    const state = stream[kState]
    const openedAt = stream[kOpenedAt]
    if (state === undefined || openedAt === undefined || state.tripped) return
    const session = state.session
    // Streams closed because their connection ended (FIN, RST, a connection error, a GOAWAY,
    // nghttp2 giving up on the session) carry CANCEL or the session's code, but the client
    // reset none of them, and there is no connection left to protect. Counted as resets, 200
    // open streams on a connection that went away tripped the guard and its GOAWAY went to a
    // destroyed session: the 'close' events of those streams run after the session was marked
    // closed or destroyed.
    if (session.closed || session.destroyed) return
    if (this.#now() - openedAt > this.#options.earlyMs) return
    state.resets++
    if (state.resets >= this.#options.minResets && state.resets >= state.opened * this.#options.ratio) {
      state.tripped = true
      this.#options.onTrip?.(session, state.resets, state.opened)
      // GOAWAY first, then cut the connection once the frame had time to leave: destroy()
      // right away would drop the GOAWAY, and destroy(err, code) sends NO_ERROR instead.
      goawayIfOpen(session, constants.NGHTTP2_ENHANCE_YOUR_CALM)
      setTimeout(destroyIfOpen, GOAWAY_FLUSH_MS, session).unref()
    }
  }
}
