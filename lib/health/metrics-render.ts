/**
 * /metrics renderings shared between scrapes (SPEC §12: the health port answers probes even
 * under load on that port). A rendering costs milliseconds of the one event loop; rendered for
 * each, pipelined scrapes that are never read would have the router render thousands of times in
 * a row and leave /livez unanswered. Here renderings start at most once per minIntervalMs, and every scrape
 * that arrives while one is waiting to start joins it: at most 1000 / minIntervalMs renderings
 * a second whatever the number of scrapers, and at most two at once (one running, the next
 * waiting for its turn).
 *
 * Never stale: a scrape gets a rendering that started after it arrived, so a counter read
 * right after an event shows it. The cost is up to minIntervalMs of latency under load.
 *
 * Who calls what: the /metrics route calls get(); render and the clock are passed in.
 */

export interface MetricsRenderOptions {
  readonly render: () => Promise<string>
  readonly minIntervalMs: number
  readonly now?: () => number
}

export class MetricsRender {
  readonly #render: () => Promise<string>
  readonly #minIntervalMs: number
  readonly #now: () => number
  /** The rendering that has not started yet, which new scrapes join. */
  #next: Promise<string> | null = null
  #lastStart = Number.NEGATIVE_INFINITY

  constructor (options: MetricsRenderOptions) {
    if (!(options.minIntervalMs >= 0)) throw new Error(`metrics render interval must be 0 or more, got ${options.minIntervalMs}`)
    this.#render = options.render
    this.#minIntervalMs = options.minIntervalMs
    this.#now = options.now ?? performance.now.bind(performance)
  }

  get (): Promise<string> {
    if (this.#next !== null) return this.#next
    const wait = this.#lastStart + this.#minIntervalMs - this.#now()
    if (wait <= 0) return this.#start()
    this.#next = new Promise<string>((resolve, reject) => {
      setTimeout(startLater, wait, this, resolve, reject)
    })
    return this.#next
  }

  /** Starts a rendering now; scrapes arriving from here on wait for the next one. */
  #start (): Promise<string> {
    this.#next = null
    this.#lastStart = this.#now()
    return this.#render()
  }

  /** The timer of a rendering that had to wait its turn. */
  startLater (resolve: (body: string) => void, reject: (err: unknown) => void): void {
    this.#start().then(resolve, reject)
  }
}

function startLater (render: MetricsRender, resolve: (body: string) => void, reject: (err: unknown) => void): void {
  render.startLater(resolve, reject)
}
