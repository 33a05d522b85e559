/**
 * Metrics of the WebTransport relay (SPEC §7, names kept from the Rust router).
 *
 * Every session request counts exactly one terminal outcome: a rejection (invalid_connect,
 * missing_sni, unknown_sni, target_unavailable, upstream_connect_error, upstream_rejected)
 * or, for a bridged session, how it ended (completed, relay_error, trust_replaced). A session
 * whose SNI routing succeeded also counts `accepted`, before the upstream session is opened,
 * as the Rust router counts it (issue 13), so accepted = upstream_connect_error +
 * upstream_rejected + completed + relay_error + trust_replaced + sessions still in progress.
 *
 * createWebTransportMetrics is idempotent per registry: the composition root and the relay
 * wiring may both ask for it and share one set.
 */
import { Counter, Gauge, type Registry } from 'prom-client'

const PREFIX = 'stargate_k8s_router_'

export const WEBTRANSPORT_OUTCOMES = [
  'accepted', 'missing_sni', 'unknown_sni', 'target_unavailable', 'invalid_connect',
  'upstream_connect_error', 'upstream_rejected', 'completed', 'relay_error', 'trust_replaced',
] as const
export type WebTransportOutcome = typeof WEBTRANSPORT_OUTCOMES[number]

/**
 * Session requests refused by a session cap (issue 16, from review of issue 14): outside the
 * Rust router's outcome names, so counted on their own.
 */
const SESSION_REFUSALS = ['connection_limit', 'total_limit'] as const

const BRIDGE_DIRECTIONS = ['to_upstream', 'to_downstream'] as const
export type BridgeDirection = typeof BRIDGE_DIRECTIONS[number]

export interface WebTransportMetrics {
  readonly sessions: Counter<'outcome'>
  readonly activeSessions: Gauge
  readonly bridgedBytes: Counter<'direction'>
  readonly sessionsRefused: Counter<'reason'>
}

const byRegistry = new WeakMap<Registry, WebTransportMetrics>()

export function createWebTransportMetrics (registry: Registry): WebTransportMetrics {
  const existing = byRegistry.get(registry)
  if (existing !== undefined) return existing
  const registers = [registry]
  const metrics: WebTransportMetrics = {
    sessions: new Counter({
      name: PREFIX + 'webtransport_sessions_total',
      help: 'WebTransport session requests by outcome: rejections (invalid_connect, missing_sni, unknown_sni, target_unavailable), accepted once SNI routing succeeded (before the upstream session), then upstream_connect_error, upstream_rejected, or how a bridged session ended (completed, relay_error, trust_replaced)',
      labelNames: ['outcome'] as const,
      registers,
    }),
    activeSessions: new Gauge({
      name: PREFIX + 'webtransport_sessions_active',
      help: 'WebTransport sessions currently bridged to a Stargate pod',
      registers,
    }),
    bridgedBytes: new Counter({
      name: PREFIX + 'webtransport_bridged_bytes_total',
      help: 'Bytes relayed on bridged WebTransport sessions (capsules of the CONNECT stream), by direction (to_upstream, to_downstream)',
      labelNames: ['direction'] as const,
      registers,
    }),
    sessionsRefused: new Counter({
      name: PREFIX + 'webtransport_sessions_refused_total',
      help: 'WebTransport session requests refused by a session cap: connection_limit (--webtransport-max-sessions-per-connection), total_limit (--webtransport-max-sessions)',
      labelNames: ['reason'] as const,
      registers,
    }),
  }
  for (const outcome of WEBTRANSPORT_OUTCOMES) metrics.sessions.labels(outcome).inc(0)
  for (const reason of SESSION_REFUSALS) metrics.sessionsRefused.labels(reason).inc(0)
  for (const direction of BRIDGE_DIRECTIONS) metrics.bridgedBytes.labels(direction).inc(0)
  byRegistry.set(registry, metrics)
  return metrics
}
