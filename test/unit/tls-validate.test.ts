// SPEC §8 "Validate before anything changes": each kind of bad TLS material is rejected with
// its reason code, and the detail names what was wrong without quoting key material. Pure
// rules, table-driven; certificates from the per-suite factory.
import t from 'tap'
import { createSecureContext } from 'node:tls'
import { createPrivateKey } from 'node:crypto'
import { validateServerIdentity, validateTrustBundle } from '../../lib/tls/validate.ts'
import type { RejectionReason } from '../../lib/tls/types.ts'
import { createCa, createIntermediate, createLeaf, daysFromNow } from '../fixtures/certs.ts'

const now = new Date()
const root = await createCa({ name: 'root ca' })
const intermediate = await createIntermediate(root, { name: 'intermediate ca' })
const otherIntermediate = await createIntermediate(root, { name: 'other intermediate ca' })
const expiredIntermediate = await createIntermediate(root, { name: 'expired intermediate ca', notBefore: daysFromNow(-30), notAfter: daysFromNow(-1) })
const leaf = await createLeaf(intermediate, { dnsNames: ['router.example'] })
const otherLeaf = await createLeaf(intermediate, { dnsNames: ['router.example'] })
const expiredLeaf = await createLeaf(intermediate, { dnsNames: ['router.example'], notBefore: daysFromNow(-10), notAfter: daysFromNow(-2) })
const futureLeaf = await createLeaf(intermediate, { dnsNames: ['router.example'], notBefore: daysFromNow(2), notAfter: daysFromNow(30) })
const underExpired = await createLeaf(expiredIntermediate, { dnsNames: ['router.example'] })
const wrongKeyLeaf = await createLeaf(intermediate, { dnsNames: ['router.example'], wrongKey: true })
const expiredCa = await createCa({ name: 'expired ca', notBefore: daysFromNow(-30), notAfter: daysFromNow(-1) })
const futureCa = await createCa({ name: 'future ca', notBefore: daysFromNow(1), notAfter: daysFromNow(30) })
const secondRoot = await createCa({ name: 'second root ca' })

const encryptedKey = createPrivateKey(leaf.keyPem).export({ format: 'pem', type: 'pkcs8', cipher: 'aes-256-cbc', passphrase: 'secret' }) as string
const corrupted = leaf.certPem.replace(/\n([A-Za-z0-9+/]{20})/, '\n!!!!bad-base64!!!!')

interface IdentityCase {
  readonly name: string
  readonly cert: string
  readonly key: string
  readonly reason: RejectionReason
  readonly detail: RegExp
}

const rejectedIdentities: IdentityCase[] = [
  { name: 'a certificate with the key of another certificate is rejected as key_mismatch', cert: leaf.chainPem, key: otherLeaf.keyPem, reason: 'key_mismatch', detail: /private key does not match the leaf certificate 1 \(CN=router\.example\)/ },
  { name: 'a certificate issued with a wrong key is rejected as key_mismatch', cert: wrongKeyLeaf.chainPem, key: wrongKeyLeaf.keyPem, reason: 'key_mismatch', detail: /does not match/ },
  { name: 'an expired leaf is rejected as expired', cert: expiredLeaf.chainPem, key: expiredLeaf.keyPem, reason: 'expired', detail: /certificate 1 \(CN=router\.example\) expired at \d{4}-/ },
  { name: 'an expired intermediate is rejected as expired and named', cert: underExpired.chainPem, key: underExpired.keyPem, reason: 'expired', detail: /certificate 2 \(CN=expired intermediate ca\) expired at/ },
  { name: 'a certificate that is not valid yet is rejected as not_yet_valid', cert: futureLeaf.chainPem, key: futureLeaf.keyPem, reason: 'not_yet_valid', detail: /is not valid before \d{4}-/ },
  { name: 'a chain with the wrong intermediate is rejected as chain_invalid', cert: leaf.certPem + otherIntermediate.certPem, key: leaf.keyPem, reason: 'chain_invalid', detail: /certificate 1 \(CN=router\.example\) was not issued by the next certificate 2 \(CN=other intermediate ca\)/ },
  { name: 'a chain in the wrong order is rejected as chain_invalid', cert: leaf.certPem + root.certPem + intermediate.certPem, key: leaf.keyPem, reason: 'chain_invalid', detail: /was not issued by/ },
  { name: 'a chain continued by a leaf instead of a ca is rejected as chain_invalid', cert: leaf.certPem + otherLeaf.certPem, key: leaf.keyPem, reason: 'chain_invalid', detail: /is not a ca/ },
  { name: 'an empty certificate file is rejected as no_certificate', cert: '', key: leaf.keyPem, reason: 'no_certificate', detail: /certificate file is empty/ },
  { name: 'a certificate file holding only a key is rejected as no_certificate', cert: leaf.keyPem, key: leaf.keyPem, reason: 'no_certificate', detail: /no certificate block/ },
  { name: 'a certificate file of junk is rejected as parse', cert: 'this is not a certificate\n', key: leaf.keyPem, reason: 'parse', detail: /certificate file is not pem/ },
  { name: 'a certificate block with broken base64 is rejected as parse', cert: corrupted, key: leaf.keyPem, reason: 'parse', detail: /certificate file entry 1 is not a valid certificate/ },
  { name: 'a certificate block without its end line is rejected as parse', cert: leaf.certPem.slice(0, 200), key: leaf.keyPem, reason: 'parse', detail: /without its end line/ },
  { name: 'an empty key file is rejected as parse', cert: leaf.chainPem, key: '', reason: 'parse', detail: /private key file is empty/ },
  { name: 'a key file of junk is rejected as parse', cert: leaf.chainPem, key: 'junk\n', reason: 'parse', detail: /private key file is not pem/ },
  { name: 'a certificate given as the key is rejected as parse', cert: leaf.chainPem, key: leaf.certPem, reason: 'parse', detail: /does not hold a readable private key/ },
  { name: 'an encrypted key is rejected as parse with the fix', cert: leaf.chainPem, key: encryptedKey, reason: 'parse', detail: /private key is encrypted; mount an unencrypted key/ },
]

for (const c of rejectedIdentities) {
  t.test(c.name, async (t) => {
    const result = validateServerIdentity(c.cert, c.key, now)
    if (result.ok) return t.fail('accepted')
    t.equal(result.reason, c.reason)
    t.match(result.detail, c.detail)
    t.equal(result.detail, result.detail.replace(/[A-Za-z0-9+/]{40,}/g, ''), 'no base64 from the inputs in the detail')
  })
}

t.test('a leaf with its intermediate is accepted and expires with the earliest certificate', async (t) => {
  const result = validateServerIdentity(leaf.chainPem, leaf.keyPem, now)
  if (!result.ok) return t.fail(result.detail)
  t.equal(result.value.chain.length, 2)
  t.equal(result.value.chain[0]?.subject, 'CN=router.example')
  const earliest = Math.min(leaf.x509.validToDate.getTime(), intermediate.x509.validToDate.getTime())
  t.equal(result.value.notAfter.getTime(), earliest)
  t.equal(result.value.generated, false)
  t.match(result.value.fingerprint, /^[0-9a-f]{64}$/)
})

t.test('a chain that includes its root is accepted', async (t) => {
  const result = validateServerIdentity(leaf.chainPem + root.certPem, leaf.keyPem, now)
  t.ok(result.ok)
})

t.test('comments around pem blocks are accepted, as openssl accepts them', async (t) => {
  const result = validateServerIdentity(`# issued by cert-manager\n${leaf.certPem}\n# intermediate\n${intermediate.certPem}`, `# key\n${leaf.keyPem}`, now)
  t.ok(result.ok)
})

t.test('validity is judged at the time given, not the wall clock', async (t) => {
  // The leaf alone: the intermediate's own window starts an hour ago.
  t.ok(validateServerIdentity(expiredLeaf.certPem, expiredLeaf.keyPem, daysFromNow(-5)).ok)
  t.ok(validateServerIdentity(futureLeaf.chainPem, futureLeaf.keyPem, daysFromNow(5)).ok)
  t.notOk(validateServerIdentity(leaf.chainPem, leaf.keyPem, daysFromNow(40)).ok)
})

interface BundleCase {
  readonly name: string
  readonly pem: string
  readonly reason: RejectionReason
  readonly detail: RegExp
}

const rejectedBundles: BundleCase[] = [
  { name: 'an empty trust bundle is rejected as empty_bundle', pem: '', reason: 'empty_bundle', detail: /bundle is empty/ },
  { name: 'a trust bundle of whitespace is rejected as empty_bundle', pem: '\n  \n', reason: 'empty_bundle', detail: /bundle is empty/ },
  { name: 'a junk trust bundle is rejected as parse', pem: 'not a bundle at all', reason: 'parse', detail: /bundle is not pem/ },
  { name: 'a trust bundle with one broken entry is rejected as parse', pem: root.certPem + corrupted, reason: 'parse', detail: /bundle entry 2 is not a valid certificate/ },
  { name: 'a trust bundle holding a private key is rejected as parse', pem: root.certPem + leaf.keyPem, reason: 'parse', detail: /bundle entry 2 is a "private key" block, not a certificate/ },
  { name: 'a trust bundle with an expired ca is rejected as expired', pem: root.certPem + expiredCa.certPem, reason: 'expired', detail: /certificate 2 \(CN=expired ca\) expired at/ },
  { name: 'a trust bundle with a ca that is not valid yet is rejected as not_yet_valid', pem: futureCa.certPem, reason: 'not_yet_valid', detail: /CN=future ca/ },
]

for (const c of rejectedBundles) {
  t.test(c.name, async (t) => {
    const result = validateTrustBundle(c.pem, now)
    if (result.ok) return t.fail('accepted')
    t.equal(result.reason, c.reason)
    t.match(result.detail, c.detail)
  })
}

t.test('a trust bundle of two cas is accepted and expires with the earlier one', async (t) => {
  const result = validateTrustBundle(root.certPem + secondRoot.certPem, now)
  if (!result.ok) return t.fail(result.detail)
  t.equal(result.value.certs.length, 2)
  t.equal(result.value.notAfter.getTime(), Math.min(root.x509.validToDate.getTime(), secondRoot.x509.validToDate.getTime()))
})

t.test('what validation accepts, node tls can serve', async (t) => {
  const result = validateServerIdentity(leaf.chainPem, leaf.keyPem, now)
  if (!result.ok) return t.fail(result.detail)
  t.doesNotThrow(() => createSecureContext({ cert: result.value.certPem, key: result.value.keyPem }))
})
