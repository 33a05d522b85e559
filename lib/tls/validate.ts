/**
 * Validation of TLS material before anything changes (SPEC §8). Pure: the clock is an argument.
 * Parsing and signature checks are Node's (OpenSSL through node:crypto `X509Certificate`,
 * `createPrivateKey`, `checkPrivateKey`, `checkIssued`, `verify`); this file only splits PEM text
 * into blocks, which is text, not ASN.1.
 *
 * Order of checks, so that one input has one reason: PEM structure (parse) → at least one
 * certificate (no_certificate / empty_bundle) → private key (parse) → key matches the leaf
 * (key_mismatch) → each certificate issued and signed by the next one (chain_invalid) → every
 * validity window contains now (expired / not_yet_valid). Details are one lower-case clause that
 * names the certificate by position and subject; they never contain key material.
 */
import { X509Certificate, createHash, createPrivateKey, type KeyObject } from 'node:crypto'
import type { RejectionReason, ServerIdentity, TrustBundle, Validated } from './types.ts'

/** sha256 (hex) over the length-prefixed parts, so ['ab','c'] and ['a','bc'] differ. */
export function fingerprintOf (parts: readonly (string | Uint8Array)[]): string {
  const hash = createHash('sha256')
  for (const part of parts) {
    const bytes = typeof part === 'string' ? Buffer.from(part) : part
    const length = Buffer.allocUnsafe(8)
    length.writeBigUInt64BE(BigInt(bytes.length))
    hash.update(length).update(bytes)
  }
  return hash.digest('hex')
}

export function validateServerIdentity (certPem: string, keyPem: string, now: Date): Validated<ServerIdentity> {
  const certs = parseCertificates(certPem, 'certificate file', false)
  if (!certs.ok) return certs
  const chain = certs.value
  const leaf = chain[0]
  if (leaf === undefined) {
    return reject('no_certificate', certPem.trim() === '' ? 'certificate file is empty' : 'certificate file contains no certificate block')
  }
  const key = parsePrivateKey(keyPem)
  if (!key.ok) return key
  let matches: boolean
  try {
    matches = leaf.checkPrivateKey(key.value)
  } catch {
    matches = false
  }
  if (!matches) return reject('key_mismatch', `private key does not match the leaf certificate ${describe(leaf, 0)}`)
  const linked = checkChain(chain)
  if (!linked.ok) return linked
  const current = checkValidity(chain, now)
  if (!current.ok) return current
  return {
    ok: true,
    value: { certPem, keyPem, chain, notAfter: earliestNotAfter(chain), fingerprint: fingerprintOf([certPem, keyPem]), generated: false },
  }
}

export function validateTrustBundle (pem: string, now: Date): Validated<TrustBundle> {
  if (pem.trim() === '') return reject('empty_bundle', 'bundle is empty')
  const certs = parseCertificates(pem, 'bundle', true)
  if (!certs.ok) return certs
  if (certs.value.length === 0) return reject('empty_bundle', 'bundle contains no certificate block')
  const current = checkValidity(certs.value, now)
  if (!current.ok) return current
  return { ok: true, value: { pem, certs: certs.value, notAfter: earliestNotAfter(certs.value), fingerprint: fingerprintOf([pem]) } }
}

/** The earliest notAfter among the certificates (the first one to expire). */
function earliestNotAfter (certs: readonly X509Certificate[]): Date {
  let earliest = Infinity
  for (const cert of certs) earliest = Math.min(earliest, cert.validToDate.getTime())
  return new Date(earliest)
}

/** "1 (CN=a.example)": position (1-based, leaf first) and subject on one line. */
export function describe (cert: X509Certificate, index: number): string {
  return `${index + 1} (${cert.subject.replace(/\n/g, ', ')})`
}

interface PemBlock {
  readonly label: string
  readonly text: string
}

const BEGIN = '-----BEGIN '
const DASHES = '-----'

/**
 * Splits PEM text into blocks. Text outside blocks is allowed (OpenSSL skips it too, and
 * operators put comments there); a BEGIN without its END is not.
 */
function splitPem (text: string, what: string): Validated<PemBlock[]> {
  const blocks: PemBlock[] = []
  let at = text.indexOf(BEGIN)
  while (at >= 0) {
    const labelEnd = text.indexOf(DASHES, at + BEGIN.length)
    const newline = text.indexOf('\n', at)
    if (labelEnd < 0 || (newline >= 0 && labelEnd > newline)) return reject('parse', `${what} has a malformed pem begin line`)
    const label = text.slice(at + BEGIN.length, labelEnd)
    const end = `-----END ${label}-----`
    const endAt = text.indexOf(end, labelEnd)
    if (endAt < 0) return reject('parse', `${what} has a pem block "${label.toLowerCase()}" without its end line`)
    blocks.push({ label, text: text.slice(at, endAt + end.length) + '\n' })
    at = text.indexOf(BEGIN, endAt + end.length)
  }
  if (blocks.length === 0 && text.trim() !== '') return reject('parse', `${what} is not pem: no "-----BEGIN" line found`)
  return { ok: true, value: blocks }
}

/**
 * Every CERTIFICATE block, parsed. In a bundle every block must be a certificate; in a
 * certificate file other blocks (a key in a combined file) are ignored, the key comes from the
 * key file.
 */
function parseCertificates (text: string, what: string, strict: boolean): Validated<X509Certificate[]> {
  const blocks = splitPem(text, what)
  if (!blocks.ok) return blocks
  const certs: X509Certificate[] = []
  for (const [index, block] of blocks.value.entries()) {
    if (block.label !== 'CERTIFICATE') {
      if (strict) return reject('parse', `${what} entry ${index + 1} is a "${block.label.toLowerCase()}" block, not a certificate`)
      continue
    }
    try {
      certs.push(new X509Certificate(block.text))
    } catch (err) {
      return reject('parse', `${what} entry ${index + 1} is not a valid certificate: ${opensslMessage(err)}`)
    }
  }
  return { ok: true, value: certs }
}

function parsePrivateKey (text: string): Validated<KeyObject> {
  if (text.trim() === '') return reject('parse', 'private key file is empty')
  const blocks = splitPem(text, 'private key file')
  if (!blocks.ok) return blocks
  if (blocks.value.some((block) => block.label.includes('ENCRYPTED')) || text.includes('Proc-Type: 4,ENCRYPTED')) {
    return reject('parse', 'private key is encrypted; mount an unencrypted key (the router takes no passphrase)')
  }
  try {
    const key = createPrivateKey(text)
    return { ok: true, value: key }
  } catch (err) {
    return reject('parse', `private key file does not hold a readable private key: ${opensslMessage(err)}`)
  }
}

/** Each certificate is issued (names, key identifiers, key usage) and signed by the next one. */
function checkChain (chain: readonly X509Certificate[]): Validated<true> {
  for (let i = 0; i + 1 < chain.length; i++) {
    const child = chain[i] as X509Certificate
    const parent = chain[i + 1] as X509Certificate
    if (!parent.ca) return reject('chain_invalid', `certificate ${describe(parent, i + 1)} is not a ca but follows certificate ${describe(child, i)} in the chain`)
    if (!child.checkIssued(parent) || !child.verify(parent.publicKey)) {
      return reject('chain_invalid', `certificate ${describe(child, i)} was not issued by the next certificate ${describe(parent, i + 1)}; put the chain in order leaf, intermediates, root`)
    }
  }
  return { ok: true, value: true }
}

function checkValidity (certs: readonly X509Certificate[], now: Date): Validated<true> {
  const time = now.getTime()
  for (const [index, cert] of certs.entries()) {
    if (cert.validToDate.getTime() < time) return reject('expired', `certificate ${describe(cert, index)} expired at ${cert.validToDate.toISOString()}`)
    if (cert.validFromDate.getTime() > time) return reject('not_yet_valid', `certificate ${describe(cert, index)} is not valid before ${cert.validFromDate.toISOString()}`)
  }
  return { ok: true, value: true }
}

function opensslMessage (err: unknown): string {
  const message = err instanceof Error ? err.message : String(err)
  // "error:0480006C:PEM routines::no start line" → "no start line"
  const last = message.lastIndexOf('::')
  return (last >= 0 ? message.slice(last + 2) : message).toLowerCase()
}

function reject (reason: RejectionReason, detail: string): { ok: false, reason: RejectionReason, detail: string } {
  return { ok: false, reason, detail }
}
