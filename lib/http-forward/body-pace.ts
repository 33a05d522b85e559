/**
 * How fast a request body must arrive (SPEC §12): the rules, apart from the timers and
 * streams that feed them (forwarder.ts checks every body being read on one coarse tick).
 *
 * - idle: no byte for --http-idle-timeout-ms → request_timeout.
 * - rate: fewer than --http-body-min-bytes-per-second × window bytes in a window of
 *   --http-body-rate-window-ms → body_rate_too_low. Windows are consecutive (each starts where
 *   the last was judged), so a client may pause within one as long as the window's average
 *   holds, as with nginx's client_body_timeout, which times each read rather than the body.
 * - deadline: the body not complete --http-body-deadline-ms after the request head →
 *   body_deadline_exceeded.
 * Time the router itself holds the body back (the request waits for a pod connection, or the
 * pod reads slowly: the stream is paused) is the router's, not the client's: it restarts the
 * rate window and the idle clock, and it does not count towards the deadline.
 */

export type BodyVerdict = 'request_timeout' | 'body_rate_too_low' | 'body_deadline_exceeded'

export interface BodyLimits {
  readonly idleTimeoutMs: number
  /** 0: no minimum rate. */
  readonly minBytesPerSecond: number
  readonly rateWindowMs: number
  /** 0: no deadline. */
  readonly deadlineMs: number
}

/** One body's progress; times are the same monotonic clock's milliseconds. */
export class BodyPace {
  /** Bytes received so far. */
  bytes = 0
  /** When the last byte arrived (or the router last held the body back). */
  lastByteAt: number
  windowStart: number
  windowBytes = 0
  /** The deadline, moved later by the time the router held the body back. */
  deadlineAt: number
  /** When the last check ran. */
  checkedAt: number

  constructor (now: number, limits: BodyLimits) {
    this.lastByteAt = now
    this.windowStart = now
    this.checkedAt = now
    this.deadlineAt = limits.deadlineMs > 0 ? now + limits.deadlineMs : Number.POSITIVE_INFINITY
  }

  received (bytes: number, now: number): void {
    this.bytes += bytes
    this.lastByteAt = now
  }

  /**
   * Judges the body at now; held: the router is holding it back (the stream is paused). Null
   * while it keeps pace.
   */
  check (now: number, held: boolean, limits: BodyLimits): BodyVerdict | null {
    const since = now - this.checkedAt
    this.checkedAt = now
    if (held) {
      this.lastByteAt = now
      this.windowStart = now
      this.windowBytes = this.bytes
      this.deadlineAt += since
      return null
    }
    if (now - this.lastByteAt >= limits.idleTimeoutMs) return 'request_timeout'
    if (now >= this.deadlineAt) return 'body_deadline_exceeded'
    const elapsed = now - this.windowStart
    if (limits.minBytesPerSecond > 0 && elapsed >= limits.rateWindowMs) {
      if ((this.bytes - this.windowBytes) * 1000 < limits.minBytesPerSecond * elapsed) return 'body_rate_too_low'
      this.windowStart = now
      this.windowBytes = this.bytes
    }
    return null
  }
}
