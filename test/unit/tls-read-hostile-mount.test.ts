// SPEC §8: only regular files inside the mount are read as TLS material. A FIFO in
// the mount is refused at once (opening one blocks until a writer appears, which hung the
// reload and, through it, shutdown); so are devices and symlinks whose target leaves the mount
// directory, and a `..data` link pointing elsewhere. Symlinks that stay inside still work.
import t, { type Test } from 'tap'
import { execFile } from 'node:child_process'
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { Registry } from 'prom-client'
import { readMaterialFiles } from '../../lib/tls/read.ts'
import { readCapped } from '../../lib/read-capped.ts'
import { TlsMaterialManager } from '../../lib/tls/manager.ts'
import { createTlsMetrics } from '../../lib/tls/metrics.ts'
import { ProjectedVolume } from '../fixtures/projected-volume.ts'
import { createCa, createLeaf } from '../fixtures/certs.ts'
import { createLogSink } from '../fixtures/log-sink.ts'

const run = promisify(execFile)
const ca = await createCa({ name: 'hostile mount ca' })
const leaf = await createLeaf(ca, { dnsNames: ['router.example'] })

async function tempDir (t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'stargate-tls-hostile-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

async function mkfifo (path: string): Promise<void> {
  await run('mkfifo', [path])
}

t.test('a FIFO as a material file is refused without blocking', async (t) => {
  const dir = await tempDir(t)
  await writeFile(join(dir, 'tls.key'), leaf.keyPem)
  await mkfifo(join(dir, 'tls.crt'))
  const result = await readMaterialFiles([join(dir, 'tls.crt'), join(dir, 'tls.key')])
  t.same(result, { ok: false, reason: 'unreadable', detail: `${join(dir, 'tls.crt')} is not a regular file (a FIFO)` })
})

t.test('a FIFO as the targets file is refused without blocking too', async (t) => {
  const dir = await tempDir(t)
  await mkfifo(join(dir, 'targets.yaml'))
  t.same(await readCapped(join(dir, 'targets.yaml'), 1024), { ok: false, failure: 'unreadable', detail: `${join(dir, 'targets.yaml')} is not a regular file (a FIFO)` })
})

t.test('a symlink leaving the mount directory is refused', async (t) => {
  const dir = await tempDir(t)
  const mount = join(dir, 'mount')
  await mkdir(mount)
  await writeFile(join(dir, 'outside.crt'), leaf.chainPem)
  await symlink(join(dir, 'outside.crt'), join(mount, 'ca.crt'))
  t.same(await readMaterialFiles([join(mount, 'ca.crt')]), { ok: false, reason: 'unreadable', detail: `${join(mount, 'ca.crt')} is a symlink leaving its mount directory ${mount}` })
  await rm(join(mount, 'ca.crt'))
  await symlink('../outside.crt', join(mount, 'ca.crt'))
  const relative = await readMaterialFiles([join(mount, 'ca.crt')])
  t.equal(relative.ok, false, 'a relative ../ target is refused the same way')
})

t.test('a symlink to a device is refused', async (t) => {
  const dir = await tempDir(t)
  await symlink('/dev/zero', join(dir, 'ca.crt'))
  const result = await readMaterialFiles([join(dir, 'ca.crt')])
  t.same(result, { ok: false, reason: 'unreadable', detail: `${join(dir, 'ca.crt')} is a symlink leaving its mount directory ${dir}` })
})

t.test('a device node inside the mount is refused', { skip: process.getuid?.() === 0 ? false : 'creating a device node needs root' }, async (t) => {
  const dir = await tempDir(t)
  await run('mknod', [join(dir, 'ca.crt'), 'c', '1', '5']) // /dev/zero's numbers
  t.same(await readMaterialFiles([join(dir, 'ca.crt')]), { ok: false, reason: 'unreadable', detail: `${join(dir, 'ca.crt')} is not a regular file (a device)` })
})

t.test('a symlink that stays inside the mount is followed', async (t) => {
  const dir = await tempDir(t)
  await mkdir(join(dir, 'real'))
  await writeFile(join(dir, 'real', 'ca.crt'), leaf.chainPem)
  await symlink('real/ca.crt', join(dir, 'ca.crt'))
  const result = await readMaterialFiles([join(dir, 'ca.crt')])
  t.equal(result.ok && result.contents[0]?.toString(), leaf.chainPem)
})

t.test('a ..data link that points outside the mount directory is refused', async (t) => {
  const dir = await tempDir(t)
  const mount = join(dir, 'mount')
  await mkdir(join(dir, 'elsewhere'), { recursive: true })
  await mkdir(mount)
  await writeFile(join(dir, 'elsewhere', 'ca.crt'), leaf.chainPem)
  await symlink('../elsewhere', join(mount, '..data'))
  await symlink('..data/ca.crt', join(mount, 'ca.crt'))
  t.same(await readMaterialFiles([join(mount, 'ca.crt')]), { ok: false, reason: 'unreadable', detail: `${join(mount, '..data')} points outside the mount directory (../elsewhere)` })
})

t.test('a FIFO swapped into a mounted Secret is rejected by the reload and close() still returns', async (t) => {
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'trust'), { 'ca.crt': ca.certPem })
  const metrics = createTlsMetrics(new Registry())
  const log = createLogSink()
  const manager = await TlsMaterialManager.start({ serverIdentity: null, upstreamTrust: { path: volume.path('ca.crt') }, clientTrust: null, debounceMs: 10, pollMs: 0, watch: false, metrics, logger: log.logger })
  let closed = false
  t.teardown(async () => { if (!closed) await manager.close() })
  // A generation directory whose ca.crt is a FIFO, swapped in as kubelet swaps ..data.
  await volume.swap({ 'ca.crt': 'placeholder' })
  const fifo = join(volume.dir, volume.generation, 'ca.crt')
  await rm(fifo)
  await mkfifo(fifo)
  await manager.reloadNow()
  const rejected = log.lines().find((l) => l.material_type === 'upstream_trust' && l.reason === 'unreadable')
  t.match(rejected?.detail, /is not a regular file \(a FIFO\)/, 'the reload rejects it, saying why')
  t.equal(manager.state().upstreamTrust?.pem, ca.certPem, 'the last-known-good trust stays active')
  await manager.close()
  closed = true
  t.pass('close() returned')
})
