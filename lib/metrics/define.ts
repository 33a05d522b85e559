/**
 * The one way a router metric is registered. Every family gets the Rust router's
 * name prefix and the registry passed in, and declares each label with the values known up
 * front: those series exist from the start at 0, so dashboards and alerts see them before
 * the first event. A label listed with no values (e.g. a rejection reason, a gauge that is
 * absent until set) is declared but starts with no series. Label values stay bounded
 * tables, never identities or addresses (SPEC §8). A group of metrics that reads no source at
 * scrape time is declared once with metricGroup; a group with scrape-time sources keeps its
 * state in a factory that calls defineMetrics.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client'

const PREFIX = 'stargate_k8s_router_'

/** Label name → the values that start at 0; the key order is the label order. */
export type LabelValues<L extends string> = { readonly [K in L]: readonly string[] }

/** Runs at scrape time with the metric as `this` (prom-client's collect hook). */
export type Collect<M> = (this: M) => void

export interface MetricDefiner {
  counter: <L extends string = never>(name: string, help: string, labels?: LabelValues<L>, collect?: Collect<Counter<L>>) => Counter<L>
  gauge: <L extends string = never>(name: string, help: string, labels?: LabelValues<L>, collect?: Collect<Gauge<L>>) => Gauge<L>
  histogram: (name: string, help: string, buckets: readonly number[]) => Histogram
}

export function defineMetrics (registry: Registry): MetricDefiner {
  const registers = [registry]
  return {
    counter (name, help, labels, collect) {
      const counter = new Counter({ name: PREFIX + name, help, labelNames: labelNamesOf(labels), registers, collect })
      for (const series of combinations(labels)) counter.inc(series, 0)
      return counter
    },
    gauge (name, help, labels, collect) {
      const gauge = new Gauge({ name: PREFIX + name, help, labelNames: labelNamesOf(labels), registers, collect })
      for (const series of combinations(labels)) gauge.set(series, 0)
      return gauge
    },
    histogram (name, help, buckets) {
      return new Histogram({ name: PREFIX + name, help, buckets: [...buckets], registers })
    },
  }
}

/** One metric of a group, declared before any registry exists; metricGroup's factory registers it. */
export type MetricSpec<M> = (define: MetricDefiner) => M

export function counter<L extends string = never> (name: string, help: string, labels?: LabelValues<L>): MetricSpec<Counter<L>> {
  return (define) => define.counter(name, help, labels)
}

export function gauge<L extends string = never> (name: string, help: string, labels?: LabelValues<L>): MetricSpec<Gauge<L>> {
  return (define) => define.gauge(name, help, labels)
}

/** The metrics a group's specs make, field by field, with their label types. */
export type MetricGroup<S> = { readonly [K in keyof S]: S[K] extends MetricSpec<infer M> ? M : never }

/**
 * The factory of a group of metrics that need no scrape-time source: the group is declared once
 * (field → metric) and its type read from that declaration. Registered in declaration order.
 */
export function metricGroup<S extends Readonly<Record<string, MetricSpec<unknown>>>> (specs: S): (registry: Registry) => MetricGroup<S> {
  return (registry) => {
    const define = defineMetrics(registry)
    return Object.fromEntries(Object.entries(specs).map(([field, spec]) => [field, spec(define)])) as MetricGroup<S>
  }
}

/**
 * A collect hook for a counter that mirrors monotonic totals kept elsewhere in plain numbers
 * (the hot path counts without a label lookup; the scrape catches the counter up). `read`
 * returns the totals by label value, or null while no source is attached.
 */
export function collectTotals<L extends string> (label: L, read: () => Readonly<Record<string, number>> | null): Collect<Counter<L>> {
  const reported = new Map<string, number>()
  return function (this: Counter<L>) {
    const totals = read()
    if (totals === null) return
    for (const value in totals) {
      const now = totals[value] ?? 0
      const before = reported.get(value) ?? 0
      if (now > before) {
        this.inc({ [label]: value } as Partial<Record<L, string>>, now - before)
        reported.set(value, now)
      }
    }
  }
}

function labelNamesOf<L extends string> (labels: LabelValues<L> | undefined): L[] {
  return labels === undefined ? [] : Object.keys(labels) as L[]
}

/** Every combination of the listed values, one object per series (none when a label has no values). */
function combinations<L extends string> (labels: LabelValues<L> | undefined): Array<Partial<Record<L, string>>> {
  if (labels === undefined) return []
  let series: Array<Partial<Record<L, string>>> = [{}]
  for (const name of labelNamesOf(labels)) {
    series = series.flatMap((partial) => labels[name].map((value) => ({ ...partial, [name]: value })))
  }
  return series
}
