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

export function secureContextConsumer (options: SecureContextConsumerOptions): TlsConsumer<BuiltSecureContext> {
  return {
    name: options.name,
    dependsOn: options.dependsOn,
    build (state: TlsState): BuiltSecureContext {
      const built = options.buildOptions(state)
      const withTickets = built.ticketKeys === undefined ? { ...built, ticketKeys: randomBytes(48) } : built
      return { context: createSecureContext(withTickets), options: withTickets }
    },
    commit (candidate: BuiltSecureContext, state: TlsState, changed: MaterialType | null): void {
      options.apply(candidate, state, changed)
    },
  }
}

/**
 * Server-side context options for the active identity, plus the client trust bundle as `ca`
 * when withClientTrust (mTLS; requestCert/rejectUnauthorized stay server options).
 */
export function serverContextOptions (state: TlsState, options: { withClientTrust?: boolean } = {}): SecureContextOptions {
  const identity = state.serverIdentity
  if (identity === null) throw new Error('no server identity is active')
  const result: SecureContextOptions = { cert: identity.certPem, key: identity.keyPem }
  if (options.withClientTrust === true) {
    if (state.clientTrust === null) throw new Error('client certificates are required but no client trust bundle is active')
    result.ca = state.clientTrust.pem
  }
  return result
}
