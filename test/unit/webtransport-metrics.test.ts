// SPEC §7: stargate_k8s_router_webtransport_sessions_total{outcome} with every outcome
// pre-created at 0, so a rate over any of them works from the first scrape.
import t from 'tap'
import { Registry } from 'prom-client'
import { WEBTRANSPORT_OUTCOMES, createWebTransportMetrics } from '../../lib/tunnel/webtransport-metrics.ts'

/** One sample of Prometheus text. */
function parseMetric (text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`)
  const line = text.split('\n').find((l) => (l.startsWith(name + ' ') || l.startsWith(name + '{')) && wanted.every((w) => l.includes(w)))
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1))
}

t.test('every session outcome is exported at 0 before the first session', async (t) => {
  const registry = new Registry()
  createWebTransportMetrics(registry)
  const text = await registry.metrics()
  t.strictSame([...WEBTRANSPORT_OUTCOMES], [
    'accepted', 'missing_sni', 'unknown_sni', 'target_unavailable', 'invalid_connect',
    'upstream_connect_error', 'upstream_rejected', 'completed', 'relay_error', 'trust_replaced',
  ], 'the SPEC §7 outcomes')
  for (const outcome of WEBTRANSPORT_OUTCOMES) {
    t.equal(parseMetric(text, 'stargate_k8s_router_webtransport_sessions_total', { outcome }), 0, outcome)
  }
  t.equal(parseMetric(text, 'stargate_k8s_router_webtransport_sessions_active'), 0)
  for (const direction of ['to_upstream', 'to_downstream']) {
    t.equal(parseMetric(text, 'stargate_k8s_router_webtransport_bridged_bytes_total', { direction }), 0, direction)
  }
})

t.test('the relay and the composition root asking for the metrics of one registry share one set', async (t) => {
  const registry = new Registry()
  t.equal(createWebTransportMetrics(registry), createWebTransportMetrics(registry))
  t.not(createWebTransportMetrics(new Registry()), createWebTransportMetrics(registry))
})
