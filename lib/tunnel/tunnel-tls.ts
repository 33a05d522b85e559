/**
 * The tunnel port's TLS (SPEC §7, §8), as followers of the TLS material manager
 * (lib/tls/tls-follower.ts): each owns what it builds, hands the current one to its relay,
 * releases what a reload replaced, and releases the rest when the tunnel stops.
 *
 * - Server side: the engine's server credentials (raw QUIC, WebTransport over HTTP/3) and the
 *   Node context of the WebTransport-over-HTTP/2 listener, from the server identity and, with
 *   --client-ca-path, the client trust bundle. New handshakes get new material; open tunnels
 *   keep theirs (the engine frees released credentials when their last connection ends).
 * - Upstream side: each relay's leg to the pods follows its trust (lib/tls/trust-policy.ts
 *   decides the bundle and when it changed): engine client credentials, or a Node client
 *   context. A change closes what the old trust verified (the relay's closeTrust).
 * - The stateless-reset secret of the UDP port, derived from the identity's key.
 */
import { createHash } from 'node:crypto'
import type { SecureContext } from 'node:tls'
import { ServerCredentials, clientCredentialsFor, type ClientCredentials } from '../quic/credentials.ts'
import { buildSecureContext, serverContextOptions, type BuiltSecureContext } from '../tls/secure-context-consumer.ts'
import { followTls, type TlsFollower, type TlsSource } from '../tls/tls-follower.ts'
import type { MaterialType, TlsState, TrustBundle } from '../tls/types.ts'
import type { UpstreamLeg, UpstreamTrustFlags } from '../tls/trust-policy.ts'
import { followUpstreamTrust, upstreamSecureContext, type FollowedTrust, type UpstreamTrustFollower } from '../tls/upstream-trust-consumer.ts'

/** What the server side of a listener depends on: the identity, and the client trust when Pylons must present certificates. */
function serverMaterial (requireClientCert: boolean): readonly MaterialType[] {
  return requireClientCert ? ['server_identity', 'client_trust'] : ['server_identity']
}

/** The engine's server credentials of the UDP port: built per change, so material GnuTLS cannot load fails the reload, not a later handshake. */
export function followServerCredentials (tls: TlsSource, options: { readonly name: string, readonly requireClientCert: boolean }): TlsFollower<ServerCredentials> {
  return followTls<ServerCredentials>(tls, {
    name: options.name,
    dependsOn: serverMaterial(options.requireClientCert),
    build: (state) => {
      const identity = state.serverIdentity
      if (identity === null) throw new Error('no server identity is active')
      if (options.requireClientCert && state.clientTrust === null) throw new Error('no client trust bundle is active')
      return ServerCredentials.create({ certPem: identity.certPem, keyPem: identity.keyPem, clientCaPem: options.requireClientCert ? state.clientTrust?.pem ?? null : null })
    },
    release: (credentials) => { credentials.release() },
  })
}

/** The Node server context of a TCP listener; onCommit swaps each new one in (the first one is read with current()). */
export function followServerContext (tls: TlsSource, options: {
  readonly name: string
  readonly requireClientCert: boolean
  readonly onCommit: (built: BuiltSecureContext) => void
}): TlsFollower<BuiltSecureContext> {
  return followTls<BuiltSecureContext>(tls, {
    name: options.name,
    dependsOn: serverMaterial(options.requireClientCert),
    build: (state) => buildSecureContext(serverContextOptions(state, { withClientTrust: options.requireClientCert })),
    onCommit: (built, previous) => { if (previous !== null) options.onCommit(built) },
  })
}

export interface UpstreamFollowerOptions {
  readonly name: string
  readonly leg: UpstreamLeg
  readonly flags: UpstreamTrustFlags
  /** After a committed trust change: close what was dialled under another trust. */
  readonly onReplaced: (current: FollowedTrust<unknown>) => void
}

/** Engine client credentials for a QUIC leg to the pods (raw QUIC, WebTransport over HTTP/3). */
export function followUpstreamCredentials (tls: TlsSource, options: UpstreamFollowerOptions): UpstreamTrustFollower<ClientCredentials> {
  return followUpstreamTrust<ClientCredentials>(tls, {
    ...options,
    build: (trust) => clientCredentialsFor(trust),
    release: (credentials) => { credentials.release() },
  })
}

/** The Node client context of the WebTransport-over-HTTP/2 leg to the pods; null with --quic-insecure (nothing verified). */
export function followUpstreamContext (tls: TlsSource, options: UpstreamFollowerOptions): UpstreamTrustFollower<SecureContext | null> {
  return followUpstreamTrust<SecureContext | null>(tls, {
    ...options,
    build: (trust) => trust.kind === 'verify' ? upstreamSecureContext(trust) : null,
  })
}

/** Client trust changed (--client-ca-path): the new bundle, once committed; returns how to stop listening. */
export function onClientTrustChange (tls: TlsSource, listener: (bundle: TrustBundle) => void): () => void {
  return tls.onChange((changed, _previous, next) => {
    if (changed === 'client_trust' && next.clientTrust !== null) listener(next.clientTrust)
  })
}

/**
 * The UDP port's stateless reset key, derived from the server identity's key: after a restart,
 * Pylons of the previous process are reset at their next packet instead of waiting out the
 * idle timeout.
 */
export function resetSecretOf (state: TlsState): Buffer | null {
  const identity = state.serverIdentity
  return identity === null ? null : createHash('sha256').update('stargate-router stateless reset\0').update(identity.keyPem).digest()
}
