/**
 * Every router metric, created on a registry passed in (tests use their own). Names keep
 * the Rust router's prefix; label sets are bounded (no identities or addresses).
 * docs/metrics.md lists each one; test/unit/metrics-docs.test.ts keeps the two in step.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import { SKIP_REASONS } from '../discovery/endpoint-slice.ts'
import { REGISTRATION_OUTCOMES } from '../control-plane/registration-outcomes.ts'
import { createTlsMetrics, type TlsMetrics } from '../tls/metrics.ts'
import { createPeerMetrics, type PeerMetrics } from '../discovery/peer-metrics.ts'
import { createWebTransportMetrics, type WebTransportMetrics } from '../tunnel/webtransport-metrics.ts'
import { createRawQuicMetrics, type RawQuicMetrics } from '../tunnel/raw-quic-metrics.ts'
import { createLimitMetrics, type LimitMetrics } from './limits-metrics.ts'

export const PREFIX = 'stargate_k8s_router_'

export interface RouterMetrics extends TlsMetrics, PeerMetrics {
  readonly registry: Registry
  readonly webtransport: WebTransportMetrics
  readonly quic: RawQuicMetrics
  /** Listener caps and timeouts (issue 14). */
  readonly limits: LimitMetrics
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
  const registers = [registry]
  let ageSource: (() => number) | null = null
  const metrics: RouterMetrics = {
    registry,
    ...createTlsMetrics(registry),
    ...createPeerMetrics(registry),
    webtransport: createWebTransportMetrics(registry),
    quic: createRawQuicMetrics(registry),
    limits: createLimitMetrics(registry),
    discoveryWatchRestarts: new Counter({
      name: PREFIX + 'discovery_watch_restarts_total',
      help: 'EndpointSlice list/watch restarts after an error (the informer stops on any non-410 error)',
      registers,
    }),
    discoverySnapshotAge: new Gauge({
      name: PREFIX + 'discovery_snapshot_age_seconds',
      help: 'Seconds since the target snapshot was last known to be current; 0 while the watch is connected',
      registers,
      collect () { if (ageSource !== null) this.set(ageSource()) },
    }),
    discoveryTargets: new Gauge({
      name: PREFIX + 'discovery_targets',
      help: 'Ready Stargate targets in the current snapshot',
      registers,
    }),
    discoverySnapshotGeneration: new Gauge({
      name: PREFIX + 'discovery_snapshot_generation',
      help: 'Generation of the current target snapshot (0 while uninitialized)',
      registers,
    }),
    discoverySnapshotPublishes: new Counter({
      name: PREFIX + 'discovery_snapshot_publishes_total',
      help: 'Target snapshots published (each one changed the target set)',
      registers,
    }),
    endpointSliceSkipped: new Counter({
      name: PREFIX + 'endpointslice_skipped_total',
      help: 'EndpointSlices or endpoints that contributed no target, by reason',
      labelNames: ['reason'] as const,
      registers,
    }),
    targetsFileReloads: new Counter({
      name: PREFIX + 'targets_file_reloads_total',
      help: 'Reads of the --targets-file, by result (a rejected file keeps the last good snapshot)',
      labelNames: ['result'] as const,
      registers,
    }),
    watchStreamsActive: new Gauge({
      name: PREFIX + 'watch_streams_active',
      help: 'Open WatchStargates streams',
      registers,
    }),
    watchMessagesSent: new Counter({
      name: PREFIX + 'watch_messages_sent_total',
      help: 'WatchStargates messages written to streams, by reason (initial, change, heartbeat)',
      labelNames: ['reason'] as const,
      registers,
    }),
    watchEncodeDuration: new Histogram({
      name: PREFIX + 'watch_encode_duration_seconds',
      help: 'Time to encode the WatchStargates message of one snapshot generation (shared by all watchers)',
      buckets: [0.00001, 0.0001, 0.001, 0.01, 0.1],
      registers,
    }),
    registrationStreamsOpened: new Counter({
      name: PREFIX + 'registration_streams_opened_total',
      help: 'RegisterInferenceServer streams received from Pylons',
      registers,
    }),
    registrationStreamsActive: new Gauge({
      name: PREFIX + 'registration_streams_active',
      help: 'RegisterInferenceServer streams currently forwarded to a Stargate pod',
      registers,
    }),
    registrationStreamsClosed: new Counter({
      name: PREFIX + 'registration_streams_closed_total',
      help: 'RegisterInferenceServer streams ended, by outcome (forwarded, invalid_argument, target_unavailable, connect_error, upstream_reset, drained, invalid_response: the pod sent headers or trailers that cannot be forwarded)',
      labelNames: ['outcome'] as const,
      registers,
    }),
    registrationStreamDuration: new Histogram({
      name: PREFIX + 'registration_stream_duration_seconds',
      help: 'Lifetime of forwarded RegisterInferenceServer streams',
      buckets: [0.01, 0.1, 1, 10, 60, 300, 900, 3600, 14400],
      registers,
    }),
    upstreamSessions: new Gauge({
      name: PREFIX + 'upstream_sessions',
      help: 'HTTP/2 client sessions to Stargate pods (connecting or connected), over all pods',
      registers,
    }),
    httpRequests: new Counter({
      name: PREFIX + 'http_requests_total',
      help: 'LLM client HTTP requests by outcome (forwarded, client_aborted, or the error code sent) and response status class',
      labelNames: ['outcome', 'status_class'] as const,
      registers,
    }),
    httpRequestsInFlight: new Gauge({
      name: PREFIX + 'http_requests_in_flight',
      help: 'LLM client HTTP requests being forwarded right now',
      registers,
    }),
    httpRequestDuration: new Histogram({
      name: PREFIX + 'http_request_duration_seconds',
      help: 'Time from receiving an LLM client request to the end of its response (SSE streams included)',
      buckets: [0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 60, 180, 600],
      registers,
    }),
    httpTimeToFirstByte: new Histogram({
      name: PREFIX + 'http_time_to_first_byte_seconds',
      help: 'Time from receiving an LLM client request to the pod\'s response headers',
      buckets: [0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    }),
    http2RapidResetCloses: new Counter({
      name: PREFIX + 'http2_rapid_reset_closes_total',
      help: 'HTTP/2 connections closed with GOAWAY ENHANCE_YOUR_CALM because most of their streams were reset right after opening',
      registers,
    }),
    tlsHandshakeFailures: new Counter({
      name: PREFIX + 'tls_handshake_failures_total',
      help: 'Failed inbound TLS handshakes (bad or missing client certificate, protocol errors), by listener',
      labelNames: ['listener'] as const,
      registers,
    }),
    setSnapshotAgeSource (source) { ageSource = source },
  }
  for (const reason of SKIP_REASONS) metrics.endpointSliceSkipped.labels(reason).inc(0)
  for (const result of ['success', 'rejected']) metrics.targetsFileReloads.labels(result).inc(0)
  for (const outcome of REGISTRATION_OUTCOMES) metrics.registrationStreamsClosed.labels(outcome).inc(0)
  for (const listener of ['front_door', 'webtransport']) metrics.tlsHandshakeFailures.labels(listener).inc(0)
  metrics.httpRequests.labels('forwarded', '2xx').inc(0)
  for (const reason of ['initial', 'change', 'heartbeat']) metrics.watchMessagesSent.labels(reason).inc(0)
  return metrics
}
