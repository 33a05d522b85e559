/**
 * The raw QUIC reverse-tunnel relay (SPEC §7): a Pylon's connection, accepted on the tunnel
 * port, is routed by its TLS SNI to a ready Stargate pod and relayed to the pod's quic port.
 *
 *   client leg established ─▶ resolveSni(SNI) ─fail─▶ close(0, 'missing target SNI' | …)
 *        │ ok: 'accepted'
 *        ▼
 *   dial pod (same SNI, the client's ALPN) ─fail/timeout─▶ close client(0, 'stargate … could not
 *        │ established                                      be reached: …'): 'relay_error'
 *        ▼
 *   every stream, either direction: opened on the other leg in the order it was announced
 *   (so IDs match), spliced both ways (raw-quic-splice.ts); datagrams when both legs
 *   negotiated them; CONNECTION_CLOSE code and reason carried to the other leg:
 *   'completed' (or 'relay_error' when a leg failed rather than closed)
 *
 * Streams the client opens while the Stargate leg is still connecting wait unread (quiche
 * flow control holds the client back); datagrams arriving then are dropped (they are
 * unreliable by definition).
 */
import type { Logger } from '../log.ts'
import type { SnapshotReader } from '../discovery/types.ts'
import type { HostnameTemplate } from '../routing/hostname-template.ts'
import { resolveSni } from '../routing/resolve.ts'
import type { QuicDriver } from '../quic/quiche/driver.ts'
import type { QuicCloseInfo, QuicConnection } from '../quic/quiche/connection.ts'
import type { StreamSlot } from '../quic/quiche/stream-slot.ts'
import type { NativeConfig } from '../quic/quiche/native.ts'
import { connectQuic } from '../quic/quiche/client.ts'
import { StreamSplice, type ByteCounter } from './raw-quic-splice.ts'
import type { QuicOutcome, RawQuicMetrics, RelayedBytes } from './raw-quic-metrics.ts'

/** Close reasons (SPEC §7 wire strings), all with application error code 0. */
export const CLOSE_REASONS = {
  missing_sni: 'missing target SNI',
  unknown_sni: 'unknown target SNI',
  target_unavailable: 'target stargate not ready',
  shutdown: 'router shutdown',
  trust_replaced: 'upstream trust changed',
} as const

export interface UpstreamConfig {
  readonly config: NativeConfig
  /** Upstream trust generation it was built from (connections under an older one are closed on change). */
  readonly generation: number
}

export interface RawQuicRelayOptions {
  readonly snapshot: SnapshotReader
  readonly template: HostnameTemplate
  readonly driver: QuicDriver
  /** The Config to dial a pod with, offering this ALPN protocol (current upstream trust). */
  readonly upstreamConfig: (alpn: string) => UpstreamConfig
  readonly connectTimeoutMs: number
  readonly keepAliveMs: number
  readonly metrics: RawQuicMetrics
  readonly logger: Logger
}

interface Tunnel {
  readonly client: QuicConnection
  readonly identity: string
  readonly generation: number
  upstream: QuicConnection | null
  /** Client streams announced before the Stargate leg was up. */
  waiting: StreamSlot[] | null
  /** Streams waiting for the other leg's stream limit to open. */
  blocked: Array<{ from: 'client' | 'upstream', slot: StreamSlot }>
  ended: boolean
  graceTimer: NodeJS.Timeout | null
}

export class RawQuicRelay {
  readonly #options: RawQuicRelayOptions
  readonly #tunnels = new Set<Tunnel>()
  readonly #bytes: ByteCounter = { clientToStargate: 0, stargateToClient: 0 }
  #accepting = true

  constructor (options: RawQuicRelayOptions) {
    this.#options = options
    options.metrics.setRelayedBytesSource(() => this.relayedBytes())
  }

  /** Tunnels being relayed (or dialing their Stargate) now. */
  get active (): number {
    return this.#tunnels.size
  }

  relayedBytes (): RelayedBytes {
    return { clientToStargate: this.#bytes.clientToStargate, stargateToClient: this.#bytes.stargateToClient }
  }

  /** Shutdown has begun: new connections are closed with 'router shutdown' once their handshake completes. */
  stopAccepting (): void {
    this.#accepting = false
  }

  /** Closes every tunnel (both legs) with application code 0 and reason. */
  closeAll (reason: string): void {
    for (const tunnel of [...this.#tunnels]) this.#closeBoth(tunnel, 0, reason, 'completed')
  }

  /**
   * Upstream trust changed (SPEC §8): tunnels whose Stargate leg was verified under an older
   * trust generation are closed after graceMs. Returns how many were scheduled.
   */
  closeGeneration (current: number, graceMs: number): number {
    let count = 0
    for (const tunnel of this.#tunnels) {
      if (tunnel.generation >= current || tunnel.graceTimer !== null) continue
      count++
      tunnel.graceTimer = setTimeout(() => { this.#closeBoth(tunnel, 0, CLOSE_REASONS.trust_replaced, 'completed') }, graceMs)
      tunnel.graceTimer.unref()
    }
    return count
  }

  /** A client connection whose handshake completed. */
  accept (client: QuicConnection): void {
    const { metrics, logger } = this.#options
    if (!this.#accepting) {
      client.close(0, CLOSE_REASONS.shutdown)
      return
    }
    const sni = client.serverName
    const route = resolveSni(sni === null ? null : sni.toLowerCase(), this.#options.snapshot.current(), this.#options.template)
    if (!route.ok) {
      metrics.quicConnections.labels(route.reason).inc()
      client.close(0, CLOSE_REASONS[route.reason])
      logger.info({ sni, reason: route.reason, remote: client.remote.host }, 'raw quic tunnel rejected')
      return
    }
    const target = route.target
    metrics.quicConnections.labels('accepted').inc()
    metrics.quicRelayConnectionsActive.inc()
    const upstreamConfig = this.#options.upstreamConfig(client.alpn)
    const tunnel: Tunnel = { client, identity: target.identity, generation: upstreamConfig.generation, upstream: null, waiting: [], blocked: [], ended: false, graceTimer: null }
    this.#tunnels.add(tunnel)
    client.on('slot', (slot) => { this.#onSlot(tunnel, 'client', slot) })
    client.on('datagram', (data) => {
      const upstream = tunnel.upstream
      if (upstream !== null && upstream.established && upstream.sendDatagram(data)) this.#bytes.clientToStargate += data.length
    })
    client.on('close', (info) => { this.#onLegClosed(tunnel, 'client', info) })
    connectQuic({
      driver: this.#options.driver,
      address: target.address,
      port: target.quicPort,
      serverName: sni,
      config: upstreamConfig.config,
      handshakeTimeoutMs: this.#options.connectTimeoutMs,
      keepAliveMs: this.#options.keepAliveMs,
      rawStreams: true,
    }).then((upstream) => {
      if (tunnel.ended) {
        upstream.close(0, tunnel.client.closeInfo?.reason ?? 'client closed')
        return
      }
      tunnel.upstream = upstream
      upstream.on('established', () => { this.#onUpstreamEstablished(tunnel) })
      upstream.on('slot', (slot) => { this.#onSlot(tunnel, 'upstream', slot) })
      upstream.on('datagram', (data) => {
        if (client.datagrams && client.sendDatagram(data)) this.#bytes.stargateToClient += data.length
      })
      upstream.on('close', (info) => { this.#onLegClosed(tunnel, 'upstream', info) })
    }, (err: unknown) => {
      this.#closeBoth(tunnel, 0, `stargate ${target.identity} could not be reached: ${err instanceof Error ? err.message : String(err)}`, 'relay_error')
    })
    logger.debug({ sni, target: target.identity, alpn: client.alpn, remote: client.remote.host }, 'raw quic tunnel accepted')
  }

  #onUpstreamEstablished (tunnel: Tunnel): void {
    const waiting = tunnel.waiting ?? []
    tunnel.waiting = null
    for (const slot of waiting) this.#bridge(tunnel, 'client', slot)
    this.#options.logger.debug({ target: tunnel.identity, alpn: tunnel.upstream?.alpn, datagrams: tunnel.client.datagrams && tunnel.upstream?.datagrams }, 'raw quic tunnel relaying')
  }

  #onSlot (tunnel: Tunnel, from: 'client' | 'upstream', slot: StreamSlot): void {
    if (from === 'client' && tunnel.waiting !== null) {
      tunnel.waiting.push(slot)
      return
    }
    this.#bridge(tunnel, from, slot)
  }

  /** Opens slot's twin on the other leg (same direction kind, next ID) and splices them. */
  #bridge (tunnel: Tunnel, from: 'client' | 'upstream', slot: StreamSlot): void {
    const upstream = tunnel.upstream
    if (upstream === null || tunnel.ended) return
    // Order is kept: while one stream waits for the stream limit, later ones queue behind it.
    if (tunnel.blocked.length > 0) {
      tunnel.blocked.push({ from, slot })
      return
    }
    const other = from === 'client' ? upstream : tunnel.client
    const twin = other.openSlot(slot.bidi)
    if (twin === null) {
      tunnel.blocked.push({ from, slot })
      this.#retryBlocked(tunnel)
      return
    }
    if (from === 'client') new StreamSplice(tunnel.client, slot, upstream, twin, this.#bytes)
    else new StreamSplice(tunnel.client, twin, upstream, slot, this.#bytes)
  }

  /** Polls the other leg's stream limit while streams wait for it (MAX_STREAMS has no event). */
  #retryBlocked (tunnel: Tunnel): void {
    const timer = setTimeout(() => {
      const queue = tunnel.blocked
      tunnel.blocked = []
      for (const { from, slot } of queue) this.#bridge(tunnel, from, slot)
    }, 5)
    timer.unref()
  }

  #onLegClosed (tunnel: Tunnel, leg: 'client' | 'upstream', info: QuicCloseInfo): void {
    if (tunnel.ended) return
    const identity = tunnel.identity
    if (leg === 'upstream' && !info.established) {
      const why = info.initiator === 'handshake_timeout' ? 'connect timeout' : info.reason === '' ? `handshake failed (code ${info.code})` : info.reason
      this.#closeBoth(tunnel, 0, `stargate ${identity} could not be reached: ${why}`, 'relay_error')
      return
    }
    const other = leg === 'client' ? tunnel.upstream : tunnel.client
    let outcome: QuicOutcome = 'completed'
    switch (info.initiator) {
      case 'peer':
        // Carried verbatim: application or transport, code and reason.
        other?.close(info.code, info.reason, info.app)
        break
      case 'idle':
        other?.close(0, leg === 'client' ? 'pylon connection idle timeout' : 'stargate connection idle timeout')
        break
      case 'local':
        // We closed this leg (closeBoth) or quiche did on a protocol or TLS error.
        if (info.app && info.code === 0) other?.close(0, info.reason)
        else {
          outcome = 'relay_error'
          other?.close(0, `${leg === 'client' ? 'pylon' : 'stargate'} connection failed: ${info.reason === '' ? `error ${info.code}` : info.reason}`)
        }
        break
      case 'handshake_timeout':
      case 'socket_error':
        outcome = 'relay_error'
        other?.close(0, `${leg === 'client' ? 'pylon' : 'stargate'} connection failed: ${info.reason}`)
        break
      default: {
        const never: never = info.initiator
        return never
      }
    }
    this.#end(tunnel, outcome, `${leg} ${info.initiator}: ${info.reason === '' ? `code ${info.code}` : info.reason}`)
  }

  #closeBoth (tunnel: Tunnel, code: number, reason: string, outcome: QuicOutcome): void {
    if (tunnel.ended) return
    tunnel.client.close(code, reason)
    tunnel.upstream?.close(code, reason)
    this.#end(tunnel, outcome, reason)
  }

  #end (tunnel: Tunnel, outcome: QuicOutcome, reason: string): void {
    if (tunnel.ended) return
    tunnel.ended = true
    if (tunnel.graceTimer !== null) clearTimeout(tunnel.graceTimer)
    this.#tunnels.delete(tunnel)
    const { metrics, logger } = this.#options
    metrics.quicConnections.labels(outcome).inc()
    metrics.quicRelayConnectionsActive.dec()
    logger.info({ target: tunnel.identity, outcome, reason }, 'raw quic tunnel closed')
  }
}
