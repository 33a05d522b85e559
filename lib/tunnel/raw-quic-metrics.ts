/**
 * Metrics of the raw QUIC relay (SPEC §7). Self-contained so the composition root can merge
 * them into RouterMetrics: createRawQuicMetrics(registry) registers them on the router's
 * registry. The connection outcome names are the Rust router's; every series exists from the
 * start (at 0) so dashboards and alerts see them before the first tunnel.
 *
 * Relayed bytes are counted by the relay in plain numbers on the hot path and read at
 * scrape time (no label lookup per chunk).
 */
import { Counter, Gauge, type Registry } from 'prom-client'

const PREFIX = 'stargate_k8s_router_'

export const QUIC_OUTCOMES = ['accepted', 'missing_sni', 'unknown_sni', 'target_unavailable', 'completed', 'relay_error'] as const
export type QuicOutcome = typeof QUIC_OUTCOMES[number]

export const RELAY_DIRECTIONS = ['client_to_stargate', 'stargate_to_client'] as const
export type RelayDirection = typeof RELAY_DIRECTIONS[number]

/** Why the tunnel port dropped a datagram before it reached a connection (lib/quic/server.ts). */
export const DROP_REASONS = ['malformed', 'unknown_connection', 'connection_limit', 'invalid_token'] as const
export type DropReason = typeof DROP_REASONS[number]

/** What the UDP endpoint reports at scrape time. */
export interface EndpointCounts {
  /** Connections handshaking, open or draining. */
  readonly connections: number
  readonly dropped: Readonly<Record<DropReason, number>>
}

export interface RelayedBytes {
  readonly clientToStargate: number
  readonly stargateToClient: number
}

export interface RawQuicMetrics {
  readonly quicConnections: Counter<'outcome'>
  readonly quicRelayConnectionsActive: Gauge
  readonly quicRelayedBytes: Counter<'direction'>
  readonly quicEndpointConnections: Gauge
  readonly quicDatagramsDropped: Counter<'reason'>
  /** Where quic_relayed_bytes_total reads its (monotonic) totals at scrape time. */
  setRelayedBytesSource (source: () => RelayedBytes): void
  /** Where the endpoint gauges and drop counters read their values at scrape time. */
  setEndpointSource (source: () => EndpointCounts): void
}

export function createRawQuicMetrics (registry: Registry): RawQuicMetrics {
  const registers = [registry]
  let source: (() => RelayedBytes) | null = null
  let endpoint: (() => EndpointCounts) | null = null
  const reported = { clientToStargate: 0, stargateToClient: 0 }
  const reportedDrops: Record<DropReason, number> = { malformed: 0, unknown_connection: 0, connection_limit: 0, invalid_token: 0 }
  const metrics: RawQuicMetrics = {
    quicConnections: new Counter({
      name: PREFIX + 'quic_connections_total',
      help: 'Raw QUIC tunnel connections by outcome: accepted (routed by SNI), missing_sni, unknown_sni, target_unavailable, then completed or relay_error for each accepted one',
      labelNames: ['outcome'] as const,
      registers,
    }),
    quicRelayConnectionsActive: new Gauge({
      name: PREFIX + 'quic_relay_connections_active',
      help: 'Raw QUIC tunnels being relayed right now (client leg accepted and routed, until either leg closes)',
      registers,
    }),
    quicRelayedBytes: new Counter({
      name: PREFIX + 'quic_relayed_bytes_total',
      help: 'Stream and datagram payload bytes relayed by raw QUIC tunnels, by direction (client_to_stargate, stargate_to_client)',
      labelNames: ['direction'] as const,
      registers,
      collect () {
        if (source === null) return
        const now = source()
        this.labels('client_to_stargate').inc(Math.max(0, now.clientToStargate - reported.clientToStargate))
        this.labels('stargate_to_client').inc(Math.max(0, now.stargateToClient - reported.stargateToClient))
        reported.clientToStargate = Math.max(reported.clientToStargate, now.clientToStargate)
        reported.stargateToClient = Math.max(reported.stargateToClient, now.stargateToClient)
      },
    }),
    quicEndpointConnections: new Gauge({
      name: PREFIX + 'quic_endpoint_connections',
      help: 'QUIC connections on the tunnel port (handshaking, relaying or closing); bounded by --quic-max-connections',
      registers,
      collect () { if (endpoint !== null) this.set(endpoint().connections) },
    }),
    quicDatagramsDropped: new Counter({
      name: PREFIX + 'quic_datagrams_dropped_total',
      help: 'Datagrams the tunnel port dropped before they reached a connection, by reason (malformed, unknown_connection, connection_limit, invalid_token)',
      labelNames: ['reason'] as const,
      registers,
      collect () {
        if (endpoint === null) return
        const now = endpoint().dropped
        for (const reason of DROP_REASONS) {
          this.labels(reason).inc(Math.max(0, now[reason] - reportedDrops[reason]))
          reportedDrops[reason] = Math.max(reportedDrops[reason], now[reason])
        }
      },
    }),
    setRelayedBytesSource (fn: () => RelayedBytes): void {
      source = fn
    },
    setEndpointSource (fn: () => EndpointCounts): void {
      endpoint = fn
    },
  }
  for (const reason of DROP_REASONS) metrics.quicDatagramsDropped.labels(reason).inc(0)
  for (const outcome of QUIC_OUTCOMES) metrics.quicConnections.labels(outcome).inc(0)
  for (const direction of RELAY_DIRECTIONS) metrics.quicRelayedBytes.labels(direction).inc(0)
  return metrics
}
