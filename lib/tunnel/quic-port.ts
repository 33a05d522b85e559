/**
 * What the two relays of the tunnel's UDP port share: raw QUIC (raw-quic/relay.ts)
 * and WebTransport over HTTP/3 (webtransport-h3/relay.ts) are the same port in the
 * two modes, so a Pylon meets the same behaviour in both.
 *
 * - HandshakeFailureLog: every refused or failed handshake, of a Pylon (refused from its Initial
 *   by SNI routing, or failing on the router's side) or of the router's dial to a pod
 *   (`upstream_*`), is counted in quic_handshake_failures_total{reason} and logged with its
 *   reason. Unauthenticated peers cause these at will: the logger rate-limits the message per
 *   reason (lib/log.ts PEER_TRIGGERED_MESSAGES lists both modes' messages).
 * - CLOSE_FLUSH_MS: when one leg's peer closes, the other leg first delivers what the router
 *   took from that peer, then closes with its code and reason, within this bound.
 */
import type { Counter } from 'prom-client'
import type { Logger } from '../log.ts'
import type { SnapshotReader } from '../discovery/types.ts'
import type { QuicCloseInfo } from '../quic/connection.ts'
import type { QuicEngine } from '../quic/engine.ts'
import type { ServerCredentials } from '../quic/credentials.ts'
import type { TlsFollower } from '../tls/tls-follower.ts'
import type { HostnameTemplate } from '../routing/hostname-template.ts'
import { handshakeFailure } from '../quic/handshake-failure.ts'
import type { HandshakeFailureLabel } from './raw-quic/metrics.ts'

/**
 * How long a leg whose other leg's peer closed may take to deliver what the router holds for it
 * (bytes already acknowledged to that peer, and the FINs and resets that came with them) before
 * it is closed with that peer's code and reason anyway (QuicConnection.closeWhenFlushed): a
 * leg's whole connection window, 16 MiB, at 13 Mbit/s. Its idle timeout ends it sooner when its
 * peer goes silent; the memory is what the leg already holds, as nothing new is read for it.
 */
export const CLOSE_FLUSH_MS = 10_000

/** What both relays of the tunnel port (raw QUIC, WebTransport over HTTP/3) are built with. */
export interface TunnelPortRelayOptions {
  readonly engine: QuicEngine
  readonly snapshot: SnapshotReader
  /** Matches the SNI of a Pylon's Initial to a target identity. */
  readonly template: HostnameTemplate
  /** The identity new Pylon connections get: the current one (hot reload swaps it). */
  readonly serverCredentials: TlsFollower<ServerCredentials>
  /** Time for the leg to the pod to complete its handshake. */
  readonly connectTimeoutMs: number
  /** How long a tunnel outlives its pod leaving the ready set. */
  readonly drainGraceMs: number
  /** Its refusal lines are rate-limited per reason by the logger (lib/log.ts). */
  readonly logger: Logger
}

export interface HandshakeFailureLogOptions {
  /** quic_handshake_failures_total; null counts nothing (unit tests of a relay). */
  readonly counter: Counter<'reason'> | null
  readonly logger: Logger
  /** The log message, naming the mode ('raw quic handshake refused'); listed in lib/log.ts PEER_TRIGGERED_MESSAGES by reason. */
  readonly message: string
}

export class HandshakeFailureLog {
  readonly #options: HandshakeFailureLogOptions

  constructor (options: HandshakeFailureLogOptions) {
    this.#options = options
  }

  /** Counts a refused or failed handshake and logs it (the logger rate-limits it per reason). */
  record (reason: HandshakeFailureLabel, fields: Record<string, unknown>): void {
    this.#options.counter?.labels(reason).inc()
    this.#options.logger.warn({ reason, ...fields }, this.#options.message)
  }

  /**
   * A leg that closed: when its handshake had not completed, counted by why (the Pylon's leg,
   * which the router served, under the plain reason; the pod's, which it dialed, as
   * `upstream_<reason>`). False when the leg was established or ended without a failure.
   */
  closed (leg: 'pylon' | 'pod', info: QuicCloseInfo, fields: Record<string, unknown>): boolean {
    const reason = handshakeFailure(info, leg === 'pylon' ? 'server' : 'client')
    if (reason === null) return false
    this.record(leg === 'pylon' ? reason : `upstream_${reason}`, { ...fields, alert: info.alert, code: info.code })
    return true
  }
}
