/**
 * The self-signed server identity used only when no cert/key is configured and the caller asks
 * for one (SPEC §8): ECDSA P-256, SANs = the given hosts (IP literals as IP SANs), valid for one
 * year from `now` (backdated a minute for clock skew). Built with @peculiar/x509 on Node's
 * WebCrypto, passed explicitly so that the library's global provider is never touched.
 */
import { webcrypto } from 'node:crypto'
import { isIP } from 'node:net'
import * as x509 from '@peculiar/x509'

const ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' }
const ONE_YEAR_MS = 365 * 24 * 60 * 60 * 1000

export interface GeneratedIdentity {
  readonly certPem: string
  readonly keyPem: string
}

export async function generateSelfSignedIdentity (hosts: readonly string[], now: Date): Promise<GeneratedIdentity> {
  if (hosts.length === 0) throw new Error('self-signed identity needs at least one host name')
  const crypto = webcrypto
  const keys = await crypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify'])
  const names = hosts.map((host) => ({ type: isIP(host) === 0 ? 'dns' as const : 'ip' as const, value: host }))
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: randomSerial(crypto),
    name: `CN=${escapeDn(hosts[0] ?? '')}`,
    notBefore: new Date(now.getTime() - 60_000),
    notAfter: new Date(now.getTime() + ONE_YEAR_MS),
    keys,
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(names),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey, false, crypto),
    ],
  }, crypto)
  const pkcs8 = await crypto.subtle.exportKey('pkcs8', keys.privateKey)
  return { certPem: cert.toString('pem') + '\n', keyPem: toPem('PRIVATE KEY', Buffer.from(pkcs8)) }
}

function randomSerial (crypto: webcrypto.Crypto): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16))
  bytes[0] = (bytes[0] ?? 0) & 0x7f // positive INTEGER
  return Buffer.from(bytes).toString('hex')
}

function escapeDn (value: string): string {
  return value.replace(/[,+"\\<>;=]/g, (c) => '\\' + c)
}

function toPem (label: string, der: Buffer): string {
  const base64 = der.toString('base64')
  const lines = []
  for (let i = 0; i < base64.length; i += 64) lines.push(base64.slice(i, i + 64))
  return `-----BEGIN ${label}-----\n${lines.join('\n')}\n-----END ${label}-----\n`
}
