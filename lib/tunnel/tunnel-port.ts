/**
 * The tunnel port (SPEC §7), chosen by --tunnel-protocol: raw QUIC on UDP (raw-quic/), or
 * WebTransport over HTTP/3 on UDP (webtransport-h3/) and over HTTP/2 on TCP of the same number
 * (webtransport-h2/). Every relay routes by SNI through the same snapshot and hostname template
 * as registration, takes its TLS from followers of the manager (tunnel-tls.ts), and closes on
 * trust changes after TRUST_CHANGE_GRACE_MS (SPEC §8):
 *
 * - upstream trust: what was dialled under the previous trust (HTTP/3 sessions asked to drain
 *   first), as registration sessions get the grace;
 * - client trust (--client-ca-path): the tunnels of Pylons whose certificate no longer verifies.
 *
 * What a mode makes (followers, change listeners, listeners, the relays) it releases on close,
 * and on a failed start what had been made so far: a stopped tunnel port leaves no consumer in
 * the TLS manager and no credential or endpoint in the engine.
 */
import type { AddressInfo } from 'node:net'
import type { Config } from '../config/config.ts'
import type { SnapshotReader } from '../discovery/types.ts'
import type { ConnectionRegistry } from '../drain/connection-registry.ts'
import type { Logger } from '../log.ts'
import type { RouterMetrics } from '../metrics/metrics.ts'
import type { QuicEngine } from '../quic/engine.ts'
import type { QuicEndpointLimits } from '../quic/endpoint.ts'
import type { HostnameTemplate } from '../routing/hostname-template.ts'
import type { TlsMaterialManager } from '../tls/manager.ts'
import type { TlsSource } from '../tls/tls-follower.ts'
import { TRUST_CHANGE_GRACE_MS } from '../tls/trust-policy.ts'
import type { FollowedTrust } from '../tls/upstream-trust-consumer.ts'
import { RawQuicRelay } from './raw-quic/relay.ts'
import type { TunnelRelay } from './relay.ts'
import { WebTransportRelay } from './webtransport-h2/relay.ts'
import { WebTransportH3Relay } from './webtransport-h3/relay.ts'
import { followServerContext, followServerCredentials, followUpstreamContext, followUpstreamCredentials, onClientTrustChange, resetSecretOf } from './tunnel-tls.ts'

export interface TunnelContext {
  readonly config: Config
  /** The router's QUIC engine (the composition root's; closed after the tunnel). */
  readonly engine: QuicEngine
  readonly snapshot: SnapshotReader
  readonly template: HostnameTemplate
  readonly tls: Pick<TlsMaterialManager, 'addConsumer' | 'onChange' | 'state'>
  readonly metrics: RouterMetrics
  readonly logger: Logger
  /** Tunnels are registered here to be drained (shutdown, replica balancing). */
  readonly connections: ConnectionRegistry | null
}

export interface RunningTunnel {
  /** The UDP address (raw QUIC, or WebTransport over HTTP/3), when listening. */
  readonly udp: AddressInfo | null
  /** The TCP address (WebTransport over HTTP/2), when listening. */
  readonly tcp: AddressInfo | null
  /** Shutdown has begun: refuse new tunnels; open ones are drained through the connection registry. */
  stopAccepting (): void
  /** Closes every tunnel still open with reason `router shutdown`, stops listening and releases what the mode made. Idempotent. */
  close (): Promise<void>
}

export function startTunnel (context: TunnelContext): Promise<RunningTunnel> {
  return context.config.tunnelProtocol === 'raw-quic' ? startRawQuic(context) : startWebTransport(context)
}

/** What a mode made, released last made first (on close, or when its start failed). */
class Made {
  readonly #releases: Array<() => void> = []

  add (release: () => void): void {
    this.#releases.push(release)
  }

  /** A follower, released with the rest. */
  keep<F extends { release (): void }> (follower: F): F {
    this.#releases.push(() => { follower.release() })
    return follower
  }

  releaseAll (): void {
    for (let release = this.#releases.pop(); release !== undefined; release = this.#releases.pop()) release()
  }
}

/** The relay's tunnels dialled under a replaced upstream trust close after the grace (called on a reload, once the relay exists). */
function closeOnUpstreamChange (relay: () => TunnelRelay<unknown>, logger: Logger): (current: FollowedTrust<unknown>) => void {
  return (current) => {
    const tunnels = relay()
    const closing = tunnels.closeTrust(current.trust.key, TRUST_CHANGE_GRACE_MS)
    logger.info({ tunnel: tunnels.kind, closing, graceMs: TRUST_CHANGE_GRACE_MS }, 'upstream trust changed: closing tunnels dialled under the previous trust')
  }
}

/** The relay's tunnels of Pylons the new client trust no longer verifies close after the grace; returns how to stop. */
function closeOnClientTrustChange (tls: TlsSource, relay: TunnelRelay<unknown>, logger: Logger): () => void {
  return onClientTrustChange(tls, (bundle) => {
    const closing = relay.closeUntrustedClients(bundle, TRUST_CHANGE_GRACE_MS)
    logger.info({ tunnel: relay.kind, closing, graceMs: TRUST_CHANGE_GRACE_MS }, 'client trust changed: closing tunnels whose Pylon certificate no longer verifies')
  })
}

/** The UDP port's limits on Initials and handshakes. */
function endpointLimits (config: Config): QuicEndpointLimits {
  return {
    maxConnections: config.quicMaxConnections,
    retry: config.quicRetry,
    retryThreshold: config.quicRetryThreshold,
    maxHalfOpenPerAddress: config.quicMaxHandshakesPerAddress,
  }
}

async function startRawQuic (context: TunnelContext): Promise<RunningTunnel> {
  const { config, tls, engine, logger } = context
  const metrics = context.metrics.quic
  const made = new Made()
  try {
    const serverCredentials = made.keep(followServerCredentials(tls, { name: 'raw-quic-server', requireClientCert: config.clientCaPath !== null }))
    const upstream = made.keep(followUpstreamCredentials(tls, { name: 'raw-quic-upstream', leg: 'raw_quic', flags: config, onReplaced: closeOnUpstreamChange((): TunnelRelay<unknown> => relay, logger) }))
    const trust = upstream.current().trust
    if (trust.kind === 'verify' && trust.caPem === null) {
      logger.warn('raw quic: no trust bundle for Stargate certificates (no --upstream-tls-cert-path and no --tls-cert-path): tunnels will fail to verify pods; set one, or --quic-insecure')
    }
    const relay = new RawQuicRelay({
      engine,
      host: config.reverseTunnelListenAddr.host,
      port: config.reverseTunnelListenAddr.port,
      limits: endpointLimits(config),
      resetSecret: resetSecretOf(tls.state()),
      snapshot: context.snapshot,
      template: context.template,
      serverCredentials,
      upstream,
      transport: { idleTimeoutMs: config.relayIdleTimeoutMs, keepAliveMs: config.relayKeepAliveMs },
      connectTimeoutMs: config.connectTimeoutMs,
      drainGraceMs: config.drainGraceMs,
      metrics,
      logger,
      connections: context.connections,
      drainMetrics: context.metrics.drain,
    })
    made.add(() => { void relay.close() })
    made.add(closeOnClientTrustChange(tls, relay, logger))
    const listening = relay.listen()
    metrics.setEndpointSource(() => {
      const stats = relay.endpoint?.stats() ?? null
      return stats === null
        ? null
        : { connections: stats.connections + stats.pending, halfOpen: stats.halfOpen, dropped: stats.dropped, stateless: stats.stateless }
    })
    metrics.setEngineSource(() => engine.counters())
    const udp = { address: listening.address, port: listening.port, family: listening.address.includes(':') ? 'IPv6' : 'IPv4' }
    logger.info({ udp, retry: config.quicRetry, maxConnections: config.quicMaxConnections, upstreamVerify: trust.kind === 'verify' }, 'raw quic tunnel listening')

    let closing: Promise<void> | null = null
    return {
      udp,
      tcp: null,
      stopAccepting: () => { relay.stopAccepting() },
      close: () => {
        closing ??= relay.close().then(() => { made.releaseAll() })
        return closing
      },
    }
  } catch (err) {
    made.releaseAll()
    throw err
  }
}

async function startWebTransport (context: TunnelContext): Promise<RunningTunnel> {
  const { config, tls, logger } = context
  const metrics = context.metrics.webtransport
  const requireClientCert = config.clientCaPath !== null
  const made = new Made()
  try {
    // HTTP/2 on the TCP port. Both legs follow their trust; the relays exist only below, and
    // onReplaced runs on a reload, never before.
    const h2Upstream = made.keep(followUpstreamContext(tls, {
      name: 'webtransport-upstream',
      leg: 'webtransport_h2',
      flags: config,
      onReplaced: closeOnUpstreamChange((): TunnelRelay<unknown> => h2, logger),
    }))
    const h2Context = made.keep(followServerContext(tls, {
      name: 'webtransport',
      requireClientCert,
      onCommit: (built) => { h2.setSecureContext(built.options) },
    }))
    const h2 = new WebTransportRelay({
      host: config.reverseTunnelListenAddr.host,
      port: config.reverseTunnelListenAddr.port,
      snapshot: context.snapshot,
      template: context.template,
      serverContext: h2Context,
      requireClientCert,
      upstream: h2Upstream,
      connectTimeoutMs: config.connectTimeoutMs,
      drainGraceMs: config.drainGraceMs,
      idleTimeoutMs: config.relayIdleTimeoutMs,
      keepAliveMs: config.relayKeepAliveMs,
      maxConcurrentStreams: config.http2MaxConcurrentStreams,
      maxHeaderListSize: config.http2MaxHeaderListBytes,
      maxSessionsPerConnection: config.webtransportMaxSessionsPerConnection,
      maxSessions: config.webtransportMaxSessions,
      metrics,
      logger,
      onTlsError: () => { context.metrics.tlsHandshakeFailures.labels('webtransport').inc() },
      tlsHandshakeTimeoutMs: config.tlsHandshakeTimeoutMs,
      maxConnections: config.frontDoorMaxConnections,
      onRefused: () => { context.metrics.limits.connectionsRefused.labels('webtransport', 'max_connections').inc() },
      onRapidReset: () => { context.metrics.http2RapidResetCloses.inc() },
      connections: context.connections,
      drainMetrics: context.metrics.drain,
    })
    made.add(closeOnClientTrustChange(tls, h2, logger))

    // HTTP/3 on the UDP port: the engine's credentials follow the same TLS material.
    const h3Credentials = made.keep(followServerCredentials(tls, { name: 'webtransport-h3', requireClientCert }))
    const h3Upstream = made.keep(followUpstreamCredentials(tls, {
      name: 'webtransport-h3-upstream',
      leg: 'webtransport_h3',
      flags: config,
      onReplaced: closeOnUpstreamChange((): TunnelRelay<unknown> => h3, logger),
    }))
    const h3 = new WebTransportH3Relay({
      engine: context.engine,
      host: config.reverseTunnelListenAddr.host,
      port: config.reverseTunnelListenAddr.port,
      snapshot: context.snapshot,
      template: context.template,
      serverCredentials: h3Credentials,
      upstream: h3Upstream,
      connectTimeoutMs: config.connectTimeoutMs,
      idleTimeoutMs: config.relayIdleTimeoutMs,
      keepAliveMs: config.relayKeepAliveMs,
      drainGraceMs: config.drainGraceMs,
      maxSessions: config.webtransportMaxSessions,
      maxSessionsPerConnection: config.webtransportMaxSessionsPerConnection,
      maxFieldSectionSize: config.http2MaxHeaderListBytes,
      limits: endpointLimits(config),
      resetSecret: resetSecretOf(tls.state()),
      metrics,
      handshakeFailures: context.metrics.quic.quicHandshakeFailures,
      logger,
      connections: context.connections,
      drainMetrics: context.metrics.drain,
    })
    made.add(closeOnClientTrustChange(tls, h3, logger))
    // Listening ends with the relays' close; a failed start closes them too.
    made.add(() => { void h2.close(); void h3.close() })

    // The same port number on UDP (HTTP/3) and TCP (HTTP/2): Pylons dial one address. With port
    // 0 the kernel picks the UDP number, which may be taken on TCP: then another one is tried.
    const configuredPort = config.reverseTunnelListenAddr.port
    let udp: { address: string, port: number }
    let address: AddressInfo
    for (let attempt = 1; ; attempt++) {
      udp = h3.listen(configuredPort)
      try {
        address = await h2.listen(udp.port)
        break
      } catch (err) {
        h3.unlisten()
        if (configuredPort !== 0 || (err as NodeJS.ErrnoException).code !== 'EADDRINUSE' || attempt >= 10) throw err
      }
    }
    const trust = h2Upstream.current().trust
    logger.info({
      udp,
      tcp: address,
      transports: { http3: `udp ${udp.address}:${udp.port}`, http2: `tcp ${address.address}:${address.port}` },
      upstreamTrust: trust.kind === 'verify' ? trust.source : trust.kind,
    }, 'webtransport tunnel listening: http/3 on udp, http/2 on tcp')

    let closing: Promise<void> | null = null
    return {
      udp: { address: udp.address, family: udp.address.includes(':') ? 'IPv6' : 'IPv4', port: udp.port },
      tcp: address,
      stopAccepting: () => {
        h2.stopAccepting()
        h3.stopAccepting()
      },
      close: () => {
        closing ??= Promise.all([h2.close(), h3.close()]).then(() => { made.releaseAll() })
        return closing
      },
    }
  } catch (err) {
    made.releaseAll()
    throw err
  }
}
