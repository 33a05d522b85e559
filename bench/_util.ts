/**
 * Timing and reporting for the benchmarks under bench/. Each *.bench.ts file runs in its own
 * process (bench/run.ts), measures its cases with measureEach()/measure(), and ends with
 * Report.finish(), which prints a human table and then, as the very last stdout line, the
 * JSON that the runner collects.
 *
 * The machine is shared and noisy (2 cores), so a case is measured in rounds: a warm-up that
 * is thrown away, then rounds of samples until the medians of the last three rounds agree
 * within maxSpread of the overall median (the median has stopped moving), or maxRounds or
 * maxTimeMs is reached (reported as not converged). Figures are the median of every sample
 * with p10/p90/p99 and the median absolute deviation, so a noisy run shows as a wide
 * p10–p90 rather than as a wrong median.
 *
 * Cases compared with each other are measured interleaved (measureEach), round by round, so
 * a drift in the machine's speed affects them alike.
 *
 * Environment: BENCH_MAX_ROUNDS, BENCH_MAX_SPREAD (a fraction, 0.05 = 5 %), BENCH_MAX_TIME_MS
 * override every case's limits; BENCH_QUICK=1 runs few rounds (a smoke run, not for figures).
 */
import { hrtime } from 'node:process'
import { SeededRandom } from '../test/fixtures/cluster/names.ts'

/**
 * Durations ('ns', 'µs', 'ms': lower is better; Stats in nanoseconds), a rate ('/s', e.g.
 * requests per second: higher is better; Stats in the rate itself) or memory ('KiB': lower is
 * better; Stats in KiB).
 */
export type Unit = 'ns' | 'µs' | 'ms' | '/s' | 'KiB'

const NS_PER: Record<Unit, number> = { ns: 1, µs: 1e3, ms: 1e6, '/s': 1, KiB: 1 }

type UnitKind = 'duration' | 'rate' | 'memory'

function kindOf (unit: Unit): UnitKind {
  return unit === '/s' ? 'rate' : unit === 'KiB' ? 'memory' : 'duration'
}

/** Whether larger figures are better (rates) rather than smaller (durations, memory). */
export function higherIsBetter (unit: Unit): boolean {
  return unit === '/s'
}

export interface MeasureOptions {
  /** Samples per round (default 30). */
  readonly samplesPerRound?: number
  /** Rounds before convergence is checked (default 3). */
  readonly minRounds?: number
  /** Rounds at most (default 30). */
  readonly maxRounds?: number
  /** Convergence: max (max - min) of the last three round medians over the median (default 0.05). */
  readonly maxSpread?: number
  /** Warm-up before timing, discarded (default 300 ms, and at least one round's samples). */
  readonly warmupMs?: number
  /** Wall-clock cap for the timed rounds (default 20 s; measureEach uses the largest). */
  readonly maxTimeMs?: number
}

export interface Stats {
  /** Nanoseconds, per sample (per operation for batched samples). */
  readonly median: number
  readonly p10: number
  readonly p90: number
  readonly p99: number
  /** Median absolute deviation from the median. */
  readonly mad: number
  readonly min: number
  readonly max: number
  readonly samples: number
  readonly rounds: number
  /** (max - min) of the last three round medians over the median; the convergence figure. */
  readonly spread: number
  readonly converged: boolean
}

/** Monotonic nanoseconds as a double (exact to well below a microsecond for days of uptime). */
export function now (): number {
  return Number(hrtime.bigint())
}

function envNumber (name: string): number | undefined {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return undefined
  const value = Number(raw)
  if (!Number.isFinite(value) || value <= 0) throw new Error(`${name} must be a positive number, got '${raw}'`)
  return value
}

const QUICK = process.env.BENCH_QUICK === '1'

function resolveOptions (options: MeasureOptions): Required<MeasureOptions> {
  return {
    samplesPerRound: QUICK ? Math.min(options.samplesPerRound ?? 30, 10) : options.samplesPerRound ?? 30,
    minRounds: QUICK ? 1 : options.minRounds ?? 3,
    maxRounds: envNumber('BENCH_MAX_ROUNDS') ?? (QUICK ? 2 : options.maxRounds ?? 30),
    maxSpread: envNumber('BENCH_MAX_SPREAD') ?? options.maxSpread ?? 0.05,
    warmupMs: QUICK ? 20 : options.warmupMs ?? 300,
    maxTimeMs: envNumber('BENCH_MAX_TIME_MS') ?? options.maxTimeMs ?? 20_000,
  }
}

/** Deterministic pseudo-random numbers (the clusters' mulberry32), so every run builds the same cluster. */
export function random (seed: number): () => number {
  const generator = new SeededRandom(seed)
  return () => generator.next()
}

/** The q-quantile (0..1) of sorted values, linearly interpolated. */
export function quantile (sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return NaN
  const at = (sorted.length - 1) * q
  const lo = Math.floor(at)
  const hi = Math.ceil(at)
  const a = sorted[lo] as number
  const b = sorted[hi] as number
  return a + (b - a) * (at - lo)
}

export function median (values: readonly number[]): number {
  return quantile([...values].sort((a, b) => a - b), 0.5)
}

export function summarize (values: readonly number[], rounds: number, spread: number, converged: boolean): Stats {
  const sorted = [...values].sort((a, b) => a - b)
  const med = quantile(sorted, 0.5)
  const deviations = sorted.map((v) => Math.abs(v - med)).sort((a, b) => a - b)
  return {
    median: med,
    p10: quantile(sorted, 0.1),
    p90: quantile(sorted, 0.9),
    p99: quantile(sorted, 0.99),
    mad: quantile(deviations, 0.5),
    min: sorted[0] ?? NaN,
    max: sorted[sorted.length - 1] ?? NaN,
    samples: sorted.length,
    rounds,
    spread,
    converged,
  }
}

/**
 * Stats of samples gathered in rounds by a benchmark's own loop (a load run, a stream of
 * tokens), with the convergence figure measureEach() uses: (max - min) of the last three
 * round medians over the overall median, converged when within maxSpread.
 */
export function summarizeRounds (rounds: ReadonlyArray<readonly number[]>, maxSpread = 0.05): Stats {
  const nonEmpty = rounds.filter((r) => r.length > 0)
  const medians = nonEmpty.map((r) => median(r))
  const all = nonEmpty.flat()
  const last = medians.slice(-3)
  const spread = last.length < 3 ? Infinity : (Math.max(...last) - Math.min(...last)) / Math.abs(median(all))
  return summarize(all, nonEmpty.length, spread, spread <= maxSpread)
}

/** Collects garbage between cases when the runner gave --expose-gc, so one case's garbage is not the next one's pause. */
export function collectGarbage (): void {
  const gc = (globalThis as { gc?: () => void }).gc
  if (gc !== undefined) gc()
}

export type Sample = () => number | Promise<number>

/** A case for measureEach(): its sample function and, optionally, its own limits. */
export interface Case {
  readonly sample: Sample
  readonly options?: MeasureOptions
}

class Series {
  readonly sample: Sample
  readonly o: Required<MeasureOptions>
  readonly values: number[] = []
  readonly roundMedians: number[] = []
  spread = Infinity
  converged = false

  constructor (c: Case, defaults: MeasureOptions) {
    this.sample = c.sample
    this.o = resolveOptions({ ...defaults, ...c.options })
  }

  get done (): boolean {
    return this.converged || this.roundMedians.length >= this.o.maxRounds
  }

  async warmUp (): Promise<void> {
    const end = now() + this.o.warmupMs * 1e6
    for (let i = 0; i < this.o.samplesPerRound || now() < end; i++) await this.sample()
  }

  async round (): Promise<void> {
    const round: number[] = []
    for (let i = 0; i < this.o.samplesPerRound; i++) round.push(await this.sample())
    this.values.push(...round)
    this.roundMedians.push(median(round))
    if (this.roundMedians.length >= Math.max(this.o.minRounds, 3) || this.roundMedians.length >= this.o.maxRounds) {
      const last = this.roundMedians.slice(-3)
      this.spread = (Math.max(...last) - Math.min(...last)) / median(this.values)
      this.converged = this.spread <= this.o.maxSpread
    }
  }

  stats (): Stats {
    return summarize(this.values, this.roundMedians.length, this.spread, this.converged)
  }
}

/**
 * Measures cases side by side: after each case's warm-up, one round of each in turn, until
 * every case has converged or reached its round limit (a case that converged early keeps
 * sampling while others have not, so all are measured across the same stretch of time), or
 * until the largest maxTimeMs has passed. On a shared machine whose speed drifts from minute
 * to minute, this keeps the ratios between cases honest where measuring them one after the
 * other would not.
 *
 * A sample function times itself: it does any untimed setup, then returns the nanoseconds of
 * the part that counts (use now() around it). For operations of a few hundred nanoseconds
 * or less, build the sample with batched().
 */
export async function measureEach<K extends string> (cases: Record<K, Case | Sample>, defaults: MeasureOptions = {}): Promise<Record<K, Stats>> {
  const names = Object.keys(cases) as K[]
  const series = names.map((name) => {
    const c = cases[name]
    return new Series(typeof c === 'function' ? { sample: c } : c, defaults)
  })
  collectGarbage()
  for (const s of series) await s.warmUp()
  const deadline = now() + Math.max(...series.map((s) => s.o.maxTimeMs)) * 1e6
  while (series.some((s) => !s.done) && now() < deadline) {
    for (const s of series) {
      if (s.roundMedians.length < s.o.maxRounds) await s.round()
    }
  }
  return Object.fromEntries(names.map((name, i) => [name, (series[i] as Series).stats()])) as Record<K, Stats>
}

/** Measures one case (see measureEach). */
export async function measure (sample: Sample, options: MeasureOptions = {}): Promise<Stats> {
  return (await measureEach({ only: { sample, options } })).only
}

/**
 * A sample function for nanosecond-scale operations: batch(n) must perform n operations and
 * return a value derived from their results, which is added to sink (print it, so the
 * optimizer cannot drop the work). The batch size is calibrated here so one sample lasts at
 * least minSampleMs, which keeps timer resolution and the sample loop out of the figure; the
 * sample returns per-operation nanoseconds. granularity: n is a multiple of it (the length of
 * the input array a batch walks, so every sample covers whole passes).
 */
export function batched (
  batch: (n: number) => number,
  sink: { value: number },
  options: { readonly minSampleMs?: number, readonly granularity?: number } = {}
): Sample {
  const granularity = options.granularity ?? 1
  const minSampleNs = (QUICK ? 0.5 : options.minSampleMs ?? 2) * 1e6
  let n = granularity
  for (;;) {
    const t0 = now()
    sink.value += batch(n)
    const elapsed = now() - t0
    if (elapsed >= minSampleNs) break
    n = Math.ceil((elapsed > 0 ? Math.min(n * 10, n * (minSampleNs * 1.2) / elapsed) : n * 10) / granularity) * granularity
  }
  const ops = n
  return () => {
    const t0 = now()
    sink.value += batch(ops)
    return (now() - t0) / ops
  }
}

export interface CaseResult {
  /** What was measured, as a reader would say it. */
  readonly name: string
  readonly unit: Unit
  readonly median: number
  readonly p10: number
  readonly p90: number
  readonly p99: number
  readonly mad: number
  readonly spread: number
  readonly rounds: number
  readonly samples: number
  readonly converged: boolean
  /**
   * Cases this one is compared against, measured in the same run. ratio = baseline median /
   * this median: above 1 means this case is that many times faster.
   */
  readonly comparisons?: ReadonlyArray<{ readonly baseline: string, readonly ratio: number }>
  /** Bound for the median (or targetStat), in unit: an upper bound, a lower one for rates. */
  readonly target?: number
  /** Which figure the target bounds; default the median. */
  readonly targetStat?: TargetStat
  readonly pass?: boolean
  readonly note?: string
}

export type TargetStat = 'median' | 'p99'

export interface BenchResult {
  readonly bench: string
  readonly cases: readonly CaseResult[]
  /** Context worth recording (sizes, the dead-code sink). */
  readonly info: Readonly<Record<string, string | number>>
}

export interface AddCase {
  readonly name: string
  readonly stats: Stats
  readonly unit: Unit
  /** Name (or names) of cases added earlier to compare against. */
  readonly baseline?: string | readonly string[]
  /** An upper bound (durations) or a lower bound (rates) for the median, or for targetStat. */
  readonly target?: number
  readonly targetStat?: TargetStat
  readonly note?: string
}

function threeDigits (value: number): string {
  const digits = value >= 100 ? 0 : value >= 10 ? 1 : value >= 1 ? 2 : 3
  return value.toFixed(digits)
}

/** Formats a figure given in unit with three significant digits ("41.9k/s" for rates). */
export function formatValue (value: number, unit: Unit): string {
  if (!Number.isFinite(value)) return '-'
  if (unit === '/s') {
    if (value >= 1e6) return `${threeDigits(value / 1e6)}M/s`
    if (value >= 1e3) return `${threeDigits(value / 1e3)}k/s`
    return `${threeDigits(value)}/s`
  }
  if (unit === 'KiB' && value >= 1024 * 10) return `${threeDigits(value / 1024)} MiB`
  return `${threeDigits(value)} ${unit}`
}

function formatFactor (r: number): string {
  return r >= 10 ? r.toFixed(0) : r.toFixed(2)
}

/** "12× faster than X", "1.31× the rate of X", "2.0× less than X", one per comparison, joined with "; ". */
export function formatRatio (c: CaseResult): string {
  const kind = kindOf(c.unit)
  return (c.comparisons ?? []).map(({ baseline, ratio }) => {
    if (kind === 'rate') return `${formatFactor(ratio)}× the rate of ${baseline}`
    const [better, worse] = kind === 'memory' ? ['less', 'more'] : ['faster', 'slower']
    return ratio >= 1 ? `${formatFactor(ratio)}× ${better} than ${baseline}` : `${formatFactor(1 / ratio)}× ${worse} than ${baseline}`
  }).join('; ')
}

/** "≤ 1.00 ms", "p99 ≤ 250 ms", "≥ 50.0k/s"; empty without a target. */
export function formatTargetBound (c: CaseResult): string {
  if (c.target === undefined) return ''
  const stat = c.targetStat === undefined || c.targetStat === 'median' ? '' : `${c.targetStat} `
  return `${stat}${higherIsBetter(c.unit) ? '≥' : '≤'} ${formatValue(c.target, c.unit)}`
}

export function formatTarget (c: CaseResult): string {
  if (c.target === undefined) return ''
  return `${formatTargetBound(c)}: ${c.pass === true ? 'pass' : 'MISS'}`
}

export function formatSpread (c: CaseResult): string {
  const p = (v: number): string => formatValue(v, c.unit)
  const mad = c.median > 0 ? ` MAD ${(100 * c.mad / c.median).toFixed(1)}%` : ''
  return `p10 ${p(c.p10)} p90 ${p(c.p90)} p99 ${p(c.p99)}${mad}`
}

/** Collects a benchmark file's cases; finish() prints them and the JSON line the runner reads. */
export class Report {
  readonly #bench: string
  readonly #cases: CaseResult[] = []
  readonly #info: Record<string, string | number> = {}

  constructor (bench: string) {
    this.#bench = bench
  }

  info (key: string, value: string | number): void {
    this.#info[key] = value
  }

  /** Adds a measured case; baseline names a case added earlier. A missed target is reported, not thrown. */
  add (c: AddCase): CaseResult {
    const scale = NS_PER[c.unit]
    const s = c.stats
    const baselines = c.baseline === undefined ? [] : typeof c.baseline === 'string' ? [c.baseline] : c.baseline
    const rate = higherIsBetter(c.unit)
    const comparisons = baselines.map((name) => {
      const base = this.#cases.find((x) => x.name === name)
      if (base === undefined) throw new Error(`baseline '${name}' must be added before '${c.name}'`)
      if (kindOf(base.unit) !== kindOf(c.unit)) throw new Error(`'${c.name}' (${c.unit}) cannot be compared with '${name}' (${base.unit})`)
      // ratio > 1: this case is better (faster: a shorter duration or a higher rate).
      return { baseline: name, ratio: rate ? s.median / base.median : (base.median * NS_PER[base.unit]) / s.median }
    })
    const median = s.median / scale
    const bounded = c.targetStat === 'p99' ? s.p99 / scale : median
    const result: CaseResult = {
      name: c.name,
      unit: c.unit,
      median,
      p10: s.p10 / scale,
      p90: s.p90 / scale,
      p99: s.p99 / scale,
      mad: s.mad / scale,
      spread: s.spread,
      rounds: s.rounds,
      samples: s.samples,
      converged: s.converged,
      ...(comparisons.length === 0 ? {} : { comparisons }),
      ...(c.target === undefined ? {} : { target: c.target, pass: rate ? bounded >= c.target : bounded <= c.target }),
      ...(c.targetStat === undefined ? {} : { targetStat: c.targetStat }),
      ...(c.note === undefined ? {} : { note: c.note }),
    }
    this.#cases.push(result)
    const converged = result.converged ? '' : ` (not converged: spread ${(100 * result.spread).toFixed(1)}% after ${result.rounds} rounds)`
    const extras = [formatRatio(result), formatTarget(result)].filter((x) => x !== '').join('; ')
    console.log(`  ${result.name}: ${formatValue(result.median, result.unit)}  [${formatSpread(result)}, ${result.samples} samples]${converged}${extras === '' ? '' : '  ' + extras}`)
    return result
  }

  /** Prints the result JSON as the last stdout line. Nothing may be printed after it. */
  finish (): BenchResult {
    const result: BenchResult = { bench: this.#bench, cases: this.#cases, info: this.#info }
    console.log(JSON.stringify(result))
    return result
  }
}
