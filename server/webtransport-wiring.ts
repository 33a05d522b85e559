/**
 * WebTransport reverse tunnels (SPEC §7): over HTTP/3 on the tunnel's UDP port (issue 16; as
 * the Rust router, the real Pylon and the real Stargate speak it, on the QUIC engine) and over
 * HTTP/2 on the TCP port of the same number (issue 6, an extra), fed by the TLS material manager.
 *
 * - Server identity (and client trust with --client-ca-path): a SecureContext consumer; new
 *   handshakes use new material, open sessions keep theirs (SPEC §8).
 * - Upstream trust: lib/tls/trust-policy.ts decides the bundle of both legs and when it
 *   changed (also when the router's certificate is the trust); a change closes the sessions
 *   bridged under the old one (outcome trust_replaced) after TRUST_CHANGE_GRACE_MS, HTTP/3
 *   sessions asked to drain first, as raw QUIC tunnels and registration sessions get the grace.
 * - A client-trust change closes, after the same grace, the sessions of Pylons whose
 *   certificate no longer verifies.
 */
import { secureContextConsumer, serverContextOptions } from '../lib/tls/secure-context-consumer.ts'
import type { TlsState } from '../lib/tls/types.ts'
import { WebTransportRelay } from '../lib/tunnel/webtransport-h2/relay.ts'
import type { UpstreamTrust } from '../lib/tunnel/webtransport-h2/upstream.ts'
import { QuicEngine } from '../lib/quic/engine.ts'
import { clientCredentialsFor, ServerCredentials } from '../lib/quic/credentials.ts'
import { followUpstreamTrust, upstreamSecureContext } from '../lib/tls/upstream-trust-consumer.ts'
import { TRUST_CHANGE_GRACE_MS } from '../lib/tls/trust-policy.ts'
import { H3_CLOSE_REASONS, WebTransportH3Relay, type UpstreamQuicTrust } from '../lib/tunnel/webtransport-h3/relay.ts'
import type { RunningTunnel, TunnelContext } from './tunnel-types.ts'
import { resetSecretOf } from './raw-quic-wiring.ts'
import { upstreamTrustFlags } from './tls-wiring.ts'

/** The engine's server credentials: the identity, and the client CA when Pylons must present certificates. */
function quicServerCredentialsOf (state: TlsState, withClientTrust: boolean): ServerCredentials {
  const identity = state.serverIdentity
  if (identity === null) throw new Error('no server identity is active')
  return ServerCredentials.create({ certPem: identity.certPem, keyPem: identity.keyPem, clientCaPem: withClientTrust ? state.clientTrust?.pem ?? null : null })
}

export async function startWebTransportTunnel (context: TunnelContext): Promise<RunningTunnel> {
  const { config, tls, logger } = context
  const metrics = context.metrics.webtransport
  const requireClientCert = config.clientCaPath !== null
  const flags = upstreamTrustFlags(config)
  // Both legs follow their trust (lib/tls/trust-policy.ts); the relays exist only below, and
  // onReplaced runs on a reload, never before.
  const upstream = followUpstreamTrust<UpstreamTrust>(tls, {
    name: 'webtransport-upstream',
    leg: 'webtransport_h2',
    flags,
    // No secureContext: --quic-insecure, the pod's certificate is not verified.
    build: (trust) => ({ secureContext: trust.kind === 'verify' ? upstreamSecureContext(trust) : null, key: trust.key }),
    onReplaced: (current) => {
      const closed = relay.closeTrust(current.runtime.key, TRUST_CHANGE_GRACE_MS)
      logger.info({ closed }, 'upstream trust changed: closing webtransport sessions bridged under the previous trust')
    },
  })
  const relay = new WebTransportRelay({
    host: config.reverseTunnelListenAddr.host,
    port: config.reverseTunnelListenAddr.port,
    snapshot: context.snapshot,
    template: context.template,
    serverTls: serverContextOptions(tls.state(), { withClientTrust: requireClientCert }),
    requireClientCert,
    upstreamTrust: () => upstream.current().runtime,
    connectTimeoutMs: config.connectTimeoutMs,
    idleTimeoutMs: config.relayIdleTimeoutMs,
    keepAliveMs: config.relayKeepAliveMs,
    maxConcurrentStreams: config.http2MaxConcurrentStreams,
    maxHeaderListSize: config.http2MaxHeaderListBytes,
    maxSessionsPerConnection: config.webtransportMaxSessionsPerConnection,
    maxSessions: config.webtransportMaxSessions,
    metrics,
    logger,
    onTlsError: () => { context.metrics.tlsHandshakeFailures.labels('webtransport').inc() },
    onRapidReset: () => { context.metrics.http2RapidResetCloses.inc() },
    connections: context.connections,
    drainMetrics: context.metrics.drain,
  })
  tls.addConsumer(secureContextConsumer({
    name: 'webtransport',
    dependsOn: requireClientCert ? ['server_identity', 'client_trust'] : ['server_identity'],
    buildOptions: (state) => serverContextOptions(state, { withClientTrust: requireClientCert }),
    apply: (built) => { relay.setSecureContext(built.options) },
  }))
  tls.onChange((changed, _previous, next) => {
    if (changed !== 'client_trust' || next.clientTrust === null) return
    const closed = relay.closeUntrustedClients(next.clientTrust, TRUST_CHANGE_GRACE_MS)
    logger.info({ closed }, 'client trust changed: closing webtransport sessions whose client certificate no longer verifies')
  })

  // HTTP/3 on the UDP port: the engine's credentials follow the same TLS material.
  let serverCredentials: ServerCredentials = quicServerCredentialsOf(tls.state(), requireClientCert)
  tls.addConsumer<ServerCredentials>({
    name: 'webtransport-h3',
    dependsOn: requireClientCert ? ['server_identity', 'client_trust'] : ['server_identity'],
    build: (state) => quicServerCredentialsOf(state, requireClientCert),
    // New connections get the new material; the old handle is freed when its last connection ends.
    commit: (candidate) => { const old = serverCredentials; serverCredentials = candidate; if (old !== candidate) old.release() },
  })
  const quicUpstream = followUpstreamTrust<UpstreamQuicTrust>(tls, {
    name: 'webtransport-h3-upstream',
    leg: 'webtransport_h3',
    flags,
    build: (trust) => ({ credentials: clientCredentialsFor(trust), key: trust.key }),
    release: (runtime) => { runtime.credentials.release() },
    onReplaced: (current) => {
      const closed = h3.closeTrust(current.runtime.key, TRUST_CHANGE_GRACE_MS)
      logger.info({ closed }, 'upstream trust changed: closing webtransport http/3 sessions dialed under the previous trust')
    },
  })
  const h3 = new WebTransportH3Relay({
    engine: QuicEngine.shared(),
    host: config.reverseTunnelListenAddr.host,
    port: config.reverseTunnelListenAddr.port,
    snapshot: context.snapshot,
    template: context.template,
    serverCredentials: () => serverCredentials,
    upstreamTrust: () => quicUpstream.current().runtime,
    connectTimeoutMs: config.connectTimeoutMs,
    idleTimeoutMs: config.relayIdleTimeoutMs,
    keepAliveMs: config.relayKeepAliveMs,
    drainGraceMs: config.drainGraceMs,
    maxSessions: config.webtransportMaxSessions,
    maxSessionsPerConnection: config.webtransportMaxSessionsPerConnection,
    maxFieldSectionSize: config.http2MaxHeaderListBytes,
    limits: {
      maxConnections: config.quicMaxConnections,
      retry: config.quicRetry,
      retryThreshold: config.quicRetryThreshold,
      maxHalfOpenPerAddress: config.quicMaxHandshakesPerAddress,
    },
    // Keyed on the identity's key, as for raw QUIC: after a restart Pylons are reset at once.
    resetSecret: resetSecretOf(tls.state()),
    metrics,
    handshakeFailures: context.metrics.quic.quicHandshakeFailures,
    logger,
    connections: context.connections,
    drainMetrics: context.metrics.drain,
  })
  tls.onChange((changed, _previous, next) => {
    if (changed !== 'client_trust' || next.clientTrust === null) return
    const closed = h3.closeUntrustedClients(next.clientTrust, TRUST_CHANGE_GRACE_MS)
    logger.info({ closed }, 'client trust changed: closing webtransport http/3 sessions whose client certificate no longer verifies')
  })

  // The same port number on UDP (HTTP/3) and TCP (HTTP/2): Pylons dial one address. With port
  // 0 the kernel picks the UDP number, which may be taken on TCP: then another one is tried.
  const configuredPort = config.reverseTunnelListenAddr.port
  let udp: { address: string, port: number }
  let address: Awaited<ReturnType<WebTransportRelay['listen']>>
  for (let attempt = 1; ; attempt++) {
    udp = h3.listen(configuredPort)
    try {
      address = await relay.listen(udp.port)
      break
    } catch (err) {
      h3.unlisten()
      if (configuredPort !== 0 || (err as NodeJS.ErrnoException).code !== 'EADDRINUSE' || attempt >= 10) throw err
    }
  }
  const trust = upstream.current().trust
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
      relay.stopAccepting()
      h3.stopAccepting()
    },
    close: () => {
      closing ??= Promise.all([relay.close(H3_CLOSE_REASONS.shutdown), h3.close(H3_CLOSE_REASONS.shutdown)]).then(() => { quicUpstream.dispose() })
      return closing
    },
  }
}
