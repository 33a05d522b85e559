/**
 * Rate limits for log lines that unauthenticated peers can cause at will: rejected
 * handshakes, protocol errors, close reasons of their choosing. Without a limit, a client
 * opening connections in a loop writes the router's log at line rate and drowns everything
 * else (and fills the node's disk). Each limited message, per reason, gets `burst` lines per
 * window; the rest of the window is counted and reported in one summary line when the window
 * ends ("log lines suppressed", with the message and the count).
 *
 * Keys are the message plus at most one bounded field (the reason code, never text a peer
 * chose), and the table of keys is capped, so the limiter's own memory is bounded too.
 */

export interface LimitedMessage {
  /** The pino message, exactly, or a prefix when it ends with '*'. */
  readonly msg: string
  /** A field of the log object whose value (a bounded code) splits the limit, e.g. 'reason'. */
  readonly by?: string
}

export interface LogRateLimitOptions {
  readonly messages: readonly LimitedMessage[]
  readonly windowMs: number
  readonly burst: number
  readonly now?: () => number
  /** Called once per key and window with what was suppressed. */
  readonly onSuppressed: (msg: string, reason: string | null, suppressed: number) => void
}

/** Keys beyond this share one bucket (a peer cannot grow the table). */
const MAX_KEYS = 256
const OVERFLOW_KEY = '\u0000overflow'

interface Bucket {
  readonly msg: string
  readonly reason: string | null
  windowStart: number
  count: number
  suppressed: number
}

export class LogRateLimiter {
  readonly #exact = new Map<string, LimitedMessage>()
  readonly #prefixes: LimitedMessage[] = []
  readonly #buckets = new Map<string, Bucket>()
  readonly #options: LogRateLimitOptions
  readonly #now: () => number
  #flushTimer: NodeJS.Timeout | null = null

  constructor (options: LogRateLimitOptions) {
    this.#options = options
    this.#now = options.now ?? Date.now
    for (const message of options.messages) {
      if (message.msg.endsWith('*')) this.#prefixes.push({ ...message, msg: message.msg.slice(0, -1) })
      else this.#exact.set(message.msg, message)
    }
  }

  /** True when the line may be written. Unlimited messages always may. */
  allow (msg: string, fields: Record<string, unknown> | null): boolean {
    const spec = this.#exact.get(msg) ?? this.#prefixOf(msg)
    if (spec === undefined) return true
    const raw = spec.by === undefined || fields === null ? undefined : fields[spec.by]
    const reason = typeof raw === 'string' || typeof raw === 'number' ? String(raw).slice(0, 64) : null
    const name = spec.msg
    let key = reason === null ? name : `${name}\u0000${reason}`
    let bucket = this.#buckets.get(key)
    if (bucket === undefined) {
      if (this.#buckets.size >= MAX_KEYS) key = OVERFLOW_KEY
      bucket = this.#buckets.get(key)
      if (bucket === undefined) {
        bucket = { msg: key === OVERFLOW_KEY ? 'other limited log lines' : name, reason: key === OVERFLOW_KEY ? null : reason, windowStart: this.#now(), count: 0, suppressed: 0 }
        this.#buckets.set(key, bucket)
      }
    }
    const now = this.#now()
    if (now - bucket.windowStart >= this.#options.windowMs) this.#roll(bucket, now)
    if (bucket.count < this.#options.burst) {
      bucket.count++
      return true
    }
    bucket.suppressed++
    this.#scheduleFlush()
    return false
  }

  /** Reports what is still suppressed and stops the timer (shutdown). */
  flush (): void {
    if (this.#flushTimer !== null) clearTimeout(this.#flushTimer)
    this.#flushTimer = null
    const now = this.#now()
    for (const bucket of this.#buckets.values()) this.#roll(bucket, now)
  }

  #prefixOf (msg: string): LimitedMessage | undefined {
    for (const spec of this.#prefixes) if (msg.startsWith(spec.msg)) return spec
    return undefined
  }

  #roll (bucket: Bucket, now: number): void {
    if (bucket.suppressed > 0) this.#options.onSuppressed(bucket.msg, bucket.reason, bucket.suppressed)
    bucket.windowStart = now
    bucket.count = 0
    bucket.suppressed = 0
  }

  #scheduleFlush (): void {
    if (this.#flushTimer !== null) return
    this.#flushTimer = setTimeout(() => {
      this.#flushTimer = null
      const now = this.#now()
      let pending = false
      for (const [key, bucket] of this.#buckets) {
        if (now - bucket.windowStart >= this.#options.windowMs) {
          this.#roll(bucket, now)
          // Idle keys leave the table, so it holds only what is flooding now.
          if (bucket.count === 0) this.#buckets.delete(key)
        } else if (bucket.suppressed > 0) {
          pending = true
        }
      }
      if (pending) this.#scheduleFlush()
    }, this.#options.windowMs)
    this.#flushTimer.unref()
  }
}
