/**
 * Metrics of the WebTransport relay (SPEC §7, names kept from the Rust router).
 *
 * Every session request counts exactly one terminal outcome: a rejection (invalid_connect,
 * missing_sni, unknown_sni, target_unavailable, upstream_connect_error, upstream_rejected)
 * or, for a bridged session, how it ended (completed, relay_error, trust_replaced). A session
 * whose SNI routing succeeded also counts `accepted`, before the upstream session is opened,
 * as the Rust router counts it, so accepted = upstream_connect_error +
 * upstream_rejected + completed + relay_error + trust_replaced + sessions still in progress.
 *
 * createWebTransportMetrics is idempotent per registry: the composition root and the relay
 * wiring may both ask for it and share one set.
 */
import type { Registry } from 'prom-client'
import { counter, gauge, metricGroup } from '../metrics/define.ts'

export const WEBTRANSPORT_OUTCOMES = [
  'accepted', 'missing_sni', 'unknown_sni', 'target_unavailable', 'invalid_connect',
  'upstream_connect_error', 'upstream_rejected', 'completed', 'relay_error', 'trust_replaced',
] as const
export type WebTransportOutcome = typeof WEBTRANSPORT_OUTCOMES[number]

/**
 * Session requests refused by a session cap: outside the
 * Rust router's outcome names, so counted on their own.
 */
const SESSION_REFUSALS = ['connection_limit', 'total_limit'] as const

const BRIDGE_DIRECTIONS = ['to_upstream', 'to_downstream'] as const
export type BridgeDirection = typeof BRIDGE_DIRECTIONS[number]

const defineWebTransportMetrics = metricGroup({
  sessions: counter('webtransport_sessions_total', 'WebTransport session requests by outcome: rejections (invalid_connect, missing_sni, unknown_sni, target_unavailable), accepted once SNI routing succeeded (before the upstream session), then upstream_connect_error, upstream_rejected, or how a bridged session ended (completed, relay_error, trust_replaced)', { outcome: WEBTRANSPORT_OUTCOMES }),
  activeSessions: gauge('webtransport_sessions_active', 'WebTransport sessions currently bridged to a Stargate pod'),
  bridgedBytes: counter('webtransport_bridged_bytes_total', 'Bytes relayed on bridged WebTransport sessions (capsules of the CONNECT stream), by direction (to_upstream, to_downstream)', { direction: BRIDGE_DIRECTIONS }),
  sessionsRefused: counter(
    'webtransport_sessions_refused_total',
    'WebTransport session requests refused by a session cap: connection_limit (--webtransport-max-sessions-per-connection), total_limit (--webtransport-max-sessions)',
    { reason: SESSION_REFUSALS }),
})

export type WebTransportMetrics = ReturnType<typeof defineWebTransportMetrics>

const byRegistry = new WeakMap<Registry, WebTransportMetrics>()

export function createWebTransportMetrics (registry: Registry): WebTransportMetrics {
  const existing = byRegistry.get(registry)
  if (existing !== undefined) return existing
  const metrics = defineWebTransportMetrics(registry)
  byRegistry.set(registry, metrics)
  return metrics
}
