/**
 * The event-loop side of the QUIC driver: which connections need work this turn, and when.
 *
 *   socket 'message' ──▶ connection.receive(): quiche recv() only, mark dirty ──┐
 *   stream write / read request / timer ──────────────────────────▶ mark dirty ─┤
 *                                                                              ▼
 *   setImmediate (once per event-loop turn) ──▶ for each dirty connection: process():
 *        stream I/O, then quiche send() up to sendBatch datagrams (dirty again when the
 *        batch was used up, so one connection cannot starve the others or the event loop)
 *
 * Measured on this machine (issue 5): doing stream I/O and send() once per turn rather than
 * per received packet, with a bounded batch, is what took a driver over this binding from
 * single-digit MiB/s to ~140 MiB/s; and yielding to the event loop between batches is what
 * lets the binding's native objects (SendInfo instants, iterators) be finalized — a loop
 * that never yields grows memory without bound.
 *
 * A coarse tick (one interval for every connection, STYLE "long timeouts share one coarse
 * tick") expires handshakes that do not complete and sends keep-alive PINGs; quiche's own
 * timers (loss detection, idle timeout) get one Node timer per connection.
 */

export interface DriverTask {
  /** Set by the driver while queued. */
  queued: boolean
  /** Does this turn's work; may call schedule() again for more. */
  process (): void
  /** Called by the coarse tick with Date.now(). */
  tick (now: number): void
  /** Ends at once (after sending a CONNECTION_CLOSE if none was sent), without draining. */
  destroy (): void
}

export interface QuicDriverOptions {
  /** Datagrams one connection may send per turn before yielding (default 128). */
  readonly sendBatch?: number
  /** Period of the coarse tick (default 250 ms). */
  readonly tickMs?: number
  /**
   * A full garbage collection (see gc.ts), run from the tick after many connections ended.
   * A quiche connection's native state (TLS, buffers: tens of KiB) is freed only when its
   * small JS wrapper is collected; connections live long enough to reach V8's old generation,
   * which a small JS heap rarely collects, so under connection churn native memory grew
   * without bound (measured: +175 MiB over 60,000 abandoned handshakes and still growing;
   * with this, +65 MiB and flat after the first 30,000).
   */
  readonly collectGarbage?: (() => void) | null
}

/** Connections that must end before the tick runs collectGarbage, and how often at most. */
const GC_AFTER_RELEASES = 256
const GC_MIN_INTERVAL_MS = 1000

export class QuicDriver {
  readonly sendBatch: number
  /** Scratch space for stream reads; only used synchronously within one call. */
  readonly scratch: Buffer = Buffer.allocUnsafeSlow(64 * 1024)
  /** Increments once per turn; transports use it to recycle their send buffers. */
  turn = 0
  readonly #tickMs: number
  #queue: DriverTask[] = []
  #spare: DriverTask[] = []
  #scheduled = false
  readonly #tasks = new Set<DriverTask>()
  #ticker: NodeJS.Timeout | null = null
  readonly #collectGarbage: (() => void) | null
  #releasedSinceGc = 0
  #lastGc = 0

  constructor (options: QuicDriverOptions = {}) {
    this.sendBatch = options.sendBatch ?? 128
    this.#tickMs = options.tickMs ?? 250
    this.#collectGarbage = options.collectGarbage ?? null
  }

  /** Queues task for this turn's processing (idempotent within a turn). */
  schedule (task: DriverTask): void {
    if (task.queued) return
    task.queued = true
    this.#queue.push(task)
    if (!this.#scheduled) {
      this.#scheduled = true
      setImmediate(runTurn, this)
    }
  }

  /** A connection that the coarse tick should visit until it is released. */
  register (task: DriverTask): void {
    this.#tasks.add(task)
    if (this.#ticker === null) {
      this.#ticker = setInterval(runTick, this.#tickMs, this)
      this.#ticker.unref()
    }
  }

  release (task: DriverTask): void {
    if (this.#tasks.delete(task)) this.#releasedSinceGc++
    if (this.#tasks.size === 0 && this.#ticker !== null && this.#collectGarbage === null) {
      clearInterval(this.#ticker)
      this.#ticker = null
    }
  }

  /** Destroys every registered connection (process shutdown, tests' teardown). */
  destroyAll (): void {
    for (const task of [...this.#tasks]) task.destroy()
  }

  /** Connections registered (handshaking, open or draining). */
  get size (): number {
    return this.#tasks.size
  }

  /** @internal */
  runTurn (): void {
    this.#scheduled = false
    this.turn++
    const queue = this.#queue
    this.#queue = this.#spare
    for (let i = 0; i < queue.length; i++) {
      const task = queue[i] as DriverTask
      task.queued = false
      task.process()
    }
    queue.length = 0
    this.#spare = queue
  }

  /** @internal */
  runTick (): void {
    const now = Date.now()
    for (const task of this.#tasks) task.tick(now)
    if (this.#collectGarbage !== null && this.#releasedSinceGc >= GC_AFTER_RELEASES && now - this.#lastGc >= GC_MIN_INTERVAL_MS) {
      this.#releasedSinceGc = 0
      this.#lastGc = now
      this.#collectGarbage()
    }
    if (this.#tasks.size === 0 && this.#ticker !== null && this.#releasedSinceGc < GC_AFTER_RELEASES) {
      clearInterval(this.#ticker)
      this.#ticker = null
    }
  }
}

function runTurn (driver: QuicDriver): void {
  driver.runTurn()
}

function runTick (driver: QuicDriver): void {
  driver.runTick()
}

/**
 * Send buffers for one UDP socket: datagrams are written by quiche straight into a slab and
 * handed to the socket without copying. dgram.send() usually completes synchronously
 * (libuv try_send), but queues the buffer when the kernel's send buffer is full (and an
 * unconnected socket's send waits for a next-tick address lookup), so a slab is reused only
 * once a new turn has started and the socket reports an empty send queue; otherwise a fresh
 * slab is taken and the old one is left to the pending sends.
 */
export class SendSlab {
  readonly #size: number
  #buf: Buffer
  #offset = 0
  #turn = -1

  constructor (size = 512 * 1024) {
    this.#size = size
    this.#buf = Buffer.allocUnsafeSlow(size)
  }

  /**
   * A view of at least `length` free bytes, valid until the next take(). queued() (the
   * socket's send queue length) is asked once per turn.
   */
  take (length: number, turn: number, queued: () => number): Buffer {
    if (turn !== this.#turn) {
      this.#turn = turn
      if (queued() === 0) this.#offset = 0
    }
    if (this.#offset + length > this.#buf.length) {
      this.#buf = Buffer.allocUnsafeSlow(this.#size)
      this.#offset = 0
    }
    return this.#buf.subarray(this.#offset, this.#offset + length)
  }

  /** The first `length` bytes of the last take() are now owned by a send. */
  commit (length: number): void {
    this.#offset += length
  }
}
