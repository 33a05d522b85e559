// SPEC §8: every kind of bad TLS material, swapped into a mounted
// Secret the way kubelet swaps it, is rejected with its reason; the router keeps serving the
// last-known-good material, and the rejection is counted once. The same material at start-up
// stops the router with a message naming the material, the path and the reason.
// Poll-only managers driven by reloadNow(), so each case is deterministic.
import t, { type Test } from 'tap'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Registry } from 'prom-client'
import { TlsMaterialManager, TlsStartupError, type TlsManagerOptions } from '../../lib/tls/manager.ts'
import { createTlsMetrics, type TlsMetrics } from '../../lib/tls/metrics.ts'
import { MATERIAL_MAX_BYTES } from '../../lib/tls/read.ts'
import type { MaterialType, RejectionReason } from '../../lib/tls/types.ts'
import { ProjectedVolume, type Files } from '../fixtures/projected-volume.ts'
import { createCa, createIntermediate, createLeaf, daysFromNow } from '../fixtures/certs.ts'
import { createLogSink, type LogSink } from '../fixtures/log-sink.ts'

const root = await createCa({ name: 'bad input root' })
const intermediate = await createIntermediate(root, { name: 'bad input intermediate' })
const otherIntermediate = await createIntermediate(root, { name: 'unrelated intermediate' })
const expiredIntermediate = await createIntermediate(root, { name: 'expired intermediate', notBefore: daysFromNow(-20), notAfter: daysFromNow(-1) })
const good = await createLeaf(intermediate, { dnsNames: ['router.example'] })
const next = await createLeaf(intermediate, { dnsNames: ['router.example'] })
const expiredLeaf = await createLeaf(intermediate, { dnsNames: ['router.example'], notBefore: daysFromNow(-5), notAfter: daysFromNow(-1) })
const underExpired = await createLeaf(expiredIntermediate, { dnsNames: ['router.example'] })
const futureLeaf = await createLeaf(intermediate, { dnsNames: ['router.example'], notBefore: daysFromNow(1) })

const identity = (cert: string, key: string): Files => ({ 'tls.crt': cert, 'tls.key': key })
const oversized = good.chainPem + '#' + ' '.repeat(MATERIAL_MAX_BYTES + 1 - Buffer.byteLength(good.chainPem) - 2) + '\n'

interface Harness {
  readonly volume: ProjectedVolume
  readonly manager: TlsMaterialManager
  readonly metrics: TlsMetrics
  readonly log: LogSink
}

async function tempDir (t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'stargate-tls-bad-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

function baseOptions (metrics: TlsMetrics, log: LogSink): TlsManagerOptions {
  return { serverIdentity: null, upstreamTrust: null, clientTrust: null, debounceMs: 10, pollMs: 0, watch: false, metrics, logger: log.logger }
}

async function start (t: Test, type: MaterialType, files: Files): Promise<Harness> {
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'mount'), files)
  const metrics = createTlsMetrics(new Registry())
  const log = createLogSink()
  const options = baseOptions(metrics, log)
  const manager = await TlsMaterialManager.start(type === 'server_identity'
    ? { ...options, serverIdentity: { certPath: volume.path('tls.crt'), keyPath: volume.path('tls.key') } }
    : { ...options, [type === 'upstream_trust' ? 'upstreamTrust' : 'clientTrust']: { path: volume.path('ca.crt') } })
  t.teardown(() => manager.close())
  return { volume, manager, metrics, log }
}

async function rejections (metrics: TlsMetrics, type: MaterialType, reason: RejectionReason): Promise<number> {
  const values = (await metrics.tlsReloadRejections.get()).values
  return values.find((v) => v.labels.material_type === type && v.labels.reason === reason)?.value ?? 0
}

async function reloads (metrics: TlsMetrics, type: MaterialType, result: 'success' | 'rejected'): Promise<number> {
  const values = (await metrics.tlsReloads.get()).values
  return values.find((v) => v.labels.material_type === type && v.labels.result === result)?.value ?? -1
}

interface BadInput {
  readonly name: string
  readonly type: MaterialType
  readonly files: Files
  readonly reason: RejectionReason
  readonly detail: RegExp
}

const badInputs: BadInput[] = [
  { name: 'a certificate with a key that does not match', type: 'server_identity', files: identity(next.chainPem, good.keyPem), reason: 'key_mismatch', detail: /private key does not match/ },
  { name: 'an expired leaf', type: 'server_identity', files: identity(expiredLeaf.chainPem, expiredLeaf.keyPem), reason: 'expired', detail: /certificate 1 \(CN=router\.example\) expired at/ },
  { name: 'an expired intermediate', type: 'server_identity', files: identity(underExpired.chainPem, underExpired.keyPem), reason: 'expired', detail: /CN=expired intermediate\) expired at/ },
  { name: 'a certificate that is not valid yet', type: 'server_identity', files: identity(futureLeaf.chainPem, futureLeaf.keyPem), reason: 'not_yet_valid', detail: /is not valid before/ },
  { name: 'a chain with the wrong intermediate', type: 'server_identity', files: identity(next.certPem + otherIntermediate.certPem, next.keyPem), reason: 'chain_invalid', detail: /was not issued by the next certificate 2 \(CN=unrelated intermediate\)/ },
  { name: 'a certificate file of 1 MiB + 1 byte', type: 'server_identity', files: identity(oversized, good.keyPem), reason: 'too_large', detail: /is 1048577 bytes, over the 1048576-byte limit/ },
  { name: 'an empty certificate file', type: 'server_identity', files: identity('', good.keyPem), reason: 'no_certificate', detail: /certificate file is empty/ },
  { name: 'an empty key file', type: 'server_identity', files: identity(good.chainPem, ''), reason: 'parse', detail: /private key file is empty/ },
  { name: 'a junk certificate', type: 'server_identity', files: identity('-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n', good.keyPem), reason: 'parse', detail: /not a valid certificate/ },
  { name: 'a secret without the key file', type: 'server_identity', files: { 'tls.crt': good.chainPem }, reason: 'unreadable', detail: /tls\.key does not exist in generation/ },
  { name: 'an empty upstream trust bundle', type: 'upstream_trust', files: { 'ca.crt': '' }, reason: 'empty_bundle', detail: /bundle is empty/ },
  { name: 'a junk upstream trust bundle', type: 'upstream_trust', files: { 'ca.crt': 'not pem\n' }, reason: 'parse', detail: /bundle is not pem/ },
  { name: 'an empty client trust bundle', type: 'client_trust', files: { 'ca.crt': '\n' }, reason: 'empty_bundle', detail: /bundle is empty/ },
  { name: 'a client trust bundle with a broken entry', type: 'client_trust', files: { 'ca.crt': root.certPem + '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n' }, reason: 'parse', detail: /bundle entry 2 is not a valid certificate/ },
]

const goodFiles: Record<MaterialType, Files> = {
  server_identity: identity(good.chainPem, good.keyPem),
  upstream_trust: { 'ca.crt': root.certPem },
  client_trust: { 'ca.crt': root.certPem },
}

for (const bad of badInputs) {
  t.test(`swapping in ${bad.name} keeps the active material and counts one ${bad.reason} rejection`, async (t) => {
    const { volume, manager, metrics, log } = await start(t, bad.type, goodFiles[bad.type])
    const before = manager.state()
    await volume.swap(bad.files)
    await manager.reloadNow()
    await manager.reloadNow()
    t.equal(manager.state(), before, 'the published state is unchanged')
    t.equal(await rejections(metrics, bad.type, bad.reason), 1)
    t.equal(await reloads(metrics, bad.type, 'rejected'), 1)
    t.equal(await reloads(metrics, bad.type, 'success'), 0)
    const warnings = log.lines().filter((line) => line.reason === bad.reason)
    t.equal(warnings.length, 1, 'logged once')
    t.match(warnings[0]?.detail, bad.detail)
    t.match(warnings[0]?.msg, new RegExp(`^rejected new .* \\(${bad.reason}\\): .*; keeping the active material$`))
    t.notMatch(log.text(), good.keyPem.split('\n')[1] ?? 'unreachable', 'no key bytes in the log')
  })

  t.test(`the router does not start with ${bad.name}`, async (t) => {
    const volume = await ProjectedVolume.create(join(await tempDir(t), 'mount'), bad.files)
    const metrics = createTlsMetrics(new Registry())
    const options = baseOptions(metrics, createLogSink())
    const path = bad.type === 'server_identity' ? `${volume.path('tls.crt')} and ${volume.path('tls.key')}` : volume.path('ca.crt')
    const started = TlsMaterialManager.start(bad.type === 'server_identity'
      ? { ...options, serverIdentity: { certPath: volume.path('tls.crt'), keyPath: volume.path('tls.key') } }
      : { ...options, [bad.type === 'upstream_trust' ? 'upstreamTrust' : 'clientTrust']: { path: volume.path('ca.crt') } })
    const err = await started.then(async (manager) => { await manager.close(); return null }, (e: unknown) => e)
    if (!(err instanceof TlsStartupError)) return t.fail(`expected a TlsStartupError, got ${String(err)}`)
    t.equal(err.materialType, bad.type)
    t.equal(err.reason, bad.reason)
    t.equal(err.path, path)
    t.match(err.message, `cannot load the ${bad.type.replace('_', ' ').replace('trust', 'trust bundle')} from ${path}: ${bad.reason}: `)
    t.match(err.message, bad.detail)
  })
}

t.test('the router does not start when the mount directory is missing, and says so', async (t) => {
  const dir = join(await tempDir(t), 'never-mounted')
  const options = baseOptions(createTlsMetrics(new Registry()), createLogSink())
  await t.rejects(TlsMaterialManager.start({ ...options, serverIdentity: { certPath: join(dir, 'tls.crt'), keyPath: join(dir, 'tls.key') } }), {
    name: 'TlsStartupError',
    reason: 'unreadable',
    message: `cannot load the server identity from ${dir}/tls.crt and ${dir}/tls.key: unreadable: mount directory ${dir} does not exist (is the secret mounted there, as a directory and not with subPath?)`,
  })
})

t.test('a generation deleted while the router reads it keeps the active material without crashing', async (t) => {
  const { volume, manager, metrics } = await start(t, 'server_identity', goodFiles.server_identity)
  const before = manager.state()
  await volume.deleteGeneration()
  await manager.reloadNow()
  t.equal(manager.state(), before)
  t.equal(await rejections(metrics, 'server_identity', 'unreadable'), 1)
  await volume.swap(identity(next.chainPem, next.keyPem), { deleteOld: 'never' })
  await manager.reloadNow()
  t.equal(manager.state().serverIdentity?.certPem, next.chainPem, 'the next good generation is taken')
})

t.test('a file of exactly 1 MiB is accepted as a new generation', async (t) => {
  const { volume, manager, metrics } = await start(t, 'server_identity', goodFiles.server_identity)
  const padded = next.chainPem + '#' + ' '.repeat(MATERIAL_MAX_BYTES - Buffer.byteLength(next.chainPem) - 2) + '\n'
  await volume.swap(identity(padded, next.keyPem))
  await manager.reloadNow()
  t.equal(manager.state().serverIdentity?.chain[0]?.fingerprint256, next.x509.fingerprint256)
  t.equal(await reloads(metrics, 'server_identity', 'success'), 1)
})

t.test('a swap in the middle of a reload never pairs a certificate with the key of the next generation', async (t) => {
  const third = await createLeaf(intermediate, { dnsNames: ['router.example'] })
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'mount'), goodFiles.server_identity)
  const metrics = createTlsMetrics(new Registry())
  let swapMidRead = false
  const manager = await TlsMaterialManager.start({
    ...baseOptions(metrics, createLogSink()),
    serverIdentity: { certPath: volume.path('tls.crt'), keyPath: volume.path('tls.key') },
    read: {
      afterFileRead: async (path) => {
        // Generation N+1's certificate has been read; kubelet now publishes N+2.
        if (swapMidRead && path.endsWith('tls.crt')) {
          swapMidRead = false
          await volume.swap(identity(third.chainPem, third.keyPem))
        }
      },
    },
  })
  t.teardown(() => manager.close())
  await volume.swap(identity(next.chainPem, next.keyPem))
  swapMidRead = true
  await manager.reloadNow()
  t.equal(manager.state().serverIdentity?.chain[0]?.fingerprint256, third.x509.fingerprint256, 'generation N+2, whole')
  t.equal(await rejections(metrics, 'server_identity', 'key_mismatch'), 0, 'no torn pair was ever validated')
  t.equal(await reloads(metrics, 'server_identity', 'success'), 1)
})
