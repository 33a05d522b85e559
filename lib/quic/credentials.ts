/**
 * TLS material for the engine, built from PEM once per generation (SPEC §8 hot reload: build new
 * credentials, give them to new connections, release the old ones). The addon keeps one
 * reference for this handle and one per connection using it, so released material is freed when
 * its last connection ends, and open connections never notice a reload.
 *
 * Building fails (throws) when GnuTLS cannot load the material, so a TLS manager candidate that
 * would break handshakes is rejected before it is committed.
 */
import { loadNative } from './native.ts'
import type { UpstreamTrust } from '../tls/trust-policy.ts'

const registry = new FinalizationRegistry<number>((id) => { loadNative().credRelease(id) })

abstract class Credentials {
  /** The addon's handle. */
  readonly id: number
  #released = false

  protected constructor (id: number) {
    this.id = id
    registry.register(this, id, this)
  }

  get released (): boolean {
    return this.#released
  }

  /** Lets go of the material; connections using it keep it until they end. Idempotent. */
  release (): void {
    if (this.#released) return
    this.#released = true
    registry.unregister(this)
    loadNative().credRelease(this.id)
  }
}

export interface ServerCredentialsOptions {
  /** Leaf first, then intermediates. */
  readonly certPem: string
  readonly keyPem: string
  /** When set, clients must present a certificate that verifies against this bundle (mTLS). */
  readonly clientCaPem?: string | null
}

/** A server identity, optionally requiring client certificates. */
export class ServerCredentials extends Credentials {
  /** Tells the two kinds apart for the type checker (the addon refuses the wrong one too). */
  readonly side = 'server'

  static create (options: ServerCredentialsOptions): ServerCredentials {
    return new ServerCredentials(loadNative().credServer(options.certPem, options.keyPem, options.clientCaPem ?? null))
  }
}

export interface ClientCredentialsOptions {
  /** Trusted CA bundle. With verify and no bundle, nothing is trusted (every handshake fails). */
  readonly caPem: string | null
  /** Verify the server's chain and name (the SNI). */
  readonly verify: boolean
  /** A client certificate to present (mTLS), with its key. */
  readonly certPem?: string | null
  readonly keyPem?: string | null
}

/** How a client verifies servers (and what it presents, if anything). */
export class ClientCredentials extends Credentials {
  readonly side = 'client'

  static create (options: ClientCredentialsOptions): ClientCredentials {
    return new ClientCredentials(loadNative().credClient(options.caPem, options.verify, options.certPem ?? null, options.keyPem ?? null))
  }
}

/** The engine's credentials for a tunnel leg's upstream trust (lib/tls/trust-policy.ts decides it). */
export function clientCredentialsFor (trust: UpstreamTrust): ClientCredentials {
  switch (trust.kind) {
    case 'unverified': return ClientCredentials.create({ caPem: null, verify: false })
    case 'verify': return ClientCredentials.create({ caPem: trust.caPem, verify: true })
    case 'cleartext': throw new Error('a QUIC leg always dials with TLS')
    default: {
      const never: never = trust
      return never
    }
  }
}
