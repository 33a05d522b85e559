/**
 * WebTransport reverse tunnels (issue 6, SPEC §7): the relay on the TCP port with the tunnel
 * port number, fed by the TLS material manager.
 *
 * - Server identity (and client trust with --client-ca-path): a SecureContext consumer; new
 *   handshakes use new material, open sessions keep theirs (SPEC §8).
 * - Upstream trust: --upstream-tls-cert-path when set, else the router's own certificate
 *   (as the Rust router), else nothing is verified with --quic-insecure. A change of the
 *   configured upstream trust bundle closes the sessions bridged under the old one
 *   (outcome trust_replaced); a server-identity change closes nothing, even when its
 *   certificate is the upstream trust, as SPEC §8 says of identity changes.
 * - A client-trust change closes Pylon connections whose certificate no longer verifies.
 */
import { createSecureContext } from 'node:tls'
import { secureContextConsumer, serverContextOptions } from '../lib/tls/secure-context-consumer.ts'
import type { TlsState } from '../lib/tls/types.ts'
import { WebTransportRelay } from '../lib/tunnel/webtransport-relay.ts'
import { probeHttp3Transport } from '../lib/tunnel/webtransport-http3.ts'
import type { UpstreamTrust } from '../lib/tunnel/webtransport-upstream.ts'
import type { RunningTunnel, TunnelContext } from './tunnels.ts'

/** The upstream trust of a TLS state; `key` changes only when the configured trust bundle does. */
export function upstreamTrustOf (state: TlsState, insecure: boolean): UpstreamTrust {
  if (insecure) return { secureContext: null, key: 'insecure' }
  if (state.upstreamTrust !== null) {
    return { secureContext: createSecureContext({ ca: state.upstreamTrust.pem }), key: `bundle:${state.upstreamTrust.fingerprint}` }
  }
  const identity = state.serverIdentity
  return { secureContext: createSecureContext(identity === null ? {} : { ca: identity.certPem }), key: 'router-certificate' }
}

export async function startWebTransportTunnel (context: TunnelContext): Promise<RunningTunnel> {
  const { config, tls, logger } = context
  const metrics = context.metrics.webtransport
  const requireClientCert = config.clientCaPath !== null
  let upstream = upstreamTrustOf(tls.state(), config.quicInsecure)
  const relay = new WebTransportRelay({
    host: config.reverseTunnelListenAddr.host,
    port: config.reverseTunnelListenAddr.port,
    snapshot: context.snapshot,
    template: context.template,
    serverTls: serverContextOptions(tls.state(), { withClientTrust: requireClientCert }),
    requireClientCert,
    upstreamTrust: () => upstream,
    connectTimeoutMs: config.connectTimeoutMs,
    idleTimeoutMs: config.relayIdleTimeoutMs,
    keepAliveMs: config.relayKeepAliveMs,
    maxConcurrentStreams: config.http2MaxConcurrentStreams,
    maxHeaderListSize: config.http2MaxHeaderListBytes,
    maxSessionsPerConnection: config.webTransportMaxSessionsPerConnection,
    maxSessions: config.webTransportMaxSessions,
    metrics,
    logger,
    onTlsError: () => { context.metrics.tlsHandshakeFailures.labels('webtransport').inc() },
    onRapidReset: () => { context.metrics.http2RapidResetCloses.inc() },
  })
  tls.addConsumer(secureContextConsumer({
    name: 'webtransport',
    dependsOn: requireClientCert ? ['server_identity', 'client_trust'] : ['server_identity'],
    buildOptions: (state) => serverContextOptions(state, { withClientTrust: requireClientCert }),
    apply: (built) => { relay.setSecureContext(built.options) },
  }))
  tls.addConsumer<UpstreamTrust>({
    name: 'webtransport-upstream',
    dependsOn: ['upstream_trust', 'server_identity'],
    build: (state) => upstreamTrustOf(state, config.quicInsecure),
    commit: (candidate) => { upstream = candidate },
  })
  tls.onChange((changed, _previous, next) => {
    if (changed === 'upstream_trust') {
      const closed = relay.closeTrust(upstream.key)
      logger.info({ closed }, 'upstream trust changed: closing webtransport sessions bridged under the previous bundle')
    } else if (changed === 'client_trust' && next.clientTrust !== null) {
      const closed = relay.closeUntrustedClients(next.clientTrust)
      logger.info({ closed }, 'client trust changed: closed webtransport connections whose client certificate no longer verifies')
    }
  })

  const address = await relay.listen()
  const http3 = await probeHttp3Transport()
  logger.info({
    tcp: address,
    transports: { http2: `tcp ${address.address}:${address.port}`, http3: http3.available ? 'loaded, not served' : 'unavailable' },
    ...(http3.available ? {} : { http3Reason: http3.reason }),
    upstreamTrust: upstream.key.startsWith('bundle:') ? 'bundle' : upstream.key,
  }, http3.available
    ? 'webtransport tunnel listening: http/2 only; the http/3 transport loaded but the relay bridges http/2 sessions only'
    : `webtransport tunnel listening: http/2 only; http/3 unavailable (${http3.reason})`)

  return {
    udp: null,
    tcp: address,
    stopAccepting: () => { relay.stopAccepting() },
    close: () => relay.close('router shutdown'),
  }
}
