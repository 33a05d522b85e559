/**
 * WebTransport over HTTP/3 on the tunnel's UDP port (SPEC §7), as the Rust router, the real
 * Pylon and the real Stargate speak it, on the QUIC engine.
 *
 *   Initial ──SNI (read from the ClientHello before any handshake work)──▶ routed?
 *     no  → refused in the Initial: `missing target SNI` / `unknown target SNI` /
 *           `target stargate not ready`, counted under that outcome
 *     yes → accepted with ALPN h3 and the current server credentials (`accepted` counted)
 *           → a WebTransportH3Tunnel (tunnel.ts) carries the session
 *
 * Policy lives here: the session cap (--webtransport-max-sessions, pending and bridged; one
 * session per connection, the HTTP/3 max-sessions setting), the upstream trust in force for new
 * dials and the tunnels verified under an older one (closed, `trust_replaced`), client
 * certificates that no longer verify after a client-trust change, tunnels to pods that left the
 * ready set (closed after --drain-grace-ms with `target stargate left the ready set`), and
 * shutdown (`router shutdown` on every session, then the connections). Each tunnel is a
 * drainable connection of the registry (lib/drain; the tunnel's beginDrain).
 */
import { X509Certificate } from 'node:crypto'
import type { QuicConnection } from '../../quic/connection.ts'
import type { ClientCredentials } from '../../quic/credentials.ts'
import type { UpstreamTrustFollower } from '../../tls/upstream-trust-consumer.ts'
import type { QuicEndpoint, QuicEndpointLimits, QuicProposal } from '../../quic/endpoint.ts'
import type { QuicH3Options } from '../../quic/h3/quic-h3.ts'
import type { PodTarget } from '../../discovery/types.ts'
import { resolveSni } from '../../routing/resolve.ts'
import type { TrustBundle } from '../../tls/types.ts'
import type { QuicCloseInfo } from '../../quic/connection.ts'
import type { RawQuicMetrics } from '../raw-quic/metrics.ts'
import { HandshakeFailureLog, type TunnelPortRelayOptions } from '../quic-port.ts'
import { PodDrain } from '../../drain/pod-drain.ts'
import { TUNNEL_CLOSE_REASONS } from '../errors.ts'
import { GraceCloser } from '../grace-closer.ts'
import type { TunnelKind, TunnelRelay } from '../relay.ts'
import { REJECTIONS, type RejectionCode } from '../webtransport-connect.ts'
import type { WebTransportMetrics } from '../webtransport-metrics.ts'
import { CLOSE_GRACE_MS, WebTransportH3Tunnel, type TunnelEnd, type TunnelHost } from './tunnel.ts'
import type { ConnectionRegistry } from '../../drain/connection-registry.ts'
import { TunnelHandle } from '../tunnel-handle.ts'
import { tunnelCloseReasonOf, type DrainReason } from '../../drain/drain-reasons.ts'
import type { DrainMetrics } from '../../drain/drain-metrics.ts'

function peerChainOfTunnel (tunnel: WebTransportH3Tunnel): X509Certificate[] {
  return tunnel.down.quic.peerCertificates().map((der) => new X509Certificate(der))
}

export interface WebTransportH3RelayOptions extends TunnelPortRelayOptions {
  readonly host: string
  readonly port: number
  /** How to verify pods: the HTTP/3 leg's upstream trust, followed through reloads (its key names it). */
  readonly upstream: UpstreamTrustFollower<ClientCredentials>
  readonly idleTimeoutMs: number
  /** 0 disables keep-alive PINGs. */
  readonly keepAliveMs: number
  /** Sessions (waiting for the pod or bridged) at once. */
  readonly maxSessions: number
  /** The HTTP/3 max-sessions setting offered to Pylons (at most 1: one session per connection). */
  readonly maxSessionsPerConnection: number
  readonly maxFieldSectionSize: number
  readonly limits?: QuicEndpointLimits
  /** Stateless reset key (see QuicListenOptions.resetSecret). */
  readonly resetSecret?: Uint8Array | null
  readonly metrics: WebTransportMetrics
  /** The tunnel port's QUIC handshake failures, counted as for raw QUIC. */
  readonly handshakeFailures?: RawQuicMetrics['quicHandshakeFailures'] | null
  /** Where tunnels are registered to be drained (shutdown, replica balancing); null: nowhere. */
  readonly connections?: ConnectionRegistry | null
  readonly drainMetrics?: DrainMetrics | null
}

export class WebTransportH3Relay implements TunnelRelay<QuicProposal>, TunnelHost {
  readonly kind: TunnelKind = 'webtransport_h3'
  readonly h3Options: QuicH3Options
  readonly connectTimeoutMs: number
  readonly #options: WebTransportH3RelayOptions
  readonly #tunnels = new Set<WebTransportH3Tunnel>()
  /** Tunnels draining before a trust-change close (SPEC §8: graceful first, closed after the grace). */
  readonly #grace = new GraceCloser<WebTransportH3Tunnel>((tunnel, reason) => { tunnel.close(reason, 'trust_replaced') })
  /** Sessions admitted (dialing or bridged) whose outcome is not final yet: what --webtransport-max-sessions bounds. */
  #sessions = 0
  /** Tunnels follow the snapshot: closed when their pod leaves the ready set (from listen() on). */
  #drain: PodDrain<WebTransportH3Tunnel> | null = null
  #endpoint: QuicEndpoint | null = null
  #accepting = true
  #closing: Promise<void> | null = null
  readonly #failures: HandshakeFailureLog
  /** Tunnels in the connection registry (drained there: the tunnel's beginDrain). */
  readonly #handles = new Map<WebTransportH3Tunnel, TunnelHandle>()

  constructor (options: WebTransportH3RelayOptions) {
    this.#options = options
    this.connectTimeoutMs = options.connectTimeoutMs
    this.#failures = new HandshakeFailureLog({ counter: options.handshakeFailures ?? null, logger: options.logger, message: 'webtransport http/3 handshake refused' })
    this.h3Options = {
      maxFieldSectionSize: options.maxFieldSectionSize,
      // A tunnel is one Pylon connection carrying one session, as the Rust router serves it:
      // the setting says so, and a further session request is reset (H3_REQUEST_REJECTED).
      webTransportMaxSessions: Math.min(1, options.maxSessionsPerConnection),
    }
  }

  /** Tunnels open now (any state). */
  get tunnels (): number {
    return this.#tunnels.size
  }

  get endpoint (): QuicEndpoint | null {
    return this.#endpoint
  }

  /** Binds the UDP port (port overrides the option: the HTTP/2 listener's when that was 0). */
  listen (port: number = this.#options.port): { readonly address: string, readonly port: number } {
    const { engine, host } = this.#options
    this.#endpoint = engine.listen({
      host,
      port,
      ...this.#options.limits,
      resetSecret: this.#options.resetSecret ?? null,
      transport: this.#transport(),
      onProposal: (proposal) => { this.propose(proposal) },
    })
    this.#drain = new PodDrain({ snapshot: this.#options.snapshot, graceMs: this.#options.drainGraceMs, bound: 'address', onDrained: (tunnel) => { tunnel.close(TUNNEL_CLOSE_REASONS.target_left) } })
    for (const tunnel of this.#tunnels) this.#drain.follow(tunnel, tunnel.target)
    return { address: this.#endpoint.address, port: this.#endpoint.port }
  }

  /** Unbinds the UDP port again (before any tunnel: the TCP listener could not take the same number). */
  unlisten (): void {
    this.#drain?.dispose()
    this.#drain = null
    this.#endpoint?.close()
    this.#endpoint = null
  }

  /** Shutdown has begun: new connections are refused; open tunnels keep relaying. */
  stopAccepting (): void {
    this.#accepting = false
  }

  /** Scheduled sessions are asked to drain first (DRAIN_WEBTRANSPORT_SESSION to both peers), then closed (outcome trust_replaced). */
  closeTrust (key: string, graceMs: number): number {
    const scheduled = this.#grace.closeTrust(this.#open(), (tunnel) => tunnel.up === null ? null : tunnel.trustKey, key, graceMs)
    for (const tunnel of scheduled) tunnel.drain()
    return scheduled.length
  }

  closeUntrustedClients (bundle: TrustBundle, graceMs: number, now: Date = new Date()): number {
    const scheduled = this.#grace.closeUntrustedClients(this.#open(), peerChainOfTunnel, bundle, graceMs, now)
    for (const tunnel of scheduled) tunnel.drain()
    return scheduled.length
  }

  /** Tunnels not ending already. */
  * #open (): Iterable<WebTransportH3Tunnel> {
    for (const tunnel of this.#tunnels) if (tunnel.state !== 'closing' && tunnel.state !== 'closed') yield tunnel
  }

  /** Every session gets a close capsule with the reason, then the connections close. Idempotent. */
  close (reason: string = TUNNEL_CLOSE_REASONS.shutdown): Promise<void> {
    this.#closing ??= this.#close(reason)
    return this.#closing
  }

  async #close (reason: string): Promise<void> {
    this.#accepting = false
    this.#grace.clear()
    this.#drain?.dispose()
    for (const tunnel of this.#tunnels) tunnel.close(reason)
    if (this.#tunnels.size > 0) await new Promise((resolve) => { setTimeout(resolve, CLOSE_GRACE_MS + 200).unref() })
    for (const tunnel of [...this.#tunnels]) tunnel.destroy(reason)
    this.#endpoint?.close()
  }

  // ── TunnelHost ────────────────────────────────────────────────────────────────────

  dial (target: PodTarget, serverName: string): { readonly quic: QuicConnection, readonly trustKey: string } | null {
    const trust = this.#options.upstream.current()
    try {
      const quic = this.#options.engine.connect({
        address: target.address,
        port: target.quicPort,
        serverName,
        alpn: ['h3'],
        credentials: trust.runtime,
        transport: { ...this.#transport(), handshakeTimeoutMs: this.#options.connectTimeoutMs },
      })
      return { quic, trustKey: trust.trust.key }
    } catch (err) {
      this.#options.logger.warn({ target: target.identity, err: (err as Error).message }, 'webtransport http/3 dial could not start')
      return null
    }
  }

  admit (): boolean {
    if (this.#sessions >= this.#options.maxSessions) return false
    this.#sessions++
    return true
  }

  release (): void {
    this.#sessions--
  }

  onBridged (tunnel: WebTransportH3Tunnel): void {
    this.#options.metrics.activeSessions.inc()
    this.#options.logger.debug({ target: tunnel.target.identity }, 'webtransport http/3 session bridged')
  }

  onEnd (tunnel: WebTransportH3Tunnel, end: TunnelEnd | null, detail: string): void {
    if (end !== null) this.#options.metrics.sessions.labels(end).inc()
    if (tunnel.wasBridged) this.#options.metrics.activeSessions.dec()
    this.#options.logger.debug({ target: tunnel.target.identity, end, detail, seconds: Math.round((Date.now() - tunnel.startedAt) / 1000) }, 'webtransport http/3 session ended')
  }

  onDrainRefused (_tunnel: WebTransportH3Tunnel, side: 'pylon' | 'stargate', count: number): void {
    this.#options.drainMetrics?.streamsRefused.labels('webtransport_h3', side).inc(count)
  }

  onHandshakeFailed (tunnel: WebTransportH3Tunnel, leg: 'downstream' | 'upstream', info: QuicCloseInfo): void {
    if (leg === 'downstream') this.#failures.closed('pylon', info, { remote: tunnel.down.quic.remoteAddress, sni: tunnel.serverName, alpn: ['h3'] })
    else this.#failures.closed('pod', info, { target: tunnel.target.identity, sni: tunnel.serverName, alpn: ['h3'] })
  }

  onRejected (tunnel: WebTransportH3Tunnel, code: RejectionCode, detail: string): void {
    if (code === 'total_session_limit') this.#options.metrics.sessionsRefused.labels('total_limit').inc()
    else if (code === 'connection_session_limit') this.#options.metrics.sessionsRefused.labels('connection_limit').inc()
    // A pod that cannot be reached is the operator's business; what a client got wrong is only
    // counted (a misbehaving client must not be able to flood the log).
    const fields = { target: tunnel.target.identity, code, detail }
    const message = `webtransport http/3 session refused: ${REJECTIONS[code].message}`
    if (code.startsWith('upstream_')) this.#options.logger.info(fields, message)
    else this.#options.logger.debug(fields, message)
  }

  // ── internals ─────────────────────────────────────────────────────────────────────

  #transport (): { idleTimeoutMs: number, keepAliveMs: number, datagrams: boolean } {
    return { idleTimeoutMs: this.#options.idleTimeoutMs, keepAliveMs: this.#options.keepAliveMs, datagrams: true }
  }

  /** Refusals here close from the Initial, without a reason phrase (raw-quic/relay.ts propose). */
  propose (proposal: QuicProposal): void {
    if (!this.#accepting) return proposal.reject()
    const route = resolveSni(proposal.sni, this.#options.snapshot.current(), this.#options.template)
    if (!route.ok) {
      this.#options.metrics.sessions.labels(route.reason).inc()
      this.#failures.record(route.reason, { remote: proposal.address, sni: proposal.sni, alpn: proposal.alpn })
      return proposal.reject()
    }
    const credentials = this.#options.serverCredentials.current()
    // A Pylon's handshake gets the same bound as the router's dial to a pod.
    const quic = proposal.accept({ credentials, alpn: ['h3'], transport: { ...this.#transport(), handshakeTimeoutMs: this.#options.connectTimeoutMs } })
    if (quic === null) return
    this.#options.metrics.sessions.labels('accepted').inc()
    const tunnel = new WebTransportH3Tunnel(quic, route.target, (proposal.sni ?? '').toLowerCase(), this)
    this.#tunnels.add(tunnel)
    this.#drain?.follow(tunnel, route.target)
    const registry = this.#options.connections ?? null
    if (registry !== null) {
      const handle = new TunnelHandle(this.kind, registry.now(), {
        drain: (reason) => { tunnel.beginDrain(reason) },
        abort: (reason) => { this.#abort(tunnel, reason) },
      })
      this.#handles.set(tunnel, handle)
      handle.register(registry)
    }
    quic.once('close', () => { this.#onTunnelGone(tunnel) })
  }

  /** A drain that ran out of time: the tunnel closes now, saying what it still waited for. */
  #abort (tunnel: WebTransportH3Tunnel, reason: DrainReason): void {
    // The connections' streams, H3 control and QPACK streams included, as the drain gave up.
    const open = { pylon: tunnel.down.quic.stats()?.openStreams ?? 0, stargate: tunnel.up?.quic.stats()?.openStreams ?? 0 }
    this.#options.logger.warn({ target: tunnel.target.identity, open, state: tunnel.state }, 'webtransport http/3 session: streams still open when its drain ran out of time')
    tunnel.destroy(tunnelCloseReasonOf(reason))
  }

  #onTunnelGone (tunnel: WebTransportH3Tunnel): void {
    if (!this.#tunnels.delete(tunnel)) return
    this.#handles.get(tunnel)?.gone()
    this.#handles.delete(tunnel)
    this.#grace.forget(tunnel)
    this.#drain?.forget(tunnel)
  }
}
