// SPEC §8: the TLS material manager follows mounted Secrets — the directory watch picks up a
// kubelet `..data` swap, the reconciliation poll recovers missed events and in-place writes,
// one generation is built by every consumer before any is committed (last-known-good
// otherwise), rejections are reported once per distinct content, and the metrics and
// readiness an operator reads say what is active. Real files; short debounce and poll.
import t, { type Test } from 'tap'
import type { X509Certificate } from 'node:crypto'
import { mkdir, mkdtemp, rename, rm, utimes } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Registry } from 'prom-client'
import { TlsMaterialManager, type TlsManagerOptions } from '../../lib/tls/manager.ts'
import { createTlsMetrics, type TlsMetrics } from '../../lib/tls/metrics.ts'
import type { MaterialType, TlsConsumer, TlsState } from '../../lib/tls/types.ts'
import { ProjectedVolume, overwriteInPlace, writePlainFiles, type Files } from '../fixtures/projected-volume.ts'
import { createCa, createIntermediate, createLeaf, daysFromNow, type Leaf } from '../fixtures/certs.ts'
import { createLogSink, type LogSink } from '../fixtures/log-sink.ts'
import { waitFor } from '../fixtures/wait.ts'

const root = await createCa({ name: 'manager root' })
const intermediate = await createIntermediate(root, { name: 'manager intermediate', notAfter: daysFromNow(60) })
const otherRoot = await createCa({ name: 'manager other root', notAfter: daysFromNow(90) })
const first = await createLeaf(intermediate, { dnsNames: ['one.example'], notAfter: daysFromNow(10) })
const second = await createLeaf(intermediate, { dnsNames: ['two.example'], notAfter: daysFromNow(20) })
const third = await createLeaf(intermediate, { dnsNames: ['three.example'], notAfter: daysFromNow(20) })

const identity = (leaf: Leaf): Files => ({ 'tls.crt': leaf.chainPem, 'tls.key': leaf.keyPem })
const mismatched: Files = { 'tls.crt': second.chainPem, 'tls.key': first.keyPem }
const otherMismatched: Files = { 'tls.crt': third.chainPem, 'tls.key': second.keyPem }

interface Harness {
  readonly manager: TlsMaterialManager
  readonly metrics: TlsMetrics
  readonly log: LogSink
}

async function tempDir (t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'stargate-tls-manager-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

async function start (t: Test, options: Partial<TlsManagerOptions>): Promise<Harness> {
  const metrics = createTlsMetrics(new Registry())
  const log = createLogSink({ level: 'debug' })
  const manager = await TlsMaterialManager.start({
    serverIdentity: null, upstreamTrust: null, clientTrust: null, debounceMs: 20, pollMs: 0, metrics, logger: log.logger, ...options,
  })
  t.teardown(() => manager.close())
  return { manager, metrics, log }
}

function identityAt (volumeDir: string): TlsManagerOptions['serverIdentity'] {
  return { certPath: join(volumeDir, 'tls.crt'), keyPath: join(volumeDir, 'tls.key') }
}

async function counter (metrics: TlsMetrics, name: 'reloads' | 'rejections', labels: Record<string, string>): Promise<number | undefined> {
  const metric = name === 'reloads' ? metrics.tlsReloads : metrics.tlsReloadRejections
  const values = (await metric.get()).values
  return values.find((v) => Object.entries(labels).every(([k, value]) => (v.labels as Record<string, unknown>)[k] === value))?.value
}

async function expiry (metrics: TlsMetrics): Promise<Record<string, number>> {
  return Object.fromEntries((await metrics.tlsCertificateExpiry.get()).values.map((v) => [String(v.labels.material_type), v.value]))
}

function servedName (manager: TlsMaterialManager): string | undefined {
  return manager.state().serverIdentity?.chain[0]?.subject
}

/** A consumer that records what it committed (a buffering listener, not a spy). */
function recordingConsumer (name: string, dependsOn: readonly MaterialType[], refuse: (state: TlsState) => boolean = () => false): TlsConsumer<string> & { readonly committed: Array<{ subject: string, changed: MaterialType | null }> } {
  const committed: Array<{ subject: string, changed: MaterialType | null }> = []
  return {
    name,
    dependsOn,
    committed,
    build (state: TlsState): string {
      if (refuse(state)) throw new Error(`${name} refuses this material`)
      return state.serverIdentity?.chain[0]?.subject ?? 'none'
    },
    commit (candidate: string, _state: TlsState, changed: MaterialType | null): void {
      committed.push({ subject: candidate, changed })
    },
  }
}

t.test('a kubelet swap is picked up by the directory watch and served from the next generation', async (t) => {
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'tls'), identity(first))
  const { manager, metrics, log } = await start(t, { serverIdentity: identityAt(volume.dir) })
  t.equal(servedName(manager), 'CN=one.example')
  t.equal(manager.state().generations.server_identity, 1)
  await volume.swap(identity(second))
  await waitFor(() => servedName(manager) === 'CN=two.example', { message: 'the new certificate' })
  t.equal(manager.state().generations.server_identity, 2)
  t.equal(await counter(metrics, 'reloads', { material_type: 'server_identity', result: 'success' }), 1)
  t.equal((await expiry(metrics)).server_identity, Math.floor(second.x509.validToDate.getTime() / 1000))
  const line = log.lines().find((l) => l.msg === 'reloaded the server identity')
  t.equal(line?.generation, 2)
  t.same(line?.mount_generations, { [volume.dir]: volume.generation })
})

t.test('an invalid swap is rejected once per distinct content however many fs events follow', async (t) => {
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'tls'), identity(first))
  const { manager, metrics, log } = await start(t, { serverIdentity: identityAt(volume.dir) })
  const rejected = (): Promise<number | undefined> => counter(metrics, 'rejections', { material_type: 'server_identity', reason: 'key_mismatch' })
  await volume.swap(mismatched)
  await waitFor(async () => await rejected() === 1, { message: 'the first rejection' })
  // The same bad bytes again, in new generations, plus unrelated events in the directory.
  for (let i = 0; i < 3; i++) {
    await volume.swap(mismatched)
    await utimes(volume.dir, new Date(), new Date())
  }
  // A different bad generation: once it is counted, the events before it have been handled.
  await volume.swap(otherMismatched)
  await waitFor(async () => await rejected() === 2, { message: 'the second, distinct rejection' })
  await manager.reloadNow()
  t.equal(await rejected(), 2, 'two distinct contents, two rejections')
  t.equal(await counter(metrics, 'reloads', { material_type: 'server_identity', result: 'rejected' }), 2)
  t.equal(servedName(manager), 'CN=one.example', 'the last-known-good identity is still active')
  t.equal(log.lines().filter((l) => l.reason === 'key_mismatch').length, 2, 'each distinct content logged once')
})

t.test('a swap made while nothing watches is recovered by the poll', async (t) => {
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'tls'), identity(first))
  // watch: false stands for every missed inotify event.
  const { manager } = await start(t, { serverIdentity: identityAt(volume.dir), watch: false, pollMs: 100 })
  await volume.swap(identity(second))
  await waitFor(() => servedName(manager) === 'CN=two.example', { message: 'the poll to find the swap' })
  t.pass('recovered')
})

t.test('a file overwritten in place is picked up by the poll', async (t) => {
  const dir = join(await tempDir(t), 'plain')
  await writePlainFiles(dir, { 'ca.crt': root.certPem })
  const { manager } = await start(t, { upstreamTrust: { path: join(dir, 'ca.crt') }, watch: false, pollMs: 100 })
  await overwriteInPlace(dir, { 'ca.crt': root.certPem + otherRoot.certPem })
  await waitFor(() => manager.state().upstreamTrust?.certs.length === 2, { message: 'the overwritten bundle' })
  t.equal(manager.state().generations.upstream_trust, 2)
})

t.test('a mount directory replaced by another directory is watched again', async (t) => {
  const base = await tempDir(t)
  const dir = join(base, 'tls')
  await writePlainFiles(dir, identity(first))
  const { manager } = await start(t, { serverIdentity: identityAt(dir) })
  await writePlainFiles(join(base, 'staged'), identity(second))
  await rename(dir, join(base, 'previous'))
  await rename(join(base, 'staged'), dir)
  await waitFor(() => servedName(manager) === 'CN=two.example', { message: 'the replaced directory' })
  // The new directory is watched: a later in-place write is seen without a poll.
  await overwriteInPlace(dir, identity(third))
  await waitFor(() => servedName(manager) === 'CN=three.example', { message: 'a write into the new directory' })
  t.pass('re-armed')
})

t.test('a mount directory that disappears and comes back is watched again', async (t) => {
  const base = await tempDir(t)
  const dir = join(base, 'tls')
  await writePlainFiles(dir, identity(first))
  const { manager, metrics } = await start(t, { serverIdentity: identityAt(dir) })
  await rm(dir, { recursive: true })
  await waitFor(async () => await counter(metrics, 'rejections', { material_type: 'server_identity', reason: 'unreadable' }) === 1, { message: 'the unreadable rejection' })
  t.equal(servedName(manager), 'CN=one.example', 'still serving the last-known-good identity')
  await mkdir(dir)
  await writePlainFiles(dir, identity(second))
  await waitFor(() => servedName(manager) === 'CN=two.example', { timeoutMs: 10000, message: 'the directory to be watched again' })
  t.pass('re-armed')
})

t.test('reload counters exist at zero for every material type and result before any reload', async (t) => {
  const { metrics } = await start(t, {})
  const text = await metrics.tlsReloads.get()
  t.equal(text.values.length, 6)
  for (const v of text.values) t.equal(v.value, 0)
  t.same(text.values.map((v) => `${v.labels.material_type}/${v.labels.result}`).sort(), [
    'client_trust/rejected', 'client_trust/success', 'server_identity/rejected', 'server_identity/success', 'upstream_trust/rejected', 'upstream_trust/success',
  ])
})

t.test('the expiry gauge shows the earliest notAfter of each mounted material and nothing for the rest', async (t) => {
  const base = await tempDir(t)
  const identityVolume = await ProjectedVolume.create(join(base, 'tls'), identity(first))
  const trustVolume = await ProjectedVolume.create(join(base, 'ca'), { 'ca.crt': root.certPem + otherRoot.certPem })
  const { metrics } = await start(t, { serverIdentity: identityAt(identityVolume.dir), clientTrust: { path: trustVolume.path('ca.crt') } })
  const seconds = (cert: X509Certificate): number => Math.floor(cert.validToDate.getTime() / 1000)
  t.same(await expiry(metrics), {
    server_identity: Math.min(seconds(first.x509), seconds(intermediate.x509)),
    client_trust: Math.min(seconds(root.x509), seconds(otherRoot.x509)),
  }, 'no upstream_trust series: none is mounted')
})

t.test('readiness fails once the active identity expires and recovers after a valid swap', async (t) => {
  let clock = new Date()
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'tls'), identity(first))
  const { manager } = await start(t, { serverIdentity: identityAt(volume.dir), watch: false, now: () => clock })
  const ready = manager.readinessCheck()
  t.equal(ready(), null)
  clock = daysFromNow(15)
  t.equal(ready(), `server certificate expired at ${first.x509.validToDate.toISOString()}`)
  await volume.swap(identity(second))
  await manager.reloadNow()
  t.equal(servedName(manager), 'CN=two.example')
  t.equal(ready(), null)
})

t.test('a generation rejected as not yet valid is taken once its time has come', async (t) => {
  let clock = new Date()
  const early = await createLeaf(intermediate, { dnsNames: ['early.example'], notBefore: daysFromNow(1) })
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'tls'), identity(first))
  const { manager, metrics, log } = await start(t, { serverIdentity: identityAt(volume.dir), watch: false, now: () => clock })
  await volume.swap(identity(early))
  await manager.reloadNow()
  await manager.reloadNow()
  t.equal(servedName(manager), 'CN=one.example')
  t.equal(await counter(metrics, 'rejections', { material_type: 'server_identity', reason: 'not_yet_valid' }), 1)
  clock = daysFromNow(2)
  await manager.reloadNow()
  t.equal(servedName(manager), 'CN=early.example')
  t.equal(log.lines().filter((l) => l.reason === 'not_yet_valid').length, 1, 'logged once')
})

t.test('without a configured identity the router generates a self-signed one and says so in the log', async (t) => {
  const { manager, metrics, log } = await start(t, { selfSignedHosts: ['router.example', '127.0.0.1'] })
  const generated = manager.state().serverIdentity
  if (generated === null) return t.fail('no identity')
  t.equal(generated.generated, true)
  const leaf = generated.chain[0]
  t.equal(leaf?.subjectAltName, 'DNS:router.example, IP Address:127.0.0.1')
  t.equal(leaf?.publicKey.asymmetricKeyType, 'ec')
  t.equal(leaf?.publicKey.asymmetricKeyDetails?.namedCurve, 'prime256v1')
  const days = ((leaf?.validToDate.getTime() ?? 0) - Date.now()) / 86400000
  t.ok(days > 364 && days <= 366, `valid for a year (${days.toFixed(1)} days)`)
  const line = log.lines().find((l) => typeof l.msg === 'string' && l.msg.includes('generated a self-signed server identity'))
  t.ok(line, 'logged')
  t.equal(line?.level, 40, 'as a warning')
  t.same(line?.hosts, ['router.example', '127.0.0.1'])
  t.equal((await expiry(metrics)).server_identity, Math.floor(generated.notAfter.getTime() / 1000))
})

t.test('without an identity or hosts to generate one for, no identity is active', async (t) => {
  const { manager } = await start(t, {})
  t.equal(manager.state().serverIdentity, null)
  t.equal(manager.readinessCheck()(), null)
})

t.test('a consumer added to a running manager is built from the active material at once', async (t) => {
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'tls'), identity(first))
  const { manager } = await start(t, { serverIdentity: identityAt(volume.dir), watch: false })
  const consumer = recordingConsumer('front door', ['server_identity'])
  manager.addConsumer(consumer)
  t.same(consumer.committed, [{ subject: 'CN=one.example', changed: null }])
  t.throws(() => { manager.addConsumer(recordingConsumer('quic', ['server_identity'], () => true)) }, {
    message: 'tls consumer quic cannot build from the active material: quic refuses this material',
  })
})

t.test('a generation one consumer cannot build is committed to none of them', async (t) => {
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'tls'), identity(first))
  const { manager, metrics, log } = await start(t, { serverIdentity: identityAt(volume.dir), watch: false })
  const frontDoor = recordingConsumer('front door', ['server_identity'])
  const quic = recordingConsumer('quic', ['server_identity'], (state) => state.serverIdentity?.chain[0]?.subject === 'CN=two.example')
  manager.addConsumer(frontDoor)
  manager.addConsumer(quic)
  const changes: string[] = []
  manager.onChange((changed, previous, next) => { changes.push(`${changed}: ${previous.generations[changed]} -> ${next.generations[changed]}`) })
  await volume.swap(identity(second))
  await manager.reloadNow()
  t.equal(servedName(manager), 'CN=one.example', 'state kept')
  t.equal(frontDoor.committed.length, 1, 'front door kept its context')
  t.equal(quic.committed.length, 1, 'quic kept its config')
  t.same(changes, [])
  t.equal(await counter(metrics, 'rejections', { material_type: 'server_identity', reason: 'parse' }), 1)
  t.match(log.lines().find((l) => l.reason === 'parse')?.detail, 'quic could not be built from it: quic refuses this material')
  await volume.swap(identity(third))
  await manager.reloadNow()
  t.same(frontDoor.committed.at(-1), { subject: 'CN=three.example', changed: 'server_identity' })
  t.same(quic.committed.at(-1), { subject: 'CN=three.example', changed: 'server_identity' })
  t.same(changes, ['server_identity: 1 -> 2'])
})

t.test('a trust change rebuilds only the consumers that depend on it', async (t) => {
  const base = await tempDir(t)
  const identityVolume = await ProjectedVolume.create(join(base, 'tls'), identity(first))
  const trustVolume = await ProjectedVolume.create(join(base, 'upstream-ca'), { 'ca.crt': root.certPem })
  const { manager } = await start(t, { serverIdentity: identityAt(identityVolume.dir), upstreamTrust: { path: trustVolume.path('ca.crt') }, watch: false })
  const frontDoor = recordingConsumer('front door', ['server_identity'])
  const dialer = recordingConsumer('upstream dialer', ['upstream_trust'])
  manager.addConsumer(frontDoor)
  manager.addConsumer(dialer)
  const seen: Array<[MaterialType, number, number]> = []
  manager.onChange((changed, previous, next) => { seen.push([changed, previous.upstreamTrust?.certs.length ?? 0, next.upstreamTrust?.certs.length ?? 0]) })
  await trustVolume.swap({ 'ca.crt': root.certPem + otherRoot.certPem })
  await manager.reloadNow()
  t.equal(frontDoor.committed.length, 1, 'the front door was not rebuilt')
  t.same(dialer.committed.map((c) => c.changed), [null, 'upstream_trust'])
  t.same(seen, [['upstream_trust', 1, 2]])
  t.same(manager.state().generations, { server_identity: 1, upstream_trust: 2, client_trust: 0 })
})
