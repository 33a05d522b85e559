/**
 * Rapid-reset guard (CVE-2023-44487, SPEC §12): a client that opens streams and resets them
 * at once makes the server do work for nothing. Each session counts, per window, the streams
 * the client opened and those it reset within EARLY_MS of opening; when the window holds at
 * least minResets early resets and they are most of the streams, the session is told
 * GOAWAY ENHANCE_YOUR_CALM and closed. nghttp2's own reset rate limit stays in force below it.
 * Streams that close because their connection ended are not resets (see recordAbort).
 */
import { constants, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2'
import { destroyIfOpen, goawayIfOpen } from '../safe-io.ts'

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

function onStreamClose (this: GuardedStream): void {
  if (this.rstCode !== constants.NGHTTP2_NO_ERROR) this[kState]?.guard.recordAbort(this)
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
      if (stream.rstCode !== constants.NGHTTP2_NO_ERROR) this.recordAbort(stream)
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
    // destroyed session (issue 30): the 'close' events of those streams run after the
    // session was marked closed or destroyed.
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
