/**
 * Raw QUIC reverse tunnels (issue 15): the tunnel port's endpoint on the QUIC engine, the TLS
 * credentials it and the pod dialer use (rebuilt from the TLS manager on reload, SPEC §8), and
 * the relay.
 *
 * - Server identity: a new identity applies to connections accepted after the reload; open
 *   tunnels keep theirs (the engine frees released credentials when their last connection ends).
 * - Client trust (--client-ca-path, SPEC §12): Pylons must present a certificate that verifies
 *   against it, or the handshake fails; a change of it closes tunnels whose Pylon certificate
 *   no longer verifies (after the same grace).
 * - Upstream trust (for verifying Stargate pods): lib/tls/trust-policy.ts decides the bundle
 *   and when it changed; a change closes tunnels whose Stargate leg was verified under the
 *   previous one, after TRUST_CHANGE_GRACE_MS.
 */
import { createHash } from 'node:crypto'
import type { RunningTunnel, TunnelContext } from './tunnel-types.ts'
import { QuicEngine, type TransportOptions } from '../lib/quic/engine.ts'
import { clientCredentialsFor, ServerCredentials } from '../lib/quic/credentials.ts'
import type { TlsState } from '../lib/tls/types.ts'
import { TRUST_CHANGE_GRACE_MS } from '../lib/tls/trust-policy.ts'
import { followUpstreamTrust } from '../lib/tls/upstream-trust-consumer.ts'
import { CLOSE_REASONS, RawQuicRelay, type UpstreamCredentials } from '../lib/tunnel/raw-quic/relay.ts'
import { upstreamTrustFlags } from './tls-wiring.ts'

/** The stateless reset key of the tunnel port, derived from the server identity's key (also WebTransport's). */
export function resetSecretOf (state: TlsState): Buffer | null {
  const identity = state.serverIdentity
  return identity === null ? null : createHash('sha256').update('stargate-router stateless reset\0').update(identity.keyPem).digest()
}

export async function startRawQuicTunnel (context: TunnelContext): Promise<RunningTunnel> {
  const { config, tls, logger } = context
  const metrics = context.metrics.quic
  const engine = QuicEngine.shared({
    onHandlerError: (err) => { logger.error({ err }, 'raw quic: an event handler failed; its connection was closed') },
  })
  const transport: TransportOptions = { idleTimeoutMs: config.relayIdleTimeoutMs, keepAliveMs: config.relayKeepAliveMs }

  const requireClientCert = config.clientCaPath !== null
  let serverCredentials: ServerCredentials | null = null
  tls.addConsumer<ServerCredentials>({
    name: 'raw-quic-server',
    dependsOn: requireClientCert ? ['server_identity', 'client_trust'] : ['server_identity'],
    build: (state) => {
      const identity = state.serverIdentity
      if (identity === null) throw new Error('no server identity is active')
      if (requireClientCert && state.clientTrust === null) throw new Error('no client trust bundle is active')
      // Built now, so material GnuTLS cannot load fails the candidate, not a later handshake.
      return ServerCredentials.create({ certPem: identity.certPem, keyPem: identity.keyPem, clientCaPem: requireClientCert ? state.clientTrust?.pem ?? null : null })
    },
    commit: (candidate) => {
      serverCredentials?.release()
      serverCredentials = candidate
    },
  })

  // Which bundle verifies pods, and when a change closes tunnels: lib/tls/trust-policy.ts.
  const upstream = followUpstreamTrust<UpstreamCredentials>(tls, {
    name: 'raw-quic-upstream',
    leg: 'raw_quic',
    flags: upstreamTrustFlags(config),
    build: (trust, generation) => ({ credentials: clientCredentialsFor(trust), generation }),
    release: (runtime) => { runtime.credentials.release() },
    onReplaced: (current) => {
      // Called on a reload, never before the relay below exists.
      const closing = relay.closeGeneration(current.generation, TRUST_CHANGE_GRACE_MS)
      logger.info({ closing, graceMs: TRUST_CHANGE_GRACE_MS }, 'upstream trust changed: closing raw quic tunnels verified under the previous trust')
    },
  })
  const trust = upstream.current().trust
  if (trust.kind === 'verify' && trust.caPem === null) {
    logger.warn('raw quic: no trust bundle for Stargate certificates (no --upstream-tls-cert-path and no --tls-cert-path): tunnels will fail to verify pods; set one, or --quic-insecure')
  }

  const relay = new RawQuicRelay({
    engine,
    snapshot: context.snapshot,
    template: context.template,
    serverCredentials: () => serverCredentials,
    upstreamCredentials: () => upstream.current().runtime,
    transport,
    connectTimeoutMs: config.connectTimeoutMs,
    drainGraceMs: config.drainGraceMs,
    metrics,
    logger,
    connections: context.connections,
    drainMetrics: context.metrics.drain,
  })
  tls.onChange((changed, _previous, next) => {
    if (changed !== 'client_trust' || next.clientTrust === null) return
    const closing = relay.closeUntrusted(next.clientTrust, TRUST_CHANGE_GRACE_MS)
    logger.info({ closing, graceMs: TRUST_CHANGE_GRACE_MS }, 'client trust changed: closing raw quic tunnels whose Pylon certificate no longer verifies')
  })

  const endpoint = engine.listen({
    host: config.reverseTunnelListenAddr.host,
    port: config.reverseTunnelListenAddr.port,
    onProposal: (proposal) => { relay.propose(proposal) },
    maxConnections: config.quicMaxConnections,
    retry: config.quicRetry,
    retryThreshold: config.quicRetryThreshold,
    maxHalfOpenPerAddress: config.quicMaxHandshakesPerAddress,
    // A Pylon's handshake gets the same bound as the router's dial to a pod.
    transport: { ...transport, handshakeTimeoutMs: config.connectTimeoutMs },
    // Stateless reset tokens keyed on the identity's key: after a restart, Pylons of the
    // previous process are reset at their next packet instead of waiting out the idle timeout.
    resetSecret: resetSecretOf(tls.state()),
  })
  metrics.setEndpointSource(() => {
    const stats = endpoint.stats()
    return stats === null
      ? null
      : { connections: stats.connections + stats.pending, halfOpen: stats.halfOpen, dropped: stats.dropped, stateless: stats.stateless }
  })
  metrics.setEngineSource(() => engine.counters())
  const udp = { address: endpoint.address, port: endpoint.port, family: endpoint.address.includes(':') ? 'IPv6' : 'IPv4' }
  logger.info({ udp, retry: config.quicRetry, maxConnections: config.quicMaxConnections, upstreamVerify: trust.kind === 'verify' }, 'raw quic tunnel listening')

  let closing: Promise<void> | null = null
  return {
    udp,
    tcp: null,
    stopAccepting: () => { relay.stopAccepting() },
    close: () => {
      closing ??= (async () => {
        relay.stopAccepting()
        relay.dispose()
        relay.closeAll(CLOSE_REASONS.shutdown)
        // The CONNECTION_CLOSE packets leave synchronously; let one turn pass for the events.
        await new Promise((resolve) => { setImmediate(resolve) })
        endpoint.close()
        serverCredentials?.release()
        upstream.dispose()
      })()
      return closing
    },
  }
}
