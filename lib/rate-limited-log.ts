/**
 * At most one log line per key per interval, for events an unauthenticated peer can cause at
 * will (a refused QUIC handshake, an unknown SNI): a flood must not become a log flood, and the
 * line that is written says how many were left out since the last one. Keys must come from a
 * bounded set (a reason code), so the map stays small. The clock is passed in (tests).
 */
export class RateLimitedLog {
  readonly #intervalMs: number
  readonly #now: () => number
  readonly #last = new Map<string, { at: number, suppressed: number }>()

  constructor (intervalMs = 60_000, now: () => number = Date.now) {
    this.#intervalMs = intervalMs
    this.#now = now
  }

  /**
   * Whether to log an event of this key now: the number of events of the key suppressed since
   * the last line (0 for the first), or null to stay quiet.
   */
  take (key: string): number | null {
    const now = this.#now()
    const entry = this.#last.get(key)
    if (entry === undefined) {
      this.#last.set(key, { at: now, suppressed: 0 })
      return 0
    }
    if (now - entry.at < this.#intervalMs) {
      entry.suppressed++
      return null
    }
    const suppressed = entry.suppressed
    entry.at = now
    entry.suppressed = 0
    return suppressed
  }
}
