/**
 * The TLS material model (SPEC §8) shared by every listener and dialer: three material types,
 * the reason codes a rejected generation is reported with, the immutable state the manager
 * publishes, and the consumer contract through which runtime objects (SecureContexts, QUIC
 * configs, agents) are rebuilt as candidates and committed together.
 */
import type { X509Certificate } from 'node:crypto'

export const MATERIAL_TYPES = ['server_identity', 'upstream_trust', 'client_trust'] as const
export type MaterialType = typeof MATERIAL_TYPES[number]

export const REJECTION_REASONS = ['too_large', 'unreadable', 'parse', 'no_certificate', 'key_mismatch', 'chain_invalid', 'expired', 'not_yet_valid', 'empty_bundle'] as const
export type RejectionReason = typeof REJECTION_REASONS[number]

/** A validated certificate chain and its private key. */
export interface ServerIdentity {
  /** The certificate file as read: leaf first, then intermediates (and the root if supplied). */
  readonly certPem: string
  readonly keyPem: string
  /** Parsed chain, leaf first. */
  readonly chain: readonly X509Certificate[]
  /** The earliest notAfter in the chain: when clients start rejecting it. */
  readonly notAfter: Date
  /** sha256 (hex) of the bytes read; for a generated identity, of the generated PEMs. */
  readonly fingerprint: string
  /** True for the self-signed identity generated when none is configured. */
  readonly generated: boolean
}

/** A validated CA bundle. */
export interface TrustBundle {
  readonly pem: string
  readonly certs: readonly X509Certificate[]
  /** The earliest notAfter among the bundle's certificates. */
  readonly notAfter: Date
  /** sha256 (hex) of the bytes read. */
  readonly fingerprint: string
}

export interface TlsState {
  readonly serverIdentity: ServerIdentity | null
  readonly upstreamTrust: TrustBundle | null
  readonly clientTrust: TrustBundle | null
  /** increments per committed change of that type */
  readonly generations: Readonly<Record<MaterialType, number>>
}

/**
 * Something built from TLS material (a SecureContext, a QUIC config, an agent...).
 * build() must not change anything observable: it may be thrown away when another consumer of
 * the same generation fails to build. commit() swaps the candidate in and must not throw.
 * `changed` is null for the first commit (when the consumer is added).
 */
export interface TlsConsumer<C> {
  readonly name: string
  readonly dependsOn: readonly MaterialType[]
  build (state: TlsState): C
  commit (candidate: C, state: TlsState, changed: MaterialType | null): void
}

export type Validated<T> =
  | { readonly ok: true, readonly value: T }
  | { readonly ok: false, readonly reason: RejectionReason, readonly detail: string }

/** Human name of a material type for messages ("server identity"). */
export function describeMaterial (type: MaterialType): string {
  switch (type) {
    case 'server_identity': return 'server identity'
    case 'upstream_trust': return 'upstream trust bundle'
    case 'client_trust': return 'client trust bundle'
    default: {
      const never: never = type
      return never
    }
  }
}
