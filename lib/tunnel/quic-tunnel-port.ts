/**
 * What the two relays of the tunnel's UDP port share: raw QUIC (raw-quic-relay.ts, issue 15)
 * and WebTransport over HTTP/3 (webtransport-h3-relay.ts, issue 16) are the same port in the
 * two modes, so a Pylon meets the same behaviour in both.
 *
 * - TUNNEL_CLOSE_REASONS: the reasons (application code 0) a peer reads when the router closes
 *   a tunnel (SPEC §7 wire strings).
 * - HandshakeFailureLog: every refused or failed handshake, of a Pylon (refused from its Initial
 *   by SNI routing, or failing on the router's side) or of the router's dial to a pod
 *   (`upstream_*`), is counted in quic_handshake_failures_total{reason} and logged with its
 *   reason. Unauthenticated peers cause these at will: the logger rate-limits the message per
 *   reason (lib/log.ts PEER_TRIGGERED_MESSAGES lists both modes' messages).
 * - PodDrain: tunnels follow the snapshot. When a tunnel's pod terminates, leaves the Service or
 *   moves to another address, the tunnel is closed after --drain-grace-ms unless the pod comes
 *   back first, as registrations are. A pod that only turns unready keeps its tunnels.
 * - CLOSE_FLUSH_MS: when one leg's peer closes, the other leg first delivers what the router
 *   took from that peer, then closes with its code and reason, within this bound.
 */
import type { Counter } from 'prom-client'
import type { Logger } from '../log.ts'
import { presentTarget, type SnapshotReader, type TargetSnapshot } from '../discovery/types.ts'
import type { QuicCloseInfo } from '../quic/connection.ts'
import type { QuicEngine } from '../quic/engine.ts'
import type { ServerCredentials } from '../quic/credentials.ts'
import type { HostnameTemplate } from '../routing/hostname-template.ts'
import { handshakeFailure } from '../quic/handshake-failure.ts'
import type { HandshakeFailureLabel } from './raw-quic-metrics.ts'
import { QUIC_CLOSE_REASONS, type QuicCloseCode } from './errors.ts'

/** Close reasons of the tunnel port (SPEC §7 wire strings), all with application error code 0: QUIC_CLOSE_REASONS' (errors.ts). */
export const TUNNEL_CLOSE_REASONS: { readonly [K in QuicCloseCode]: typeof QUIC_CLOSE_REASONS[K]['reason'] } = Object.fromEntries(
  Object.entries(QUIC_CLOSE_REASONS).map(([code, { reason }]) => [code, reason])
) as { [K in QuicCloseCode]: typeof QUIC_CLOSE_REASONS[K]['reason'] }

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
  /** The identity new Pylon connections get (the current one; hot reload swaps it; null: every connection refused). */
  readonly serverCredentials: () => ServerCredentials | null
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

/** Where a tunnel's pod leg goes: what must stay the same in the snapshot for it to stay. */
export interface DrainTarget {
  readonly identity: string
  readonly address: string
  readonly quicPort: number
}

interface Followed {
  readonly target: DrainTarget
  timer: NodeJS.Timeout | null
}

export interface PodDrainOptions<T> {
  readonly snapshot: SnapshotReader
  /** --drain-grace-ms */
  readonly graceMs: number
  /** The grace ran out: close the tunnel (it is no longer followed). */
  readonly onDrained: (tunnel: T) => void
}

export class PodDrain<T> {
  readonly #options: PodDrainOptions<T>
  readonly #followed = new Map<T, Followed>()
  /** Followed tunnels by pod identity: a snapshot is walked per pod, not per tunnel. */
  readonly #byIdentity = new Map<string, Set<T>>()
  readonly #unsubscribe: () => void

  constructor (options: PodDrainOptions<T>) {
    this.#options = options
    this.#unsubscribe = options.snapshot.subscribe((snapshot) => { this.#onSnapshot(snapshot) })
  }

  /** Tunnels followed now. */
  get size (): number {
    return this.#followed.size
  }

  /** Starts following a tunnel relayed to target (a tunnel followed already moves to it). */
  follow (tunnel: T, target: DrainTarget): void {
    this.forget(tunnel)
    this.#followed.set(tunnel, { target: { identity: target.identity, address: target.address, quicPort: target.quicPort }, timer: null })
    let set = this.#byIdentity.get(target.identity)
    if (set === undefined) {
      set = new Set()
      this.#byIdentity.set(target.identity, set)
    }
    set.add(tunnel)
  }

  /** Stops following a tunnel (it ended); a pending drain is cancelled. */
  forget (tunnel: T): void {
    const followed = this.#followed.get(tunnel)
    if (followed === undefined) return
    if (followed.timer !== null) clearTimeout(followed.timer)
    this.#followed.delete(tunnel)
    const set = this.#byIdentity.get(followed.target.identity)
    set?.delete(tunnel)
    if (set !== undefined && set.size === 0) this.#byIdentity.delete(followed.target.identity)
  }

  /** Stops following the snapshot and cancels every pending drain (shutdown). */
  dispose (): void {
    this.#unsubscribe()
    for (const followed of this.#followed.values()) if (followed.timer !== null) clearTimeout(followed.timer)
    this.#followed.clear()
    this.#byIdentity.clear()
  }

  #onSnapshot (snapshot: TargetSnapshot): void {
    if (!snapshot.initialized) return
    for (const [identity, set] of this.#byIdentity) {
      // Unready but not terminating keeps its tunnels, as registrations (SPEC §3 rule 2).
      const now = presentTarget(snapshot, identity)
      for (const tunnel of set) {
        const followed = this.#followed.get(tunnel) as Followed
        const present = now !== undefined && now.address === followed.target.address && now.quicPort === followed.target.quicPort
        if (present && followed.timer !== null) {
          clearTimeout(followed.timer)
          followed.timer = null
        } else if (!present && followed.timer === null) {
          followed.timer = setTimeout(PodDrain.#onGrace, this.#options.graceMs, this, tunnel)
          followed.timer.unref()
        }
      }
    }
  }

  static #onGrace<T> (drain: PodDrain<T>, tunnel: T): void {
    drain.forget(tunnel)
    drain.#options.onDrained(tunnel)
  }
}
