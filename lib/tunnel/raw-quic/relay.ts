/**
 * The raw QUIC reverse-tunnel relay (SPEC §7) on the engine (lib/quic): a Pylon's connection,
 * proposed by the tunnel port's endpoint, is routed by its SNI to a ready Stargate pod and
 * relayed to the pod's quic port with the same SNI and exactly the ALPN the Pylon negotiated —
 * none for none, as real Pylons and Stargates use raw QUIC.
 *
 *   proposal (SNI + ALPN read from the Initial) ─▶ resolveSni ─fail─▶ reject before any handshake
 *        │ ok: accept with the current identity and the Pylon's own ALPN offer    (missing_sni …)
 *        ▼
 *   client leg established ─▶ resolve again (the pod may have left) ─▶ 'accepted'
 *        ▼
 *   dial the pod (same SNI, the negotiated ALPN or none) ─fail/timeout─▶ close the Pylon:
 *        │ established                                   'stargate <id> could not be reached: …'
 *        ▼
 *   every stream, either side: paired in the engine (native/src/bridge.c), a twin opened on
 *   the other leg in stream-ID order (so IDs match) and spliced; datagrams bridged natively
 *   when both legs negotiated them;
 *   CONNECTION_CLOSE code and reason carried to the other leg (after it delivered what the
 *   closing peer had sent, within CLOSE_FLUSH_MS): 'completed' or 'relay_error'
 *
 * Streams the Pylon opens while the pod leg is still connecting wait unread in the engine (flow
 * control holds the Pylon back, within the stream limits the router advertises) and are paired
 * once it is up. Reasons sent to a peer are from TUNNEL_CLOSE_REASONS or name the failure by a
 * short code, never an internal error message.
 *
 * Tunnels follow the snapshot: when their pod leaves the ready set (or moves to
 * another address), they are closed with 'target stargate left the ready set' after
 * --drain-grace-ms, unless it comes back first, as registrations are. A refused or failed
 * handshake is counted by reason and logged once per reason per minute.
 *
 * Relayed tunnels are drainable connections (lib/drain, SPEC §11): a drain makes both legs
 * refuse new bidirectional streams with STREAM_REFUSALS.draining and stop renewing stream
 * credit (native/src/drain.c), lets the open streams finish, and closes both legs with the
 * drain's reason once neither has one left.
 */
import { X509Certificate } from 'node:crypto'
import type { TrustBundle } from '../../tls/types.ts'
import { CLOSE_FLUSH_MS, HandshakeFailureLog, type TunnelPortRelayOptions } from '../quic-port.ts'
import { PodDrain } from '../../drain/pod-drain.ts'
import { GraceCloser } from '../grace-closer.ts'
import type { TunnelKind, TunnelRelay } from '../relay.ts'
import { resolveSni } from '../../routing/resolve.ts'
import type { TransportOptions } from '../../quic/engine.ts'
import type { QuicCloseInfo, QuicConnection } from '../../quic/connection.ts'
import type { QuicEndpoint, QuicEndpointLimits, QuicProposal } from '../../quic/endpoint.ts'
import type { ClientCredentials } from '../../quic/credentials.ts'
import type { UpstreamTrustFollower } from '../../tls/upstream-trust-consumer.ts'
import type { QuicStream } from '../../quic/stream.ts'
import type { QuicOutcome, RawQuicMetrics, RelayedBytes } from './metrics.ts'
import { fillMessage } from '../../error-catalogue.ts'
import { STREAM_REFUSALS, TUNNEL_CLOSE_REASONS } from '../errors.ts'
import type { ConnectionRegistry } from '../../drain/connection-registry.ts'
import { TunnelHandle } from '../tunnel-handle.ts'
import { tunnelCloseReasonOf, type DrainReason } from '../../drain/drain-reasons.ts'
import type { DrainMetrics } from '../../drain/drain-metrics.ts'

export interface RawQuicRelayOptions extends TunnelPortRelayOptions {
  readonly host: string
  readonly port: number
  /** The endpoint's limits on Initials and handshakes (--quic-max-connections, Retry, per address). */
  readonly limits?: QuicEndpointLimits
  /** Stateless reset key (see QuicListenOptions.resetSecret). */
  readonly resetSecret?: Uint8Array | null
  /** How to verify pods: the raw QUIC leg's upstream trust, followed through reloads. */
  readonly upstream: UpstreamTrustFollower<ClientCredentials>
  /** Transport of both legs (idle timeout, keep-alive). */
  readonly transport: TransportOptions
  readonly metrics: RawQuicMetrics
  /** Where relayed tunnels are registered to be drained (shutdown, replica balancing); null: nowhere. */
  readonly connections?: ConnectionRegistry | null
  readonly drainMetrics?: DrainMetrics | null
}

type Leg = 'client' | 'upstream'

interface Tunnel {
  readonly client: QuicConnection
  readonly sni: string
  /** ALPN protocols the Pylon offered (for failure logs). */
  readonly offered: readonly string[]
  identity: string
  /** The upstream trust key the pod leg was dialled under ('' before the dial). */
  trustKey: string
  upstream: QuicConnection | null
  upstreamReady: boolean
  ended: boolean
  /** Bytes of legs already gone (their stats are read while they live). */
  closedBytes: { clientToStargate: number, stargateToClient: number }
  /** Streams each leg refused while draining, of legs already gone. */
  refused: { pylon: number, stargate: number }
  /** Its handle in the connection registry (set once relayed). */
  handle: RawQuicTunnelHandle | null
}

/**
 * A relayed tunnel in the connection registry (../tunnel-handle.ts): draining refuses new
 * streams on both legs (native/src/drain.c, code STREAM_REFUSALS.draining), lets the open
 * ones run to completion, and closes both legs with the reason once neither has one left.
 */
class RawQuicTunnelHandle extends TunnelHandle {
  readonly relay: RawQuicRelay
  /** Legs whose drain waits for their last stream. */
  readonly busy = new Set<Leg>()

  constructor (relay: RawQuicRelay, tunnel: Tunnel, openedAt: number) {
    super('raw_quic', openedAt, {
      drain: () => { relay.drainTunnel(tunnel) },
      abort: (reason) => { relay.abortTunnel(tunnel, reason) },
    })
    this.relay = relay
  }
}

function onLegDrained (this: QuicConnection): void {
  const tunnel = this.data as Tunnel
  const handle = tunnel.handle
  if (handle === null) return
  handle.busy.delete(this === tunnel.client ? 'client' : 'upstream')
  handle.relay.settleDrain(tunnel)
}

/** The leg whose close ended a tunnel, as logged with 'raw quic tunnel closed'. */
interface LegEnd {
  readonly leg: Leg
  readonly kind: QuicCloseInfo['kind']
  readonly app: boolean
  readonly code: number
  readonly liberr: number
}

/**
 * A stream the engine did not pair comes here only when it cannot be (the other leg closed or
 * failed, or its twin could not be opened: native/src/bridge.c): it is refused.
 */
function refuseStream (stream: QuicStream): void {
  stream.stopSending(0)
  if (stream.writable) stream.reset(0)
}

function peerChainOfTunnel (tunnel: Tunnel): X509Certificate[] {
  return tunnel.client.peerCertificates().map((der) => new X509Certificate(der))
}

export class RawQuicRelay implements TunnelRelay<QuicProposal> {
  readonly kind: TunnelKind = 'raw_quic'
  readonly #options: RawQuicRelayOptions
  readonly #tunnels = new Set<Tunnel>()
  readonly #ended = { clientToStargate: 0, stargateToClient: 0 }
  /** Relayed tunnels follow the snapshot (closed when their pod leaves the ready set). */
  readonly #drain: PodDrain<Tunnel>
  /** Tunnels closing after a trust change's grace. */
  readonly #grace = new GraceCloser<Tunnel>((tunnel, reason) => { this.#closeBoth(tunnel, reason, 'completed') })
  readonly #failures: HandshakeFailureLog
  #endpoint: QuicEndpoint | null = null
  #accepting = true
  #closing: Promise<void> | null = null

  constructor (options: RawQuicRelayOptions) {
    this.#options = options
    this.#failures = new HandshakeFailureLog({ counter: options.metrics.quicHandshakeFailures, logger: options.logger, message: 'raw quic handshake refused' })
    options.metrics.setRelayedBytesSource(() => this.relayedBytes())
    this.#drain = new PodDrain({ snapshot: options.snapshot, graceMs: options.drainGraceMs, bound: 'address', onDrained: (tunnel) => { this.#closeBoth(tunnel, TUNNEL_CLOSE_REASONS.target_left, 'completed') } })
  }

  /** Tunnels being relayed (or dialing their Stargate) now. */
  get active (): number {
    return this.#tunnels.size
  }

  get endpoint (): QuicEndpoint | null {
    return this.#endpoint
  }

  /** Binds the UDP port; throws (with the errno code) when it cannot. */
  listen (): { readonly address: string, readonly port: number } {
    const { engine, host, port, transport, connectTimeoutMs } = this.#options
    this.#endpoint = engine.listen({
      host,
      port,
      ...this.#options.limits,
      resetSecret: this.#options.resetSecret ?? null,
      // A Pylon's handshake gets the same bound as the router's dial to a pod.
      transport: { ...transport, handshakeTimeoutMs: connectTimeoutMs },
      onProposal: (proposal) => { this.propose(proposal) },
    })
    return { address: this.#endpoint.address, port: this.#endpoint.port }
  }

  relayedBytes (): RelayedBytes {
    let clientToStargate = this.#ended.clientToStargate
    let stargateToClient = this.#ended.stargateToClient
    for (const tunnel of this.#tunnels) {
      const c = tunnel.client.stats()
      const u = tunnel.upstream?.stats() ?? null
      clientToStargate += tunnel.closedBytes.clientToStargate + (c === null ? 0 : c.splicedBytes + c.bridgedBytes)
      stargateToClient += tunnel.closedBytes.stargateToClient + (u === null ? 0 : u.splicedBytes + u.bridgedBytes)
    }
    return { clientToStargate, stargateToClient }
  }

  /** Shutdown has begun: new tunnels are refused with 'router shutdown'. */
  stopAccepting (): void {
    this.#accepting = false
  }

  /**
   * Every tunnel is closed on both legs with application code 0 and the reason, then the
   * endpoint once the close packets have left. Idempotent.
   */
  close (reason: string = TUNNEL_CLOSE_REASONS.shutdown): Promise<void> {
    this.#closing ??= (async () => {
      this.#accepting = false
      this.#grace.clear()
      this.#drain.dispose()
      for (const tunnel of [...this.#tunnels]) this.#closeBoth(tunnel, reason, 'completed')
      // The CONNECTION_CLOSE packets leave synchronously; let one turn pass for the events.
      await new Promise((resolve) => { setImmediate(resolve) })
      this.#endpoint?.close()
    })()
    return this.#closing
  }

  closeTrust (key: string, graceMs: number): number {
    return this.#grace.closeTrust(this.#tunnels, (tunnel) => tunnel.trustKey === '' ? null : tunnel.trustKey, key, graceMs).length
  }

  closeUntrustedClients (bundle: TrustBundle, graceMs: number, now = new Date()): number {
    return this.#grace.closeUntrustedClients(this.#tunnels, peerChainOfTunnel, bundle, graceMs, now).length
  }

  /**
   * A connection proposed by the tunnel port: route it by SNI before any handshake work. A
   * refusal here is a CONNECTION_CLOSE in an Initial, which carries no reason phrase (RFC 9000
   * §10.2.3): the Pylon reads APPLICATION_ERROR, the reason is the metric's outcome and the log's.
   */
  propose (proposal: QuicProposal): void {
    const { metrics } = this.#options
    if (!this.#accepting) {
      proposal.reject()
      return
    }
    const route = resolveSni(proposal.sni, this.#options.snapshot.current(), this.#options.template)
    if (!route.ok) {
      metrics.quicConnections.labels(route.reason).inc()
      proposal.reject()
      this.#failures.record(route.reason, { remote: proposal.address, sni: proposal.sni, alpn: proposal.alpn })
      return
    }
    const credentials = this.#options.serverCredentials.current()
    // Exactly what the Pylon offered, including nothing: the server picks from that offer.
    const client = proposal.accept({ credentials, alpn: proposal.alpn, transport: this.#options.transport })
    if (client === null) return
    const tunnel: Tunnel = {
      client,
      sni: proposal.sni ?? '',
      offered: proposal.alpn,
      identity: route.target.identity,
      trustKey: '',
      upstream: null,
      upstreamReady: false,
      ended: false,
      closedBytes: { clientToStargate: 0, stargateToClient: 0 },
      refused: { pylon: 0, stargate: 0 },
      handle: null,
    }
    client.data = tunnel
    // The engine pairs every stream, from the first: the Pylon's wait in it for the pod leg.
    client.bridgeStreams(null, 'raw')
    client.on('stream', refuseStream)
    client.once('established', () => { this.#onClientEstablished(tunnel) })
    client.once('close', (info) => { this.#onLegClosed(tunnel, 'client', info) })
  }

  #onClientEstablished (tunnel: Tunnel): void {
    const { metrics, logger } = this.#options
    if (!this.#accepting) {
      tunnel.client.close(0, TUNNEL_CLOSE_REASONS.shutdown)
      return
    }
    // Routed again: the pod may have left the ready set during the handshake.
    const route = resolveSni(tunnel.sni, this.#options.snapshot.current(), this.#options.template)
    if (!route.ok) {
      metrics.quicConnections.labels(route.reason).inc()
      tunnel.client.close(0, TUNNEL_CLOSE_REASONS[route.reason])
      return
    }
    const target = route.target
    tunnel.identity = target.identity
    metrics.quicConnections.labels('accepted').inc()
    metrics.quicRelayConnectionsActive.inc()
    this.#tunnels.add(tunnel)
    this.#drain.follow(tunnel, target)
    const registry = this.#options.connections ?? null
    if (registry !== null) {
      tunnel.handle = new RawQuicTunnelHandle(this, tunnel, registry.now())
      tunnel.handle.register(registry)
    }
    const trust = this.#options.upstream.current()
    tunnel.trustKey = trust.trust.key
    const alpn = tunnel.client.alpn
    let upstream: QuicConnection
    try {
      upstream = this.#options.engine.connect({
        address: target.address,
        port: target.quicPort,
        serverName: tunnel.sni,
        alpn: alpn === null ? [] : [alpn],
        credentials: trust.runtime,
        transport: { ...this.#options.transport, handshakeTimeoutMs: this.#options.connectTimeoutMs },
      })
    } catch (err) {
      logger.warn({ target: target.identity, err: err instanceof Error ? err.message : String(err) }, 'raw quic tunnel: dialing the stargate failed')
      this.#closeBoth(tunnel, `stargate ${target.identity} could not be reached: dial failed`, 'relay_error')
      return
    }
    tunnel.upstream = upstream
    upstream.data = tunnel
    // Named while it handshakes: the Pylon's streams are paired once it is up.
    tunnel.client.bridgeStreams(upstream, 'raw')
    upstream.on('stream', refuseStream)
    upstream.once('established', () => { this.#onUpstreamEstablished(tunnel) })
    upstream.once('close', (info) => { this.#onLegClosed(tunnel, 'upstream', info) })
    logger.debug({ sni: tunnel.sni, target: target.identity, alpn, remote: tunnel.client.remoteAddress }, 'raw quic tunnel accepted')
  }

  #onUpstreamEstablished (tunnel: Tunnel): void {
    const upstream = tunnel.upstream
    if (upstream === null || tunnel.ended) return
    tunnel.upstreamReady = true
    const datagrams = tunnel.client.datagrams && upstream.datagrams
    if (datagrams) tunnel.client.bridgeDatagrams(upstream, 'raw')
    this.#options.logger.debug({ target: tunnel.identity, alpn: upstream.alpn, datagrams }, 'raw quic tunnel relaying')
    // A drain that began while the pod leg was connecting waits for its streams too.
    if (tunnel.handle?.reason != null) {
      this.#drainLeg(tunnel, 'upstream')
      this.settleDrain(tunnel)
    }
  }

  /**
   * @internal (RawQuicTunnelHandle) No new streams on either leg from now on; the tunnel
   * closes once neither leg has one left. A pod leg still connecting is drained once it is up.
   */
  drainTunnel (tunnel: Tunnel): void {
    if (tunnel.ended) {
      tunnel.handle?.gone()
      return
    }
    this.#drainLeg(tunnel, 'client')
    if (tunnel.upstreamReady) this.#drainLeg(tunnel, 'upstream')
    this.settleDrain(tunnel)
  }

  #drainLeg (tunnel: Tunnel, leg: Leg): void {
    const conn = leg === 'client' ? tunnel.client : tunnel.upstream
    const handle = tunnel.handle
    if (conn === null || handle === null || conn.draining) return
    const open = conn.drain(STREAM_REFUSALS.draining.code, 'all')
    if (open > 0) {
      handle.busy.add(leg)
      conn.once('drained', onLegDrained)
    }
  }

  /** @internal A leg of a draining tunnel has no stream left: close once both are done. */
  settleDrain (tunnel: Tunnel): void {
    const handle = tunnel.handle
    if (handle === null || handle.reason === null || tunnel.ended) return
    if (handle.busy.size > 0 || !tunnel.upstreamReady) return
    this.#closeBoth(tunnel, tunnelCloseReasonOf(handle.reason), 'completed')
  }

  /** @internal Closes a tunnel now, whatever is open (its drain ran out of time). */
  abortTunnel (tunnel: Tunnel, reason: DrainReason): void {
    if (tunnel.ended) return
    // What the drain was still waiting for, for the log line (its deadline ran out).
    const open = { pylon: tunnel.client.stats()?.openStreams ?? 0, stargate: tunnel.upstream?.stats()?.openStreams ?? 0 }
    this.#options.logger.warn({ target: tunnel.identity, open, waiting: [...(tunnel.handle?.busy ?? [])] }, 'raw quic tunnel: streams still open when its drain ran out of time')
    this.#closeBoth(tunnel, tunnelCloseReasonOf(reason), 'completed')
  }

  #onLegClosed (tunnel: Tunnel, leg: Leg, info: QuicCloseInfo): void {
    const conn = leg === 'client' ? tunnel.client : tunnel.upstream
    const stats = conn?.stats() ?? null
    if (stats !== null) {
      if (leg === 'client') {
        tunnel.closedBytes.clientToStargate += stats.splicedBytes + stats.bridgedBytes
        tunnel.refused.pylon += stats.refusedStreams
      } else {
        tunnel.closedBytes.stargateToClient += stats.splicedBytes + stats.bridgedBytes
        tunnel.refused.stargate += stats.refusedStreams
      }
    }
    if (tunnel.ended) return
    if (!this.#tunnels.has(tunnel)) {
      // The Pylon's handshake never completed, or the tunnel was refused after it.
      tunnel.ended = true
      this.#failures.closed('pylon', info, { remote: tunnel.client.remoteAddress, sni: tunnel.sni, alpn: tunnel.offered })
      return
    }
    const identity = tunnel.identity
    if (leg === 'upstream' && !info.established) {
      this.#failures.closed('pod', info, { target: identity, sni: tunnel.sni, alpn: tunnel.client.alpn })
      this.#closeBoth(tunnel, `stargate ${identity} could not be reached: ${upstreamFailure(info)}`, 'relay_error')
      return
    }
    const other = leg === 'client' ? tunnel.upstream : tunnel.client
    let outcome: QuicOutcome = 'completed'
    const side = leg === 'client' ? 'pylon' : 'stargate'
    switch (info.kind) {
      case 'peer':
        // Carried verbatim: application or transport, code and reason, once the other leg has
        // delivered what this leg's peer sent (the router acknowledged it: it is ours to deliver).
        other?.closeWhenFlushed(info.code, info.reason, info.app, CLOSE_FLUSH_MS)
        break
      case 'idle':
        other?.close(0, fillMessage(TUNNEL_CLOSE_REASONS.leg_idle, { side }))
        break
      case 'local':
        // We closed this leg ourselves (closeBoth, shutdown): the other leg got the same.
        other?.close(0, info.reason)
        break
      case 'error':
      case 'handshake_timeout':
      case 'stateless_reset':
      case 'unreachable':
      case 'destroyed':
        outcome = 'relay_error'
        other?.close(0, fillMessage(TUNNEL_CLOSE_REASONS.leg_failed, { side, kind: info.kind.replace('_', ' ') }))
        break
      default: {
        const never: never = info.kind
        return never
      }
    }
    // Which leg ended first and how, in fields: a transport code relayed verbatim looks the same
    // to the far peer whether this leg's peer sent it (kind 'peer') or our engine detected the
    // violation on this leg (kind 'error', liberr = ngtcp2's error).
    const first: LegEnd = { leg, kind: info.kind, app: info.app, code: info.code, liberr: info.liberr }
    this.#end(tunnel, outcome, `${leg} ${info.kind}: ${info.reasonText === '' ? `code ${info.code}` : info.reasonText}`, first)
  }

  #closeBoth (tunnel: Tunnel, reason: string, outcome: QuicOutcome): void {
    if (tunnel.ended) return
    tunnel.client.close(0, reason)
    tunnel.upstream?.close(0, reason)
    this.#end(tunnel, outcome, reason)
  }

  #end (tunnel: Tunnel, outcome: QuicOutcome, reason: string, first?: LegEnd): void {
    if (tunnel.ended) return
    tunnel.ended = true
    this.#grace.forget(tunnel)
    if (!this.#tunnels.delete(tunnel)) return
    this.#drain.forget(tunnel)
    // Bytes of legs that are still closing are counted now; they relay nothing more.
    for (const conn of [tunnel.client, tunnel.upstream]) {
      if (conn === null || conn.closed) continue
      const stats = conn.stats()
      if (stats === null) continue
      if (conn === tunnel.client) {
        tunnel.closedBytes.clientToStargate += stats.splicedBytes + stats.bridgedBytes
        tunnel.refused.pylon += stats.refusedStreams
      } else {
        tunnel.closedBytes.stargateToClient += stats.splicedBytes + stats.bridgedBytes
        tunnel.refused.stargate += stats.refusedStreams
      }
    }
    this.#ended.clientToStargate += tunnel.closedBytes.clientToStargate
    this.#ended.stargateToClient += tunnel.closedBytes.stargateToClient
    const { metrics, logger } = this.#options
    metrics.quicConnections.labels(outcome).inc()
    metrics.quicRelayConnectionsActive.dec()
    const refused = this.#options.drainMetrics?.streamsRefused ?? null
    if (refused !== null) {
      if (tunnel.refused.pylon > 0) refused.labels('raw_quic', 'pylon').inc(tunnel.refused.pylon)
      if (tunnel.refused.stargate > 0) refused.labels('raw_quic', 'stargate').inc(tunnel.refused.stargate)
    }
    tunnel.handle?.gone()
    const drained = tunnel.handle?.reason ?? null
    logger.info({ target: tunnel.identity, outcome, reason, ...(first === undefined ? {} : { first }), ...(drained === null ? {} : { drained, refused: tunnel.refused }) }, 'raw quic tunnel closed')
  }
}

/** What to tell a Pylon when its pod leg did not come up: a short code, no internal detail. */
function upstreamFailure (info: QuicCloseInfo): string {
  switch (info.kind) {
    case 'handshake_timeout':
      return 'connect timeout'
    case 'unreachable':
      return 'port unreachable'
    case 'error':
      return info.alert !== 0 ? 'tls handshake failed' : 'protocol error'
    case 'peer':
      return info.app ? `closed by the stargate (code ${info.code})` : info.code >= 0x100 && info.code < 0x200 ? 'tls handshake refused' : `refused (code ${info.code})`
    case 'idle':
      return 'connect timeout'
    case 'local':
    case 'stateless_reset':
    case 'destroyed':
      return info.kind.replace('_', ' ')
    default: {
      const never: never = info.kind
      return never
    }
  }
}
