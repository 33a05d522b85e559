/**
 * Raw QUIC reverse tunnels (issue 5): the tunnel port's UDP listener, the quiche Configs it
 * and the upstream dialer use (rebuilt from the TLS manager on reload, SPEC §8), and the relay.
 *
 * - Server identity: a new identity applies to connections accepted after the reload; open
 *   tunnels keep theirs.
 * - Upstream trust (for verifying Stargate pods): the --upstream-tls-cert-path bundle, else the
 *   router's own certificate file (as the Rust router), unless --quic-insecure. A change of
 *   that trust closes tunnels whose Stargate leg was verified under the previous one, after a
 *   short grace (TRUST_CHANGE_GRACE_MS).
 */
import type { RunningTunnel, TunnelContext } from './tunnels.ts'
import { QuicDriver } from '../lib/quic/quiche/driver.ts'
import { QuicServer } from '../lib/quic/quiche/server.ts'
import { fullGc } from '../lib/quic/quiche/gc.ts'
import { buildClientConfig, buildServerConfig, ConfigCache, type TransportOptions } from '../lib/quic/quiche/config.ts'
import type { NativeConfig } from '../lib/quic/quiche/native.ts'
import type { TlsState } from '../lib/tls/types.ts'
import { CLOSE_REASONS, RawQuicRelay, type UpstreamConfig } from '../lib/tunnel/raw-quic-relay.ts'
import { TRUST_CHANGE_GRACE_MS } from './tls-wiring.ts'

/** ALPN accepted when a client's ClientHello cannot be read from its first datagram. */
export const DEFAULT_ALPN: readonly string[] = ['h3']

interface UpstreamTrust {
  /** PEM bundle, or null: nothing to verify against (every dial fails verification). */
  readonly caPem: string | null
  readonly verify: boolean
}

export async function startRawQuicTunnel (context: TunnelContext): Promise<RunningTunnel> {
  const { config, tls, logger } = context
  const metrics = context.metrics.quic
  const driver = new QuicDriver({ collectGarbage: fullGc() })
  const transport: TransportOptions = { idleTimeoutMs: config.relayIdleTimeoutMs }

  let serverConfigs: ConfigCache | null = null
  tls.addConsumer<ConfigCache>({
    name: 'raw-quic-server',
    dependsOn: ['server_identity'],
    build: (state) => {
      const identity = state.serverIdentity
      if (identity === null) throw new Error('no server identity is active')
      const cache = new ConfigCache((alpn) => buildServerConfig({ ...transport, certPem: identity.certPem, keyPem: identity.keyPem, alpn }))
      cache.get(DEFAULT_ALPN) // fails the candidate now if quiche rejects the material
      return cache
    },
    commit: (candidate) => { serverConfigs = candidate },
  })

  const trustOf = (state: TlsState): UpstreamTrust => {
    if (config.quicInsecure) return { caPem: null, verify: false }
    if (state.upstreamTrust !== null) return { caPem: state.upstreamTrust.pem, verify: true }
    const identity = state.serverIdentity
    return { caPem: identity !== null && !identity.generated ? identity.certPem : null, verify: true }
  }
  let trust: UpstreamTrust = trustOf(tls.state())
  let trustGeneration = 1
  let upstreamConfigs = new Map<string, NativeConfig>()
  const upstreamConfig = (alpn: string): UpstreamConfig => {
    let built = upstreamConfigs.get(alpn)
    if (built === undefined) {
      built = buildClientConfig({ ...transport, caPem: trust.caPem, verifyPeer: trust.verify, alpn: [alpn === '' ? DEFAULT_ALPN[0] as string : alpn] })
      if (upstreamConfigs.size >= 64) upstreamConfigs = new Map()
      upstreamConfigs.set(alpn, built)
    }
    return { config: built, generation: trustGeneration }
  }
  tls.addConsumer<UpstreamTrust>({
    name: 'raw-quic-upstream',
    dependsOn: ['upstream_trust', 'server_identity'],
    build: (state) => {
      const next = trustOf(state)
      // Built once now so unusable material fails the candidate, not a later dial.
      buildClientConfig({ ...transport, caPem: next.caPem, verifyPeer: next.verify, alpn: DEFAULT_ALPN })
      return next
    },
    commit: (candidate, _state, changed) => {
      if (changed !== null && candidate.caPem === trust.caPem && candidate.verify === trust.verify) return
      trust = candidate
      upstreamConfigs = new Map()
      if (changed !== null) trustGeneration++
    },
  })
  if (trust.verify && trust.caPem === null) {
    logger.warn('raw quic: no trust bundle for Stargate certificates (no --upstream-tls-cert-path and no --tls-cert-path): tunnels will fail to verify pods; set one, or --quic-insecure')
  }

  const relay = new RawQuicRelay({
    snapshot: context.snapshot,
    template: context.template,
    driver,
    upstreamConfig,
    connectTimeoutMs: config.connectTimeoutMs,
    keepAliveMs: config.relayKeepAliveMs,
    metrics,
    logger,
  })
  tls.onChange((changed) => {
    if (changed !== 'upstream_trust' && changed !== 'server_identity') return
    const closing = relay.closeGeneration(trustGeneration, TRUST_CHANGE_GRACE_MS)
    if (closing > 0) logger.info({ closing, graceMs: TRUST_CHANGE_GRACE_MS }, 'upstream trust changed: closing raw quic tunnels verified under the previous bundle')
  })

  const server = await QuicServer.listen({
    host: config.reverseTunnelListenAddr.host,
    port: config.reverseTunnelListenAddr.port,
    driver,
    configFor: (hello) => {
      if (serverConfigs === null) throw new Error('no server identity')
      return serverConfigs.get(hello !== null && hello.alpn.length > 0 ? hello.alpn : DEFAULT_ALPN)
    },
    maxConnections: config.quicMaxConnections,
    // A Pylon's handshake gets the same bound as the router's own dial to a pod; handshakes
    // that do not complete in it are dropped, which bounds half-open state with maxConnections.
    handshakeTimeoutMs: config.connectTimeoutMs,
    keepAliveMs: config.relayKeepAliveMs,
    retry: config.quicRetry,
    rawStreams: true,
    onConnection: (conn) => { relay.accept(conn) },
  })
  metrics.setEndpointSource(() => ({ connections: server.size, dropped: server.stats().dropped }))
  const udp = server.address()
  logger.info({ udp, retry: config.quicRetry, maxConnections: config.quicMaxConnections, upstreamVerify: trust.verify }, 'raw quic tunnel listening')

  let closing: Promise<void> | null = null
  return {
    udp,
    tcp: null,
    stopAccepting: () => { relay.stopAccepting() },
    close: () => {
      closing ??= (async () => {
        relay.stopAccepting()
        relay.closeAll(CLOSE_REASONS.shutdown)
        await server.close(0, CLOSE_REASONS.shutdown)
        // The CONNECTION_CLOSE frames are out; no draining period for a process that is leaving.
        driver.destroyAll()
      })()
      return closing
    },
  }
}
