// Every router metric is registered through lib/metrics/define.ts. These are its
// rules, seen in the Prometheus text a scrape returns: the prefix, series at 0 for the label
// values declared up front, none for a label declared without values, and counters that
// mirror monotonic totals catching up at scrape time without ever going backwards; a group
// declared with metricGroup registers its metrics on each registry its factory is given, in
// declaration order, under the same rules.
import t from 'tap'
import { Registry } from 'prom-client'
import { collectTotals, counter, defineMetrics, gauge, metricGroup } from '../../lib/metrics/define.ts'

/** The sample lines of one family, without HELP and TYPE. */
async function samples (registry: Registry, name: string): Promise<string[]> {
  const text = await registry.metrics()
  return text.split('\n').filter((line) => line.startsWith(`stargate_k8s_router_${name}`))
}

t.test('every combination of the declared label values is exported at 0 before the first event', async (t) => {
  const registry = new Registry()
  defineMetrics(registry).counter('things_total', 'things', { kind: ['a', 'b'], result: ['ok', 'bad'] })
  t.strictSame(await samples(registry, 'things_total'), [
    'stargate_k8s_router_things_total{kind="a",result="ok"} 0',
    'stargate_k8s_router_things_total{kind="a",result="bad"} 0',
    'stargate_k8s_router_things_total{kind="b",result="ok"} 0',
    'stargate_k8s_router_things_total{kind="b",result="bad"} 0',
  ])
})

t.test('a label declared without values starts with no series, and gets one when used', async (t) => {
  const registry = new Registry()
  const gauge = defineMetrics(registry).gauge('expiry_seconds', 'expiry', { material_type: [] })
  t.strictSame(await samples(registry, 'expiry_seconds'), [])
  gauge.set({ material_type: 'server' }, 7)
  t.strictSame(await samples(registry, 'expiry_seconds'), ['stargate_k8s_router_expiry_seconds{material_type="server"} 7'])
})

t.test('histograms get the prefix and the buckets given', async (t) => {
  const registry = new Registry()
  defineMetrics(registry).histogram('wait_seconds', 'wait', [0.1, 1])
  const buckets = (await samples(registry, 'wait_seconds_bucket')).map((line) => line.slice(line.indexOf('{')))
  t.strictSame(buckets, ['{le="0.1"} 0', '{le="1"} 0', '{le="+Inf"} 0'])
})

t.test('a totals counter reports what the source counted since the last scrape, and never less', async (t) => {
  const registry = new Registry()
  let totals: Record<string, number> | null = null
  defineMetrics(registry).counter('sent_total', 'sent', { call: ['send', 'recv'] }, collectTotals('call', () => totals))
  t.strictSame(await samples(registry, 'sent_total'), ['stargate_k8s_router_sent_total{call="send"} 0', 'stargate_k8s_router_sent_total{call="recv"} 0'], 'no source yet: the zero series')
  totals = { send: 5, recv: 2 }
  t.strictSame(await samples(registry, 'sent_total'), ['stargate_k8s_router_sent_total{call="send"} 5', 'stargate_k8s_router_sent_total{call="recv"} 2'])
  totals = { send: 9, recv: 1 }
  t.strictSame(await samples(registry, 'sent_total'), ['stargate_k8s_router_sent_total{call="send"} 9', 'stargate_k8s_router_sent_total{call="recv"} 2'], 'a total that went down does not lower the counter')
})

t.test('a declared group registers its metrics on each registry it is given, in declaration order, with their zero series', async (t) => {
  const createGroup = metricGroup({
    jobs: gauge('group_jobs', 'jobs'),
    failures: counter('group_failures_total', 'failures', { reason: ['timeout', 'refused'] }),
  })
  const first = new Registry()
  const second = new Registry()
  const group = createGroup(first)
  createGroup(second)
  t.strictSame(first.getMetricsAsArray().map((metric) => metric.name), ['stargate_k8s_router_group_jobs', 'stargate_k8s_router_group_failures_total'])
  t.strictSame(await samples(second, 'group_failures_total'), [
    'stargate_k8s_router_group_failures_total{reason="timeout"} 0',
    'stargate_k8s_router_group_failures_total{reason="refused"} 0',
  ], 'a second registry gets its own series')
  group.failures.inc({ reason: 'refused' })
  group.jobs.set(3)
  t.strictSame(await samples(first, 'group_failures_total'), [
    'stargate_k8s_router_group_failures_total{reason="timeout"} 0',
    'stargate_k8s_router_group_failures_total{reason="refused"} 1',
  ])
  t.strictSame(await samples(first, 'group_jobs'), ['stargate_k8s_router_group_jobs 3'])
  t.strictSame(await samples(second, 'group_jobs'), ['stargate_k8s_router_group_jobs 0'], 'the registries do not share a metric')
})
