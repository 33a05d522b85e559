// SPEC §8 "Connections": after a client-trust change the router closes inbound connections
// whose client certificate no longer verifies against the new bundle. verifiesAgainst decides
// that for a presented chain (leaf first); table-driven over bundles before and after rotation.
import t from 'tap'
import type { X509Certificate } from 'node:crypto'
import { verifiesAgainst, type VerifyOptions } from '../../lib/tls/client-cert.ts'
import { validateTrustBundle } from '../../lib/tls/validate.ts'
import type { TrustBundle } from '../../lib/tls/types.ts'
import { createCa, createIntermediate, createLeaf, daysFromNow } from '../fixtures/certs.ts'

const now = new Date()
const oldCa = await createCa({ name: 'pylon ca 2025' })
const newCa = await createCa({ name: 'pylon ca 2026' })
const issuing = await createIntermediate(oldCa, { name: 'pylon issuing ca' })
const strangerCa = await createCa({ name: 'stranger ca' })
const impostorIssuing = await createIntermediate(strangerCa, { name: 'pylon issuing ca' })

const direct = await createLeaf(oldCa, { dnsNames: ['pylon-a'], clientAuth: true })
const viaIssuing = await createLeaf(issuing, { dnsNames: ['pylon-b'], clientAuth: true })
const rotated = await createLeaf(newCa, { dnsNames: ['pylon-c'], clientAuth: true })
const expired = await createLeaf(oldCa, { dnsNames: ['pylon-d'], clientAuth: true, notBefore: daysFromNow(-10), notAfter: daysFromNow(-1) })
const stranger = await createLeaf(strangerCa, { dnsNames: ['pylon-e'], clientAuth: true })
const selfSigned = await createCa({ name: 'pylon-f' })

function bundle (...pems: string[]): TrustBundle {
  const result = validateTrustBundle(pems.join(''), now)
  if (!result.ok) throw new Error(result.detail)
  return result.value
}

const oldOnly = bundle(oldCa.certPem)
const overlap = bundle(oldCa.certPem, newCa.certPem)
const newOnly = bundle(newCa.certPem)
const pinnedIssuing = bundle(issuing.certPem)

interface Case {
  readonly name: string
  readonly chain: readonly X509Certificate[]
  readonly bundle: TrustBundle
  readonly verifies: boolean
  readonly at?: Date
  readonly options?: VerifyOptions
}

const cases: Case[] = [
  { name: 'a client issued by a ca in the bundle still verifies', chain: [direct.x509], bundle: oldOnly, verifies: true },
  { name: 'a client issued through an intermediate it presents verifies against the root', chain: [viaIssuing.x509, issuing.x509], bundle: oldOnly, verifies: true },
  { name: 'a client whose chain ends in the root it presents verifies when that root is in the bundle', chain: [viaIssuing.x509, issuing.x509, oldCa.x509], bundle: oldOnly, verifies: true },
  { name: 'a client does not verify against a bundle that holds only its intermediate, as in openssl', chain: [viaIssuing.x509, issuing.x509], bundle: pinnedIssuing, verifies: false },
  { name: 'a client verifies against a bundle that pins its intermediate when partial chains are allowed', chain: [viaIssuing.x509], bundle: pinnedIssuing, verifies: true, options: { allowPartialChain: true } },
  { name: 'a client presenting only its leaf verifies when the bundle holds its intermediate and root', chain: [viaIssuing.x509], bundle: bundle(issuing.certPem, oldCa.certPem), verifies: true },
  { name: 'a client presenting only its leaf through an unknown intermediate cannot be proven and does not verify', chain: [viaIssuing.x509], bundle: oldOnly, verifies: false },
  { name: 'a client presenting only its leaf verifies when the caller knows its intermediate', chain: [viaIssuing.x509], bundle: oldOnly, verifies: true, options: { intermediates: [issuing.x509] } },
  { name: 'both old and new clients verify during an overlapping ca rotation', chain: [direct.x509], bundle: overlap, verifies: true },
  { name: 'a new client verifies during an overlapping ca rotation', chain: [rotated.x509], bundle: overlap, verifies: true },
  { name: 'an old client no longer verifies once its ca is removed from the bundle', chain: [direct.x509], bundle: newOnly, verifies: false },
  { name: 'a client through an intermediate no longer verifies once its root is removed', chain: [viaIssuing.x509, issuing.x509, oldCa.x509], bundle: newOnly, verifies: false },
  { name: 'a client of a ca that was never trusted does not verify', chain: [stranger.x509], bundle: overlap, verifies: false },
  { name: 'a client presenting an impostor intermediate of the same name does not verify', chain: [viaIssuing.x509, impostorIssuing.x509], bundle: bundle(strangerCa.certPem), verifies: false },
  { name: 'a client presenting an impostor beside the real intermediate still verifies through the real one', chain: [viaIssuing.x509, impostorIssuing.x509, issuing.x509], bundle: oldOnly, verifies: true },
  { name: 'a client presenting a root that is not in the bundle does not verify', chain: [direct.x509, oldCa.x509], bundle: newOnly, verifies: false },
  { name: 'an expired client certificate does not verify', chain: [expired.x509], bundle: oldOnly, verifies: false },
  { name: 'a self-signed client certificate that is not in the bundle does not verify', chain: [selfSigned.x509], bundle: oldOnly, verifies: false },
  { name: 'a client does not verify once the bundle ca itself has expired', chain: [direct.x509], bundle: oldOnly, verifies: false, at: daysFromNow(31) },
  { name: 'an empty chain does not verify', chain: [], bundle: oldOnly, verifies: false },
]

for (const c of cases) {
  t.test(c.name, async (t) => {
    t.equal(verifiesAgainst(c.chain, c.bundle, c.at ?? now, c.options), c.verifies)
  })
}
