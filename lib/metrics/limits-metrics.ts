/**
 * Metrics of the listeners' limits and timeouts: connections refused at a cap or by
 * an accept error, health connections closed to make room at its cap, connections closed by a
 * timeout, and what is open now. Labels are bounded tables below; every series exists from the
 * start at 0.
 */
import { counter, gauge, metricGroup } from './define.ts'

const LISTENERS = ['front_door', 'health', 'webtransport'] as const

const REFUSE_REASONS = ['max_connections', 'accept_error'] as const

/** What a health connection closed at the cap was doing (lib/health/connection-cap.ts). */
const EVICTED_STATES = ['idle', 'busy'] as const

/** Why the front door closed a connection the client had not finished with. */
const TIMEOUT_REASONS = ['headers_timeout', 'keep_alive_timeout', 'http2_idle_timeout', 'tls_handshake_timeout'] as const
export type TimeoutReason = typeof TIMEOUT_REASONS[number]

export const createLimitMetrics = metricGroup({
  connectionsRefused: counter('connections_refused_total', 'Inbound TCP connections closed at accept, by listener and reason (max_connections: over the cap of the front door, or of the WebTransport-over-HTTP/2 listener, which takes the same --front-door-max-connections (the health listener makes room instead: health_connections_evicted_total); accept_error: e.g. EMFILE, the listener keeps serving)', { listener: LISTENERS, reason: REFUSE_REASONS }),
  healthConnectionsEvicted: counter('health_connections_evicted_total', 'Health-port connections closed at its cap of 256 to take a new one (a probe), by state (idle: the oldest without a request in flight; busy: the oldest, when every connection had a request in flight)', { state: EVICTED_STATES }),
  healthPipeliningCloses: counter('health_pipelining_closes_total', 'Health-port connections closed for pipelining more than 8 requests behind the one being answered (the port answers a connection\'s requests one at a time; probes and scrapes never pipeline)'),
  connectionsTimedOut: counter('front_door_connections_timed_out_total', 'Front-door connections closed by a timeout, by reason (headers_timeout: request head not received in time; keep_alive_timeout: idle HTTP/1.1; http2_idle_timeout: HTTP/2 session without streams, GOAWAY; tls_handshake_timeout)', { reason: TIMEOUT_REASONS }),
  frontDoorConnections: gauge('front_door_connections', 'Open front-door TCP connections (the cap is --front-door-max-connections)'),
})

export type LimitMetrics = ReturnType<typeof createLimitMetrics>
