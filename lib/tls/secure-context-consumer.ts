/**
 * A TlsConsumer that turns TLS state into a Node SecureContext. build() runs
 * tls.createSecureContext on the candidate options (so key mismatches and unusable material
 * surface as a failed candidate before anything is swapped); commit() hands the built context
 * and its options to `apply` — e.g. `server.setSecureContext(options)`, or storing the context
 * for an SNICallback or a dialer.
 *
 * Session-ticket keys rotate on every build unless the caller sets them: a ticket issued under
 * the previous material cannot resume a session past a changed trust bundle (SPEC §8).
 * (`server.setSecureContext` keeps the server's previous `ticketKeys` when options carry none.)
 */
import { randomBytes } from 'node:crypto'
import { createSecureContext, type SecureContext, type SecureContextOptions } from 'node:tls'
import type { MaterialType, TlsConsumer, TlsState } from './types.ts'

export interface BuiltSecureContext {
  readonly context: SecureContext
  readonly options: SecureContextOptions
}

export interface SecureContextConsumerOptions {
  readonly name: string
  readonly dependsOn: readonly MaterialType[]
  /** The context options for a state; throw when the state cannot serve (e.g. no identity). */
  readonly buildOptions: (state: TlsState) => SecureContextOptions
  /** Swaps the built context in. Must not throw. */
  readonly apply: (built: BuiltSecureContext, state: TlsState, changed: MaterialType | null) => void
}

/** A SecureContext from options, with fresh session-ticket keys unless the options carry some. */
export function buildSecureContext (options: SecureContextOptions): BuiltSecureContext {
  const withTickets = options.ticketKeys === undefined ? { ...options, ticketKeys: randomBytes(48) } : options
  return { context: createSecureContext(withTickets), options: withTickets }
}

export function secureContextConsumer (options: SecureContextConsumerOptions): TlsConsumer<BuiltSecureContext> {
  return {
    name: options.name,
    dependsOn: options.dependsOn,
    build (state: TlsState): BuiltSecureContext {
      return buildSecureContext(options.buildOptions(state))
    },
    commit (candidate: BuiltSecureContext, state: TlsState, changed: MaterialType | null): void {
      options.apply(candidate, state, changed)
    },
  }
}

/**
 * The cipher suites of every router TLS server on Node (the front door, WebTransport over
 * HTTP/2; the QUIC port is TLS 1.3 only, in GnuTLS). TLS 1.2: ECDHE with an AEAD only
 * (AES-GCM, ChaCha20-Poly1305), Mozilla's "intermediate" profile without DHE (Node sets no DH
 * parameters, so DHE could not be negotiated anyway). Node's default list ends in OpenSSL's
 * `HIGH`, which adds the CBC suites with HMAC-SHA1/SHA-256/SHA-384 (the Lucky13 family of
 * padding oracles; SPEC §12). TLS 1.3: Node's three suites, unchanged. They must be listed:
 * a `ciphers` string without any TLS 1.3 suite caps the context at TLS 1.2 (Node's
 * configSecureContext).
 */
export const SERVER_CIPHERS = [
  'TLS_AES_256_GCM_SHA384', 'TLS_CHACHA20_POLY1305_SHA256', 'TLS_AES_128_GCM_SHA256',
  'ECDHE-ECDSA-AES128-GCM-SHA256', 'ECDHE-RSA-AES128-GCM-SHA256',
  'ECDHE-ECDSA-AES256-GCM-SHA384', 'ECDHE-RSA-AES256-GCM-SHA384',
  'ECDHE-ECDSA-CHACHA20-POLY1305', 'ECDHE-RSA-CHACHA20-POLY1305',
].join(':')

/**
 * Server-side context options for the active identity (TLS 1.2 or 1.3, SERVER_CIPHERS), plus
 * the client trust bundle as `ca` when withClientTrust (mTLS; requestCert/rejectUnauthorized
 * stay server options). Every build of a listener's context goes through here, the first one
 * and each hot reload, so the suites cannot drift between them.
 */
export function serverContextOptions (state: TlsState, options: { withClientTrust?: boolean } = {}): SecureContextOptions {
  const identity = state.serverIdentity
  if (identity === null) throw new Error('no server identity is active')
  const result: SecureContextOptions = { cert: identity.certPem, key: identity.keyPem, ciphers: SERVER_CIPHERS, minVersion: 'TLSv1.2' }
  if (options.withClientTrust === true) {
    if (state.clientTrust === null) throw new Error('client certificates are required but no client trust bundle is active')
    result.ca = state.clientTrust.pem
  }
  return result
}
