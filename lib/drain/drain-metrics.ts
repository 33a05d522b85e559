/**
 * Metrics of the drain mechanism (SPEC §11): connections drained, by kind and reason; streams
 * a draining connection refused, by kind and the side that opened them; and the connections
 * open now by kind, read from the registry at scrape time (what replica balancing compares).
 * Every label is a bounded table; every series exists from the start.
 */
import type { Counter, Gauge, Registry } from 'prom-client'
import { defineMetrics } from '../metrics/define.ts'
import { CONNECTION_KINDS, type ConnectionKind } from './connection-kinds.ts'
import { DRAIN_REASON_NAMES } from './drain-reasons.ts'

/** The kinds whose streams a drain can refuse (an HTTP/1.1 connection has none; HTTP/2 GOAWAY refuses in nghttp2). */
export const REFUSING_KINDS = ['registration', 'raw_quic', 'webtransport_h3', 'webtransport_h2'] as const satisfies readonly ConnectionKind[]
export type RefusingKind = typeof REFUSING_KINDS[number]
/** Who opened a refused stream. */
export const STREAM_SIDES = ['pylon', 'stargate'] as const
export type StreamSide = typeof STREAM_SIDES[number]

export interface DrainMetrics {
  readonly drained: Counter<'kind' | 'reason'>
  readonly streamsRefused: Counter<'kind' | 'side'>
  readonly open: Gauge<'kind'>
  /** Where connections_open reads its counts at scrape time. */
  setOpenSource (source: () => Readonly<Record<ConnectionKind, number>>): void
}

export function createDrainMetrics (registry: Registry): DrainMetrics {
  const define = defineMetrics(registry)
  let source: (() => Readonly<Record<ConnectionKind, number>>) | null = null
  return {
    drained: define.counter('connections_drained_total', 'Connections told to stop taking new work and close once their open work ended, by kind (registration: front-door HTTP/2 carrying RegisterInferenceServer, raw_quic, webtransport_h3, webtransport_h2, http: other front-door connections) and reason', { kind: CONNECTION_KINDS, reason: DRAIN_REASON_NAMES }),
    streamsRefused: define.counter('drain_streams_refused_total', 'Streams opened on a draining connection and refused (tunnels: the stream error code of docs/errors.md; registration connections: UNAVAILABLE), by kind and the side that opened them', { kind: REFUSING_KINDS, side: STREAM_SIDES }),
    open: define.gauge('connections_open', 'Connections open now, by kind (as connections_drained_total)', { kind: CONNECTION_KINDS }, function () {
      if (source === null) return
      const counts = source()
      for (const kind of CONNECTION_KINDS) this.set({ kind }, counts[kind])
    }),
    setOpenSource (read) { source = read },
  }
}
