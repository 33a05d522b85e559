/**
 * TLS material -> the runtime objects it feeds (SPEC §8), for the composition root:
 * the front door's SecureContext (server identity + client trust), the upstream dialers'
 * SecureContext (upstream trust), and the connections to close when a trust bundle changes.
 */
import { createSecureContext, rootCertificates, type SecureContext } from 'node:tls'
import type { Config } from '../lib/config/config.ts'
import { TlsMaterialManager } from '../lib/tls/manager.ts'
import { secureContextConsumer, serverContextOptions } from '../lib/tls/secure-context-consumer.ts'
import { peerChainOf, verifiesAgainst } from '../lib/tls/client-cert.ts'
import type { TlsState } from '../lib/tls/types.ts'
import type { FrontDoorListener, FrontDoorTls } from '../lib/front-door/listener.ts'
import type { UpstreamPool, UpstreamTls } from '../lib/control-plane/upstream-pool.ts'
import type { HttpPods } from '../lib/http-forward/pods.ts'
import type { RouterMetrics } from '../lib/metrics/metrics.ts'
import type { Logger } from '../lib/log.ts'

/** Connections made under a replaced trust bundle get this long after GOAWAY. */
export const TRUST_CHANGE_GRACE_MS = 5000

export interface RouterTls {
  readonly manager: TlsMaterialManager
  /** Front door TLS, or null for h2c. */
  readonly frontDoor: FrontDoorTls | null
  /** Upstream TLS for dialers when --upstream-tls; null dials cleartext. */
  readonly upstream: (() => UpstreamTls) | null
  /** Hooks the front door and the upstream pool to reloads once they exist. */
  attach (frontDoor: FrontDoorListener, pool: UpstreamPool, httpPods: HttpPods): void
}

/** The trust bundle for dialing pods: --upstream-tls-cert-path, else the router's certificate. */
function upstreamTrustPath (config: Config): string | null {
  return config.upstreamTlsCertPath ?? (config.upstreamTls ? config.tlsCertPath : null)
}

/**
 * Starts the TLS material manager. Tunnels always terminate TLS, so without a configured
 * identity a self-signed one is generated for the template's hosts (and logged). The front
 * door uses TLS only when --front-door-tls asks for it (with the configured identity, which
 * config validation requires); otherwise it is h2c + HTTP/1.1, as in the Rust router, whose
 * --tls-cert-path/--tls-key-path are the tunnels' identity only (issue 13).
 */
export async function startTls (config: Config, selfSignedHost: string, metrics: RouterMetrics, logger: Logger): Promise<RouterTls> {
  const trustPath = upstreamTrustPath(config)
  const manager = await TlsMaterialManager.start({
    serverIdentity: config.tlsCertPath !== null && config.tlsKeyPath !== null ? { certPath: config.tlsCertPath, keyPath: config.tlsKeyPath } : null,
    upstreamTrust: trustPath === null ? null : { path: trustPath },
    clientTrust: config.clientCaPath === null ? null : { path: config.clientCaPath },
    selfSignedHosts: [selfSignedHost],
    debounceMs: config.tlsDebounceMs,
    pollMs: config.tlsPollIntervalMs,
    metrics,
    logger,
  })
  const requireClientCert = config.clientCaPath !== null
  const state = manager.state()
  const frontDoor: FrontDoorTls | null = config.frontDoorTls
    ? { options: serverContextOptions(state, { withClientTrust: requireClientCert }), requireClientCert }
    : null

  let upstream: (() => UpstreamTls) | null = null
  let current: UpstreamTls = { secureContext: createSecureContext(), generation: 0 }
  if (config.upstreamTls) upstream = () => current
  // Without a bundle Node's default context trusts the system store; configuration allows that
  // only with --upstream-tls-system-ca, which also adds the system roots to a bundle.
  const upstreamFrom = (s: TlsState): UpstreamTls => ({
    secureContext: s.upstreamTrust === null
      ? createSecureContext()
      : createSecureContext({ ca: config.upstreamTlsSystemCa ? [...rootCertificates, s.upstreamTrust.pem] : s.upstreamTrust.pem }),
    generation: s.generations.upstream_trust,
  })

  return {
    manager,
    frontDoor,
    upstream,
    attach (door: FrontDoorListener, pool: UpstreamPool, httpPods: HttpPods): void {
      if (frontDoor !== null) {
        manager.addConsumer(secureContextConsumer({
          name: 'front-door',
          dependsOn: requireClientCert ? ['server_identity', 'client_trust'] : ['server_identity'],
          buildOptions: (s) => serverContextOptions(s, { withClientTrust: requireClientCert }),
          apply: (built) => { door.setSecureContext(built.options) },
        }))
      }
      if (upstream !== null) {
        manager.addConsumer<UpstreamTls>({
          name: 'upstream-http2',
          dependsOn: ['upstream_trust'],
          build: upstreamFrom,
          commit: (candidate) => { current = candidate },
        })
      }
      manager.onChange((changed, _previous, next) => {
        if (changed === 'upstream_trust') {
          const closed = pool.closeGeneration(next.generations.upstream_trust, TRUST_CHANGE_GRACE_MS)
          httpPods.refreshTrust()
          logger.info({ closed, graceMs: TRUST_CHANGE_GRACE_MS }, 'upstream trust changed: closing upstream sessions made under the previous bundle')
        } else if (changed === 'client_trust' && next.clientTrust !== null) {
          let closed = 0
          const now = new Date()
          for (const socket of door.tlsConnections()) {
            const chain = peerChainOf(socket)
            if (chain.length === 0 || verifiesAgainst(chain, next.clientTrust, now)) continue
            door.closeConnection(socket, TRUST_CHANGE_GRACE_MS)
            closed++
          }
          logger.info({ closed }, 'client trust changed: closed connections whose client certificate no longer verifies')
        }
      })
    },
  }
}

export type { SecureContext }
