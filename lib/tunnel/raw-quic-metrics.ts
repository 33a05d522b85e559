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
import { HANDSHAKE_FAILURE_REASONS } from '../quic/handshake-failure.ts'

const PREFIX = 'stargate_k8s_router_'

const QUIC_OUTCOMES = ['accepted', 'missing_sni', 'unknown_sni', 'target_unavailable', 'completed', 'relay_error'] as const
export type QuicOutcome = typeof QUIC_OUTCOMES[number]

const RELAY_DIRECTIONS = ['client_to_stargate', 'stargate_to_client'] as const

/**
 * Why the tunnel port dropped a datagram before it reached a connection (the engine's
 * endpoint, lib/quic/native/src/endpoint.c): not QUIC, for no connection (and no stateless
 * reset owed), over --quic-max-connections, a bad Retry token, over the bound on Initials
 * waiting for routing, or arriving while the endpoint closes.
 */
const DROP_REASONS = ['malformed', 'unknown_connection', 'connection_limit', 'invalid_token', 'pending_limit', 'closing'] as const
export type DropReason = typeof DROP_REASONS[number]

/** Packets the tunnel port answers without any connection state (issue 15, SPEC §12). */
const STATELESS_PACKETS = ['retry', 'stateless_reset', 'version_negotiation'] as const
export type StatelessPacket = typeof STATELESS_PACKETS[number]

/**
 * Why a handshake on the tunnel port was refused or failed (issue 15): the SNI refusals made
 * from the Initial, the Pylon leg's handshake failures (lib/quic/handshake-failure.ts), and the
 * same for the leg the router dials to the pod, prefixed upstream_.
 */
const HANDSHAKE_FAILURES = [
  'missing_sni', 'unknown_sni', 'target_unavailable',
  ...HANDSHAKE_FAILURE_REASONS,
  ...HANDSHAKE_FAILURE_REASONS.map((reason) => `upstream_${reason}` as const),
] as const
export type HandshakeFailureLabel = typeof HANDSHAKE_FAILURES[number]

/** What the UDP endpoint reports at scrape time. */
export interface EndpointCounts {
  /** Connections handshaking, open or draining, and Initials waiting for routing. */
  readonly connections: number
  /** Handshakes in progress (not yet established). */
  readonly halfOpen: number
  readonly dropped: Readonly<Record<DropReason, number>>
  readonly stateless: Readonly<Record<StatelessPacket, number>>
}

/** The QUIC engine's I/O counters (lib/quic/native.ts NativeCounters), read at scrape time. */
export interface EngineIo {
  readonly sendCalls: number
  readonly recvCalls: number
  readonly txDatagrams: number
  readonly rxDatagrams: number
  /** Thread CPU nanoseconds inside the engine's libuv callbacks, JavaScript excluded (sampled estimate). */
  readonly busyNs: number
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
  readonly quicEndpointHalfOpen: Gauge
  readonly quicDatagramsDropped: Counter<'reason'>
  readonly quicStatelessPackets: Counter<'type'>
  readonly quicHandshakeFailures: Counter<'reason'>
  readonly quicEngineSyscalls: Counter<'call'>
  readonly quicEngineDatagrams: Counter<'direction'>
  readonly quicEngineCpuSeconds: Counter
  /** Where the engine's I/O counters are read at scrape time. */
  setEngineSource (source: () => EngineIo): void
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
  const reportedDrops: Record<DropReason, number> = { malformed: 0, unknown_connection: 0, connection_limit: 0, invalid_token: 0, pending_limit: 0, closing: 0 }
  const reportedStateless: Record<StatelessPacket, number> = { retry: 0, stateless_reset: 0, version_negotiation: 0 }
  let engineIo: (() => EngineIo) | null = null
  const reportedIo = { sendCalls: 0, recvCalls: 0, txDatagrams: 0, rxDatagrams: 0, busyNs: 0 }
  const advance = (counter: Counter<string>, label: Record<string, string>, key: keyof typeof reportedIo, now: number): void => {
    counter.labels(label).inc(Math.max(0, now - reportedIo[key]))
    reportedIo[key] = Math.max(reportedIo[key], now)
  }
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
    quicEndpointHalfOpen: new Gauge({
      name: PREFIX + 'quic_endpoint_half_open',
      help: 'QUIC handshakes in progress on the tunnel port (Initials waiting for routing included); above --quic-retry-threshold every new client is sent a Retry first',
      registers,
      collect () { if (endpoint !== null) this.set(endpoint().halfOpen) },
    }),
    quicStatelessPackets: new Counter({
      name: PREFIX + 'quic_stateless_packets_total',
      help: 'Packets the tunnel port answered without connection state, by type: retry (address validation under load or --quic-retry), stateless_reset (a packet for a connection it does not know), version_negotiation',
      labelNames: ['type'] as const,
      registers,
      collect () {
        if (endpoint === null) return
        const now = endpoint().stateless
        for (const type of STATELESS_PACKETS) {
          this.labels(type).inc(Math.max(0, now[type] - reportedStateless[type]))
          reportedStateless[type] = Math.max(reportedStateless[type], now[type])
        }
      },
    }),
    quicHandshakeFailures: new Counter({
      name: PREFIX + 'quic_handshake_failures_total',
      help: 'QUIC handshakes on the tunnel port (raw QUIC, or WebTransport over HTTP/3) refused or failed, by reason: missing_sni, unknown_sni, target_unavailable (refused from the Initial), alpn, certificate, client_certificate, timeout, tls, protocol, peer_refused, unreachable (the Pylon leg), and the same prefixed upstream_ for the leg to the pod',
      labelNames: ['reason'] as const,
      registers,
    }),
    quicEngineSyscalls: new Counter({
      name: PREFIX + 'quic_engine_syscalls_total',
      help: 'Socket calls of the QUIC engine (all its UDP sockets: tunnel port and pod legs), by call: send (sendmmsg, each sending a batch, with UDP GSO where the kernel takes it), recv (recvmmsg, with UDP GRO)',
      labelNames: ['call'] as const,
      registers,
      collect () {
        if (engineIo === null) return
        const now = engineIo()
        advance(this, { call: 'send' }, 'sendCalls', now.sendCalls)
        advance(this, { call: 'recv' }, 'recvCalls', now.recvCalls)
      },
    }),
    quicEngineDatagrams: new Counter({
      name: PREFIX + 'quic_engine_datagrams_total',
      help: 'UDP datagrams the QUIC engine sent (tx) and received (rx) on all its sockets',
      labelNames: ['direction'] as const,
      registers,
      collect () {
        if (engineIo === null) return
        const now = engineIo()
        advance(this, { direction: 'tx' }, 'txDatagrams', now.txDatagrams)
        advance(this, { direction: 'rx' }, 'rxDatagrams', now.rxDatagrams)
      },
    }),
    quicEngineCpuSeconds: new Counter({
      name: PREFIX + 'quic_engine_cpu_seconds_total',
      help: 'CPU time of the QUIC engine in its native event-loop callbacks (packet I/O and its syscalls, ngtcp2, TLS, native splice and datagram bridge), JavaScript excluded: the thread CPU clock read around a random 1 in 16 of the callbacks, scaled up (an estimate; over a bulk transfer within a few per cent)',
      registers,
      collect () {
        if (engineIo === null) return
        const now = engineIo().busyNs
        this.inc(Math.max(0, now - reportedIo.busyNs) / 1e9)
        reportedIo.busyNs = Math.max(reportedIo.busyNs, now)
      },
    }),
    quicDatagramsDropped: new Counter({
      name: PREFIX + 'quic_datagrams_dropped_total',
      help: 'Datagrams the tunnel port dropped before they reached a connection, by reason (malformed, unknown_connection, connection_limit, invalid_token, pending_limit, closing)',
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
    setEngineSource (fn: () => EngineIo): void {
      engineIo = fn
    },
  }
  for (const reason of DROP_REASONS) metrics.quicDatagramsDropped.labels(reason).inc(0)
  for (const type of STATELESS_PACKETS) metrics.quicStatelessPackets.labels(type).inc(0)
  for (const reason of HANDSHAKE_FAILURES) metrics.quicHandshakeFailures.labels(reason).inc(0)
  for (const call of ['send', 'recv']) metrics.quicEngineSyscalls.labels(call).inc(0)
  for (const direction of ['tx', 'rx']) metrics.quicEngineDatagrams.labels(direction).inc(0)
  for (const outcome of QUIC_OUTCOMES) metrics.quicConnections.labels(outcome).inc(0)
  for (const direction of RELAY_DIRECTIONS) metrics.quicRelayedBytes.labels(direction).inc(0)
  return metrics
}
