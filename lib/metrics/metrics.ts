/**
 * Every router metric, created on a registry passed in (tests use their own). Names keep
 * the Rust router's prefix; label sets are bounded (no identities or addresses).
 * docs/metrics.md lists each one; test/unit/metrics-docs.test.ts keeps the two in step.
 */
import { type Counter, type Gauge, type Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import { defineMetrics } from './define.ts'
import { SKIP_REASONS } from '../discovery/endpoint-slice.ts'
import { REGISTRATION_OUTCOMES } from '../control-plane/registration-outcomes.ts'
import { createTlsMetrics, type TlsMetrics } from '../tls/metrics.ts'
import { createPeerMetrics, type PeerMetrics } from '../discovery/peer-metrics.ts'
import { createRebalanceMetrics, type RebalanceMetrics } from '../rebalance/rebalance-metrics.ts'
import { createWebTransportMetrics, type WebTransportMetrics } from '../tunnel/webtransport-metrics.ts'
import { createRawQuicMetrics, type RawQuicMetrics } from '../tunnel/raw-quic-metrics.ts'
import { createLimitMetrics, type LimitMetrics } from './limits-metrics.ts'
import { createDrainMetrics, type DrainMetrics } from '../drain/drain-metrics.ts'

export interface RouterMetrics extends TlsMetrics, PeerMetrics, RebalanceMetrics {
  readonly registry: Registry
  readonly webtransport: WebTransportMetrics
  readonly quic: RawQuicMetrics
  /** Listener caps and timeouts (issue 14). */
  readonly limits: LimitMetrics
  /** Connections drained, streams refused while draining, connections open by kind (SPEC §11). */
  readonly drain: DrainMetrics
  readonly discoveryWatchRestarts: Counter
  readonly discoverySnapshotAge: Gauge
  readonly discoveryTargets: Gauge
  readonly discoverySnapshotGeneration: Gauge
  readonly discoverySnapshotPublishes: Counter
  readonly endpointSliceSkipped: Counter<'reason'>
  readonly targetsFileReloads: Counter<'result'>
  readonly watchStreamsActive: Gauge
  readonly watchMessagesSent: Counter<'reason'>
  readonly watchEncodeDuration: Histogram
  readonly registrationStreamsOpened: Counter
  readonly registrationStreamsActive: Gauge
  readonly registrationStreamsClosed: Counter<'outcome'>
  readonly registrationStreamDuration: Histogram
  readonly upstreamSessions: Gauge
  readonly httpRequests: Counter<'outcome' | 'status_class'>
  readonly httpRequestsInFlight: Gauge
  readonly httpRequestDuration: Histogram
  readonly httpTimeToFirstByte: Histogram
  readonly http2RapidResetCloses: Counter
  readonly tlsHandshakeFailures: Counter<'listener'>
  /** Where discovery_snapshot_age_seconds reads its value at scrape time. */
  setSnapshotAgeSource (source: () => number): void
}

export function createMetrics (registry: Registry = new Registry(), options: { defaultMetrics?: boolean } = {}): RouterMetrics {
  if (options.defaultMetrics !== false) collectDefaultMetrics({ register: registry })
  const define = defineMetrics(registry)
  let ageSource: (() => number) | null = null
  return {
    registry,
    ...createTlsMetrics(registry),
    ...createPeerMetrics(registry),
    ...createRebalanceMetrics(registry),
    webtransport: createWebTransportMetrics(registry),
    quic: createRawQuicMetrics(registry),
    limits: createLimitMetrics(registry),
    drain: createDrainMetrics(registry),
    discoveryWatchRestarts: define.counter('discovery_watch_restarts_total', 'EndpointSlice list/watch restarts after an error (the informer stops on any non-410 error)'),
    discoverySnapshotAge: define.gauge(
      'discovery_snapshot_age_seconds',
      'Seconds since the target snapshot was last known to be current; 0 while the watch is connected',
      {}, function () { if (ageSource !== null) this.set(ageSource()) }),
    discoveryTargets: define.gauge('discovery_targets', 'Ready Stargate targets in the current snapshot'),
    discoverySnapshotGeneration: define.gauge('discovery_snapshot_generation', 'Generation of the current target snapshot (0 while uninitialized)'),
    discoverySnapshotPublishes: define.counter('discovery_snapshot_publishes_total', 'Target snapshots published (each one changed the target set)'),
    endpointSliceSkipped: define.counter('endpointslice_skipped_total', 'EndpointSlices or endpoints that contributed no target, by reason', { reason: SKIP_REASONS }),
    targetsFileReloads: define.counter('targets_file_reloads_total', 'Reads of the --targets-file, by result (a rejected file keeps the last good snapshot)', { result: ['success', 'rejected'] }),
    watchStreamsActive: define.gauge('watch_streams_active', 'Open WatchStargates streams'),
    watchMessagesSent: define.counter('watch_messages_sent_total', 'WatchStargates messages written to streams, by reason (initial, change, heartbeat)', { reason: ['initial', 'change', 'heartbeat'] }),
    watchEncodeDuration: define.histogram('watch_encode_duration_seconds', 'Time to encode the WatchStargates message of one snapshot generation (shared by all watchers)', [0.00001, 0.0001, 0.001, 0.01, 0.1]),
    registrationStreamsOpened: define.counter('registration_streams_opened_total', 'RegisterInferenceServer streams received from Pylons'),
    registrationStreamsActive: define.gauge('registration_streams_active', 'RegisterInferenceServer streams currently forwarded to a Stargate pod'),
    registrationStreamsClosed: define.counter('registration_streams_closed_total', 'RegisterInferenceServer streams ended, by outcome (forwarded, invalid_argument, target_unavailable, connect_error, upstream_reset, drained, invalid_response: the pod sent headers or trailers that cannot be forwarded)', { outcome: REGISTRATION_OUTCOMES }),
    registrationStreamDuration: define.histogram('registration_stream_duration_seconds', 'Lifetime of forwarded RegisterInferenceServer streams', [0.01, 0.1, 1, 10, 60, 300, 900, 3600, 14400]),
    upstreamSessions: define.gauge('upstream_sessions', 'HTTP/2 client sessions to Stargate pods (connecting or connected), over all pods'),
    // Outcomes are error codes and status classes follow them: only the usual pair starts at 0.
    httpRequests: define.counter('http_requests_total', 'LLM client HTTP requests by outcome (forwarded, client_aborted, or the error code sent) and response status class', { outcome: ['forwarded'], status_class: ['2xx'] }),
    httpRequestsInFlight: define.gauge('http_requests_in_flight', 'LLM client HTTP requests being forwarded right now'),
    httpRequestDuration: define.histogram('http_request_duration_seconds', 'Time from receiving an LLM client request to the end of its response (SSE streams included)', [0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 60, 180, 600]),
    httpTimeToFirstByte: define.histogram('http_time_to_first_byte_seconds', 'Time from receiving an LLM client request to the pod\'s response headers', [0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]),
    http2RapidResetCloses: define.counter('http2_rapid_reset_closes_total', 'HTTP/2 connections closed with GOAWAY ENHANCE_YOUR_CALM because most of their streams were reset right after opening'),
    tlsHandshakeFailures: define.counter('tls_handshake_failures_total', 'Failed inbound TLS handshakes (bad or missing client certificate, protocol errors), by listener', { listener: ['front_door', 'webtransport'] }),
    setSnapshotAgeSource (source) { ageSource = source },
  }
}
