/**
 * One upstream leg following its trust (trust-policy.ts) through TLS reloads: a follower
 * (tls-follower.ts) that rebuilds the leg's runtime object (a SecureContext, engine credentials) only when the
 * trust's key changes, and, once the manager has committed the change, tells the leg to close
 * what it dialled under the previous trust. Every leg (registration, HTTP forwarding, raw QUIC,
 * WebTransport over HTTP/3 and HTTP/2) goes through here, so they cannot disagree on when a
 * change closes connections.
 */
import { createSecureContext, rootCertificates, type SecureContext } from 'node:tls'
import { followTls, type TlsSource } from './tls-follower.ts'
import { upstreamTrustFor, type UpstreamLeg, type UpstreamTrust, type UpstreamTrustFlags } from './trust-policy.ts'

/** What a leg dials with now; generation counts trust changes from 1. */
export interface FollowedTrust<R> {
  readonly trust: UpstreamTrust
  readonly runtime: R
  readonly generation: number
}

export interface UpstreamTrustFollowerOptions<R> {
  readonly name: string
  readonly leg: UpstreamLeg
  readonly flags: UpstreamTrustFlags
  /** The runtime object new dials use; throws when the material is unusable (the reload is rejected). */
  readonly build: (trust: UpstreamTrust, generation: number) => R
  /** Frees a runtime object new dials no longer get (engine credentials); dials using it keep it. */
  readonly release?: (runtime: R) => void
  /** After a committed trust change: close what was dialled under another trust (`current.trust.key` names the one in force). */
  readonly onReplaced: (current: FollowedTrust<R>) => void
}

export interface UpstreamTrustFollower<R> {
  current (): FollowedTrust<R>
  /** Stops following and releases the current runtime object. Idempotent. */
  release (): void
}

export function followUpstreamTrust<R> (manager: TlsSource, options: UpstreamTrustFollowerOptions<R>): UpstreamTrustFollower<R> {
  let replaced = false
  const follower = followTls<FollowedTrust<R>>(manager, {
    name: options.name,
    // The router certificate is the trust when no bundle is configured: both can change it.
    dependsOn: ['upstream_trust', 'server_identity'],
    build: (state, current) => {
      const trust = upstreamTrustFor(options.leg, state, options.flags)
      if (current !== null && trust.key === current.trust.key) return current
      const generation = (current?.generation ?? 0) + 1
      return { trust, runtime: options.build(trust, generation), generation }
    },
    release: (followed) => { options.release?.(followed.runtime) },
    onCommit: (_followed, previous) => { if (previous !== null) replaced = true },
  })
  // Closing waits for the change to be committed by every consumer (and the state published).
  const unsubscribe = manager.onChange(() => {
    if (!replaced) return
    replaced = false
    options.onReplaced(follower.current())
  })
  return {
    current: () => follower.current(),
    release: () => {
      unsubscribe()
      follower.release()
    },
  }
}

/**
 * A Node client SecureContext for a verifying trust: the bundle, with or without the system
 * roots; an empty CA list when nothing is trusted (Node adds its roots only when `ca` is absent).
 */
export function upstreamSecureContext (trust: UpstreamTrust & { readonly kind: 'verify' }): SecureContext {
  if (trust.caPem === null) return trust.systemRoots ? createSecureContext() : createSecureContext({ ca: [] })
  return createSecureContext({ ca: trust.systemRoots ? [...rootCertificates, trust.caPem] : trust.caPem })
}
