/**
 * Gives the memory that waves of connections leave in malloc back to the kernel.
 *
 * A connection's native state (OpenSSL's buffers for a TLS socket, nghttp2 sessions, HTTP
 * parsers) is malloc'd. glibc returns freed memory to the kernel only from the top of its heap,
 * and whatever is still allocated up there pins it: after 9,900 TLS connections close before
 * their handshake, RSS stays at the wave's peak (0.74 GiB) with 14 MiB of it allocated, and
 * each further wave leaves more (1.37 GiB after eight), past a 1 GiB container limit — a way for
 * anyone who can open a TCP connection to get the router OOM-killed. `malloc_trim` gives the
 * free pages back (the same eight waves leave about 0.3 GiB; docs/configuration.md).
 *
 * Every interval the trimmer reads RSS, malloc's allocated bytes and V8's resident heap. What
 * is resident but neither — free malloc pages, plus the binary, its libraries and the thread
 * stacks — is the idle estimate. When it has grown by the threshold since the last trim (or
 * since the router started), it trims once; the estimate after a trim becomes the baseline, so
 * pages a trim cannot release (a free chunk sharing its page with a live one) do not set off a
 * trim every interval. A trim holds malloc's lock, and the event loop, for about 50–100 ms per
 * GiB of arena (measured on the development machine); it runs at most once per interval.
 */
import { getHeapStatistics } from 'node:v8'

/** What the trimmer needs of the native addon (lib/quic/native.ts). */
export interface NativeHeap {
  heapStats (): { readonly inUse: number }
  heapTrim (): boolean
}

export interface MemoryReading {
  readonly rss: number
  /** malloc's allocated bytes. */
  readonly mallocInUse: number
  /** V8's heap pages in RAM (V8 maps them itself, not through malloc). */
  readonly v8Resident: number
}

/** Resident bytes neither malloc'd nor V8's heap. */
export function idleBytes (reading: MemoryReading): number {
  return Math.max(0, reading.rss - reading.mallocInUse - reading.v8Resident)
}

/**
 * One check: trim when the idle estimate has grown by `threshold` over the baseline. The
 * baseline is the first estimate seen, follows the estimate down, and is replaced after a trim
 * by what the trim left (the caller's job: it is a new reading).
 */
export function decideTrim (idle: number, baseline: number | null, threshold: number): { readonly trim: boolean, readonly baseline: number } {
  if (baseline === null || idle < baseline) return { trim: false, baseline: idle }
  return { trim: threshold > 0 && idle - baseline >= threshold, baseline }
}

export interface TrimMetrics {
  readonly trims: { inc (): void }
  readonly releasedBytes: { inc (value: number): void }
  /** state: in_use (malloc'd), idle (the estimate above), as of the last check. */
  readonly heapBytes: { set (labels: { state: 'in_use' | 'idle' }, value: number): void }
}

export interface TrimLogger {
  info (fields: object, msg: string): void
  error (fields: object, msg: string): void
}

export interface NativeHeapTrimmerOptions {
  readonly heap: NativeHeap
  /** 0: never trim (the gauges still follow). */
  readonly thresholdBytes: number
  readonly intervalMs: number
  readonly metrics: TrimMetrics
  readonly logger: TrimLogger
  /** RSS and V8's resident heap; the process's own by default. */
  readonly readProcess?: () => { readonly rss: number, readonly v8Resident: number }
  readonly now?: () => number
}

export interface TrimOutcome {
  readonly rssBefore: number
  readonly rssAfter: number
  readonly durationMs: number
}

function readOwnProcess (): { rss: number, v8Resident: number } {
  return { rss: process.memoryUsage.rss(), v8Resident: getHeapStatistics().total_physical_size }
}

export class NativeHeapTrimmer {
  readonly #options: NativeHeapTrimmerOptions
  readonly #readProcess: () => { readonly rss: number, readonly v8Resident: number }
  readonly #now: () => number
  #baseline: number | null = null
  #timer: NodeJS.Timeout | null = null
  #failed = false

  constructor (options: NativeHeapTrimmerOptions) {
    this.#options = options
    this.#readProcess = options.readProcess ?? readOwnProcess
    this.#now = options.now ?? performance.now.bind(performance)
  }

  /**
   * Takes the baseline now, then checks every interval until stop(); the timer does not keep
   * the process alive. Called as the router starts, so a wave that comes and goes before the
   * first interval is measured against the idle router, not taken for the baseline.
   */
  start (): void {
    if (this.#timer !== null || this.#failed) return
    this.check()
    if (this.#failed) return
    this.#timer = setInterval(() => { this.check() }, this.#options.intervalMs)
    this.#timer.unref()
  }

  stop (): void {
    if (this.#timer !== null) clearInterval(this.#timer)
    this.#timer = null
  }

  /** One check (the timer's; tests call it directly): what a trim did, or null when none ran. */
  check (): TrimOutcome | null {
    if (this.#failed) return null
    try {
      return this.#check()
    } catch (err) {
      // A timer callback must not throw (the process's safety net would end the router); the
      // addon failing here means no trim will work, so stop asking.
      this.#failed = true
      this.stop()
      this.#options.logger.error({ err }, 'native heap: reading or trimming malloc\'s heap failed; trimming stopped')
      return null
    }
  }

  #read (): MemoryReading {
    const own = this.#readProcess()
    return { rss: own.rss, v8Resident: own.v8Resident, mallocInUse: this.#options.heap.heapStats().inUse }
  }

  #check (): TrimOutcome | null {
    const { metrics, heap, thresholdBytes, logger } = this.#options
    const before = this.#read()
    const idle = idleBytes(before)
    metrics.heapBytes.set({ state: 'in_use' }, before.mallocInUse)
    metrics.heapBytes.set({ state: 'idle' }, idle)
    const decision = decideTrim(idle, this.#baseline, thresholdBytes)
    this.#baseline = decision.baseline
    if (!decision.trim) return null
    const startedAt = this.#now()
    heap.heapTrim()
    const durationMs = this.#now() - startedAt
    const after = this.#read()
    this.#baseline = idleBytes(after)
    metrics.trims.inc()
    metrics.releasedBytes.inc(Math.max(0, before.rss - after.rss))
    metrics.heapBytes.set({ state: 'in_use' }, after.mallocInUse)
    metrics.heapBytes.set({ state: 'idle' }, this.#baseline)
    const outcome = { rssBefore: before.rss, rssAfter: after.rss, durationMs }
    logger.info({ rssBeforeBytes: before.rss, rssAfterBytes: after.rss, mallocInUseBytes: after.mallocInUse, durationMs: Math.round(durationMs) }, 'native heap: free malloc pages given back to the kernel')
    return outcome
  }
}
