/**
 * The router's TLS material and what the front door and the pod dialers take from it (SPEC
 * §8), for the composition root: the front door's SecureContext (server identity + client
 * trust), the registration and HTTP-forwarding legs' SecureContext (upstream trust, followed
 * through reloads: a change closes what the old trust verified), and the front-door
 * connections whose client certificate a client-trust change no longer verifies. The tunnel
 * port's own followers are lib/tunnel/tunnel-tls.ts's. close() gives back every consumer and
 * listener added here, then stops the manager.
 */
import type { Config } from '../config/config.ts'
import { TlsMaterialManager } from './manager.ts'
import { secureContextConsumer, serverContextOptions } from './secure-context-consumer.ts'
import { peerChainOf } from './client-cert.ts'
import { TRUST_CHANGE_GRACE_MS, untrustedConnections, upstreamTrustFor } from './trust-policy.ts'
import { followUpstreamTrust, upstreamSecureContext } from './upstream-trust-consumer.ts'
import type { FrontDoorListener, FrontDoorTls } from '../front-door/listener.ts'
import type { UpstreamPool, UpstreamTls } from '../control-plane/upstream-pool.ts'
import type { HttpPods } from '../http-forward/pods.ts'
import type { RouterMetrics } from '../metrics/metrics.ts'
import type { Logger } from '../log.ts'

export interface RouterTls {
  readonly manager: TlsMaterialManager
  /** Front door TLS, or null for h2c. */
  readonly frontDoor: FrontDoorTls | null
  /** Upstream TLS for registration dials when --upstream-tls; null dials cleartext. */
  readonly registration: (() => UpstreamTls) | null
  /** Upstream TLS for HTTP forwarding when --upstream-tls; null dials cleartext. */
  readonly httpForward: (() => UpstreamTls) | null
  /** Hooks the front door, the upstream pool and the HTTP pods to reloads once they exist. */
  attach (frontDoor: FrontDoorListener, pool: UpstreamPool, httpPods: HttpPods): void
  /** Releases what was hooked to the manager, then stops it (waits for a reload in progress). Idempotent. */
  close (): Promise<void>
}

/**
 * Starts the TLS material manager. Tunnels always terminate TLS, so without a configured
 * identity a self-signed one is generated for the template's hosts (and logged). The front
 * door uses TLS only when --front-door-tls asks for it (with the configured identity, which
 * config validation requires); otherwise it is h2c + HTTP/1.1, as in the Rust router, whose
 * --tls-cert-path/--tls-key-path are the tunnels' identity only.
 */
export async function startRouterTls (config: Config, selfSignedHost: string, metrics: RouterMetrics, logger: Logger): Promise<RouterTls> {
  const trustPath = config.upstreamTlsCertPath
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

  // Registration and HTTP forwarding each follow their trust (lib/tls/trust-policy.ts); the
  // pool and the pods exist only later, so a change before attach() has nothing to close.
  const flags = config
  let pool: UpstreamPool | null = null
  let pods: HttpPods | null = null
  const releases: Array<() => void> = []
  const follow = (leg: 'registration' | 'http_forward', onReplaced: (key: string) => void): (() => UpstreamTls) | null => {
    if (upstreamTrustFor(leg, manager.state(), flags).kind === 'cleartext') return null
    const follower = followUpstreamTrust<UpstreamTls>(manager, {
      name: leg === 'registration' ? 'upstream-http2' : 'upstream-http',
      leg,
      flags,
      build: (trust) => {
        if (trust.kind !== 'verify') throw new Error(`${leg} dials pods with verified TLS only`)
        return { secureContext: upstreamSecureContext(trust), key: trust.key }
      },
      onReplaced: (current) => { onReplaced(current.trust.key) },
    })
    releases.push(() => { follower.release() })
    return () => follower.current().runtime
  }
  const registration = follow('registration', (key) => {
    const closed = pool?.closeTrust(key, TRUST_CHANGE_GRACE_MS) ?? 0
    logger.info({ closed, graceMs: TRUST_CHANGE_GRACE_MS }, 'upstream trust changed: closing registration sessions made under the previous trust')
  })
  const httpForward = follow('http_forward', () => {
    pods?.refreshTrust(TRUST_CHANGE_GRACE_MS)
    logger.info({ graceMs: TRUST_CHANGE_GRACE_MS }, 'upstream trust changed: replacing http pools made under the previous trust')
  })

  return {
    manager,
    frontDoor,
    registration,
    httpForward,
    attach (door: FrontDoorListener, upstreamPool: UpstreamPool, httpPods: HttpPods): void {
      pool = upstreamPool
      pods = httpPods
      if (frontDoor !== null) {
        releases.push(manager.addConsumer(secureContextConsumer({
          name: 'front-door',
          dependsOn: requireClientCert ? ['server_identity', 'client_trust'] : ['server_identity'],
          buildOptions: (s) => serverContextOptions(s, { withClientTrust: requireClientCert }),
          apply: (built) => { door.setSecureContext(built.options) },
        })))
      }
      releases.push(manager.onChange((changed, _previous, next) => {
        if (changed !== 'client_trust' || next.clientTrust === null) return
        const untrusted = untrustedConnections(door.tlsConnections(), peerChainOf, next.clientTrust, new Date())
        for (const socket of untrusted) door.closeConnection(socket, TRUST_CHANGE_GRACE_MS)
        logger.info({ closed: untrusted.length }, 'client trust changed: closed connections whose client certificate no longer verifies')
      }))
    },
    close (): Promise<void> {
      for (let release = releases.pop(); release !== undefined; release = releases.pop()) release()
      return manager.close()
    },
  }
}

