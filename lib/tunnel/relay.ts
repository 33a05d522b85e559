/**
 * The one interface of the tunnel family (SPEC §7), as undici's connectors are one interface
 * whatever the transport: the raw QUIC relay (raw-quic/), WebTransport over HTTP/3
 * (webtransport-h3/) and over HTTP/2 (webtransport-h2/) each take what their listener proposes
 * and accept or refuse it, close on the same trust changes with the same grace (SPEC §8), stop
 * accepting on shutdown and close. What they share besides: one close table
 * (errors.ts TUNNEL_CLOSE_REASONS), one trust identity (the upstream trust's key,
 * lib/tls/trust-policy.ts), one close-after-grace (grace-closer.ts), one pod drain
 * (lib/drain/pod-drain.ts) and one per-connection drain (lib/drain: each tunnel is a
 * DrainableConnection of the registry, for shutdown and replica balancing).
 */
import type { ConnectionKind } from '../drain/connection-kinds.ts'
import type { TrustBundle } from '../tls/types.ts'

/** The connection kinds that are tunnels. */
export type TunnelKind = Extract<ConnectionKind, 'raw_quic' | 'webtransport_h3' | 'webtransport_h2'>

export interface TunnelRelay<P> {
  readonly kind: TunnelKind
  /**
   * A tunnel its listener offers (a QUIC connection's Initial, routed before any handshake
   * work; an HTTP/2 session request): accepted and relayed to its pod, or refused with the
   * SPEC reason.
   */
  propose (proposal: P): void
  /**
   * The upstream trust changed: tunnels whose pod leg was dialled under another trust key close
   * after graceMs (`trust_replaced`). Returns how many were scheduled.
   */
  closeTrust (key: string, graceMs: number): number
  /**
   * The client trust changed: tunnels of Pylons whose certificate no longer verifies against
   * the bundle close after graceMs (`client_trust_replaced`). Returns how many Pylons.
   */
  closeUntrustedClients (bundle: TrustBundle, graceMs: number, now?: Date): number
  /** Shutdown has begun: new tunnels are refused; open ones are drained through the connection registry. */
  stopAccepting (): void
  /** Closes every tunnel still open with the reason and stops listening. Idempotent. */
  close (reason?: string): Promise<void>
}
