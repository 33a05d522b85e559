/**
 * Whether a connected client's certificate still verifies against a client-trust bundle
 * (SPEC §8: after a client-trust change, close inbound connections whose client certificate no
 * longer verifies). OpenSSL verified the chain at handshake time against the old bundle; this
 * re-checks it against the new one with node:crypto (checkIssued + verify), the way OpenSSL's
 * default verification would: a path from the leaf, through presented certificates, the
 * caller's intermediates or bundle certificates, up to a self-signed certificate that is in the
 * bundle — or, with allowPartialChain (Node's `allowPartialTrustChain`), up to any bundle
 * certificate. Every certificate on the path must be within its validity window.
 *
 * What Node exposes (measured on Node 24.21): on the SERVER side getPeerCertificate(true) and
 * getPeerX509Certificate() return the client's leaf only, never the intermediates it sent. A
 * client that chains through an intermediate that is neither in the bundle nor passed as
 * `intermediates` therefore cannot be proven and counts as not verifying: closing it costs one
 * reconnect, on which OpenSSL verifies it against the new bundle properly. Erring the other way
 * would keep a client whose trust was removed.
 */
import { X509Certificate } from 'node:crypto'
import type { TLSSocket } from 'node:tls'
import type { TrustBundle } from './types.ts'

export interface VerifyOptions {
  /** Extra certificates to build the path through (e.g. known client intermediates). */
  readonly intermediates?: readonly X509Certificate[]
  /** Accept a path that ends at any bundle certificate, not only a self-signed one. */
  readonly allowPartialChain?: boolean
}

const MAX_DEPTH = 10

/** peerChain: leaf first, then any certificates the client presented (see peerChainOf). */
export function verifiesAgainst (peerChain: readonly X509Certificate[], bundle: TrustBundle, now: Date, options: VerifyOptions = {}): boolean {
  const leaf = peerChain[0]
  if (leaf === undefined) return false
  const time = now.getTime()
  const current = (cert: X509Certificate): boolean => cert.validFromDate.getTime() <= time && time <= cert.validToDate.getTime()
  const inBundle = (cert: X509Certificate): boolean => bundle.certs.some((anchor) => anchor.fingerprint256 === cert.fingerprint256)
  const pool = [...peerChain.slice(1), ...(options.intermediates ?? []), ...bundle.certs].filter((cert) => cert.ca && current(cert))
  // Depth-first over candidate issuers: names can repeat (a cross-signed or impostor CA).
  const walk = (cert: X509Certificate, depth: number, path: ReadonlySet<string>): boolean => {
    if (!current(cert)) return false
    const selfSigned = cert.checkIssued(cert) && cert.verify(cert.publicKey)
    if (inBundle(cert) && (selfSigned || options.allowPartialChain === true)) return true
    if (selfSigned || depth >= MAX_DEPTH) return false
    for (const issuer of pool) {
      if (path.has(issuer.fingerprint256) || !cert.checkIssued(issuer) || !cert.verify(issuer.publicKey)) continue
      if (walk(issuer, depth + 1, new Set([...path, issuer.fingerprint256]))) return true
    }
    return false
  }
  return walk(leaf, 0, new Set([leaf.fingerprint256]))
}

/**
 * The peer's certificates as Node exposes them, leaf first, from the
 * getPeerCertificate(true).issuerCertificate links (DER → X509Certificate). Uses
 * getPeerCertificate rather than getPeerX509Certificate: on the client side of a connection
 * Node 24 returns the peer certificate from getPeerX509Certificate() once, and nothing from
 * either method afterwards.
 */
export function peerChainOf (socket: TLSSocket): X509Certificate[] {
  const chain: X509Certificate[] = []
  const seen = new Set<string>()
  let cert = socket.getPeerCertificate(true) as { raw?: Buffer, fingerprint256?: string, issuerCertificate?: unknown } | null
  while (cert !== null && cert.raw !== undefined && chain.length < MAX_DEPTH) {
    const fingerprint = cert.fingerprint256 ?? ''
    if (seen.has(fingerprint)) break
    seen.add(fingerprint)
    chain.push(new X509Certificate(cert.raw))
    cert = (cert.issuerCertificate ?? null) as typeof cert
  }
  return chain
}
