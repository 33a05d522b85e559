/**
 * Metrics of the raw QUIC relay (SPEC §7). Self-contained so the composition root can merge
 * them into RouterMetrics: createRawQuicMetrics(registry) registers them on the router's
 * registry. The connection outcome names are the Rust router's; every series exists from the
 * start (at 0) so dashboards and alerts see them before the first tunnel.
 *
 * Relayed bytes are counted by the relay in plain numbers on the hot path and read at
 * scrape time (no label lookup per chunk).
 */
import type { Counter, Gauge, Registry } from 'prom-client'
import { collectTotals, defineMetrics } from '../../metrics/define.ts'
import { HANDSHAKE_FAILURE_REASONS } from '../../quic/handshake-failure.ts'
import { ENDPOINT_DROP_REASONS, STATELESS_PACKET_TYPES, type EndpointDropReason, type StatelessPacketType } from '../../quic/native.ts'

const QUIC_OUTCOMES = ['accepted', 'missing_sni', 'unknown_sni', 'target_unavailable', 'completed', 'relay_error'] as const
export type QuicOutcome = typeof QUIC_OUTCOMES[number]

const RELAY_DIRECTIONS = ['client_to_stargate', 'stargate_to_client'] as const

/**
 * Why a handshake on the tunnel port was refused or failed: the SNI refusals made
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
  /** By the engine's own reason and type names (lib/quic/native.ts), which are the label values. */
  readonly dropped: Readonly<Record<EndpointDropReason, number>>
  readonly stateless: Readonly<Record<StatelessPacketType, number>>
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
  /**
   * Where the endpoint gauges and drop counters read their values at scrape time; the source
   * returns null once the endpoint is gone (the gauges read 0, the counters keep their totals).
   */
  setEndpointSource (source: () => EndpointCounts | null): void
}

export function createRawQuicMetrics (registry: Registry): RawQuicMetrics {
  const define = defineMetrics(registry)
  let relayed: (() => RelayedBytes) | null = null
  let endpoint: (() => EndpointCounts | null) | null = null
  let engineIo: (() => EngineIo) | null = null
  let busyNsReported = 0
  return {
    quicConnections: define.counter('quic_connections_total', 'Raw QUIC tunnel connections by outcome: accepted (routed by SNI), missing_sni, unknown_sni, target_unavailable, then completed or relay_error for each accepted one', { outcome: QUIC_OUTCOMES }),
    quicRelayConnectionsActive: define.gauge('quic_relay_connections_active', 'Raw QUIC tunnels being relayed right now (client leg accepted and routed, until either leg closes)'),
    quicRelayedBytes: define.counter(
      'quic_relayed_bytes_total',
      'Stream and datagram payload bytes relayed by raw QUIC tunnels, by direction (client_to_stargate, stargate_to_client)',
      { direction: RELAY_DIRECTIONS },
      collectTotals('direction', readingOf(() => relayed, (bytes) => ({ client_to_stargate: bytes.clientToStargate, stargate_to_client: bytes.stargateToClient })))),
    quicEndpointConnections: define.gauge(
      'quic_endpoint_connections',
      'QUIC connections on the tunnel port (handshaking, relaying or closing); bounded by --quic-max-connections',
      {}, function () { if (endpoint !== null) this.set(endpoint()?.connections ?? 0) }),
    quicEndpointHalfOpen: define.gauge(
      'quic_endpoint_half_open',
      'QUIC handshakes in progress on the tunnel port (Initials waiting for routing included); above --quic-retry-threshold every new client is sent a Retry first',
      {}, function () { if (endpoint !== null) this.set(endpoint()?.halfOpen ?? 0) }),
    quicStatelessPackets: define.counter(
      'quic_stateless_packets_total',
      'Packets the tunnel port answered without connection state, by type: retry (address validation under load or --quic-retry), stateless_reset (a packet for a connection it does not know), version_negotiation',
      { type: STATELESS_PACKET_TYPES },
      collectTotals('type', readingOf(() => endpoint, (counts) => counts?.stateless ?? null))),
    quicHandshakeFailures: define.counter('quic_handshake_failures_total', 'QUIC handshakes on the tunnel port (raw QUIC, or WebTransport over HTTP/3) refused or failed, by reason: missing_sni, unknown_sni, target_unavailable (refused from the Initial), alpn, certificate, client_certificate, timeout, tls, protocol, peer_refused, unreachable (the Pylon leg), and the same prefixed upstream_ for the leg to the pod', { reason: HANDSHAKE_FAILURES }),
    quicEngineSyscalls: define.counter(
      'quic_engine_syscalls_total',
      'Socket calls of the QUIC engine (all its UDP sockets: tunnel port and pod legs), by call: send (sendmmsg, each sending a batch, with UDP GSO where the kernel takes it), recv (recvmmsg, with UDP GRO)',
      { call: ['send', 'recv'] },
      collectTotals('call', readingOf(() => engineIo, (io) => ({ send: io.sendCalls, recv: io.recvCalls })))),
    quicEngineDatagrams: define.counter(
      'quic_engine_datagrams_total',
      'UDP datagrams the QUIC engine sent (tx) and received (rx) on all its sockets',
      { direction: ['tx', 'rx'] },
      collectTotals('direction', readingOf(() => engineIo, (io) => ({ tx: io.txDatagrams, rx: io.rxDatagrams })))),
    quicEngineCpuSeconds: define.counter(
      'quic_engine_cpu_seconds_total',
      'CPU time of the QUIC engine in its native event-loop callbacks (packet I/O and its syscalls, ngtcp2, TLS, native splice and datagram bridge), JavaScript excluded: the thread CPU clock read around a random 1 in 16 of the callbacks, scaled up (an estimate; over a bulk transfer within a few per cent)',
      {}, function () {
        if (engineIo === null) return
        const now = engineIo().busyNs
        if (now > busyNsReported) this.inc((now - busyNsReported) / 1e9)
        busyNsReported = Math.max(busyNsReported, now)
      }),
    quicDatagramsDropped: define.counter(
      'quic_datagrams_dropped_total',
      'Datagrams the tunnel port dropped before they reached a connection, by reason (malformed, unknown_connection, connection_limit, invalid_token, pending_limit, closing)',
      { reason: ENDPOINT_DROP_REASONS },
      collectTotals('reason', readingOf(() => endpoint, (counts) => counts?.dropped ?? null))),
    setRelayedBytesSource (fn: () => RelayedBytes): void {
      relayed = fn
    },
    setEndpointSource (fn: () => EndpointCounts | null): void {
      endpoint = fn
    },
    setEngineSource (fn: () => EngineIo): void {
      engineIo = fn
    },
  }
}

/**
 * Totals by label value from a scrape-time source that may not be attached yet (`current`
 * returns the source as it is at scrape time, null before set*Source; `pick` null: nothing to
 * report now).
 */
function readingOf<T> (current: () => (() => T) | null, pick: (value: T) => Readonly<Record<string, number>> | null): () => Readonly<Record<string, number>> | null {
  return () => {
    const source = current()
    return source === null ? null : pick(source())
  }
}
