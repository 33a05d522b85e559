/**
 * Trust policy (SPEC §7, §8, §12), decided here once for every leg and sweep; the wiring only
 * carries it out.
 *
 * Which bundle verifies Stargate pods, per upstream leg:
 *
 *   leg                               | TLS at all       | bundle, in order of preference                        | unverified
 *   registration, HTTP forwarding     | --upstream-tls   | --upstream-tls-cert-path, else the router certificate | never
 *   (Node TLS over TCP)               |                  | file; + system store with --upstream-tls-system-ca    |
 *   raw QUIC, WebTransport over       | always           | --upstream-tls-cert-path, else the router certificate | --quic-insecure
 *   HTTP/3 and over HTTP/2 (tunnels)  |                  | file (a generated identity trusts nothing)            |
 *
 * A trust change is any change of the bundle a leg verifies with, whichever material it came
 * from: when the router certificate is the upstream trust, renewing it replaces that trust, and
 * connections and tunnels verified under the old one close after TRUST_CHANGE_GRACE_MS — as for
 * a new --upstream-tls-cert-path bundle. An operator removing a compromised CA from the router
 * certificate file expects the same as removing it from a separate bundle. A server-identity
 * change that feeds no leg's trust (a separate bundle is configured) closes nothing.
 */
import { createHash, type X509Certificate } from 'node:crypto'
import { verifiesAgainst } from './client-cert.ts'
import type { TlsState, TrustBundle } from './types.ts'

/** Connections made under a replaced trust bundle get this long after GOAWAY (or a close capsule). */
export const TRUST_CHANGE_GRACE_MS = 5000

export const UPSTREAM_LEGS = ['registration', 'http_forward', 'raw_quic', 'webtransport_h3', 'webtransport_h2'] as const
export type UpstreamLeg = typeof UPSTREAM_LEGS[number]

/** The flags that shape upstream trust. */
export interface UpstreamTrustFlags {
  /** --upstream-tls: registration and HTTP forwarding dial pods over TLS (tunnels always do). */
  readonly upstreamTls: boolean
  /** --upstream-tls-system-ca: registration and HTTP forwarding also trust the system store. */
  readonly upstreamTlsSystemCa: boolean
  /** --quic-insecure: the tunnel legs verify nothing. */
  readonly quicInsecure: boolean
}

/**
 * How one leg dials pods. `key` names the trust: it changes exactly when what verifies pods
 * changes, and connections made under another key are the ones a trust change closes.
 */
export type UpstreamTrust =
  | { readonly kind: 'cleartext', readonly key: 'cleartext' }
  | { readonly kind: 'unverified', readonly key: 'unverified' }
  | {
    readonly kind: 'verify'
    /** The PEM bundle; null with systemRoots false trusts nothing (every dial fails verification). */
    readonly caPem: string | null
    /** Also trust Node's bundled system roots. */
    readonly systemRoots: boolean
    /** Which material the bundle came from, for logs. */
    readonly source: 'upstream_trust' | 'server_identity' | 'none'
    readonly key: string
  }

const CLEARTEXT = Object.freeze({ kind: 'cleartext', key: 'cleartext' } as const)
const UNVERIFIED = Object.freeze({ kind: 'unverified', key: 'unverified' } as const)

function isTunnel (leg: UpstreamLeg): boolean {
  return leg === 'raw_quic' || leg === 'webtransport_h3' || leg === 'webtransport_h2'
}

function digest (pem: string): string {
  return createHash('sha256').update(pem).digest('hex')
}

/** The trust one leg dials pods with under this TLS state and these flags. Pure. */
export function upstreamTrustFor (leg: UpstreamLeg, state: TlsState, flags: UpstreamTrustFlags): UpstreamTrust {
  const tunnel = isTunnel(leg)
  if (!tunnel && !flags.upstreamTls) return CLEARTEXT
  if (tunnel && flags.quicInsecure) return UNVERIFIED
  const systemRoots = !tunnel && flags.upstreamTlsSystemCa
  const identity = state.serverIdentity
  let caPem: string | null = null
  let source: 'upstream_trust' | 'server_identity' | 'none' = 'none'
  if (state.upstreamTrust !== null) {
    caPem = state.upstreamTrust.pem
    source = 'upstream_trust'
  } else if (identity !== null && !identity.generated) {
    // As the Rust router: the router's own certificate file verifies pods that share it.
    caPem = identity.certPem
    source = 'server_identity'
  }
  const key = `${caPem === null ? 'none' : digest(caPem)}${systemRoots ? '+system' : ''}`
  return { kind: 'verify', caPem, systemRoots, source, key }
}

/**
 * The client-trust sweep (SPEC §8): of these connections, those whose client certificate no
 * longer verifies against the new bundle. Connections without a certificate are kept (no mTLS
 * on them). chainOf gives the peer chain, leaf first.
 */
export function untrustedConnections<C> (connections: Iterable<C>, chainOf: (connection: C) => readonly X509Certificate[], bundle: TrustBundle, now: Date): C[] {
  const untrusted: C[] = []
  for (const connection of connections) {
    const chain = chainOf(connection)
    if (chain.length === 0 || verifiesAgainst(chain, bundle, now)) continue
    untrusted.push(connection)
  }
  return untrusted
}
