// SPEC §3 rule 8: the targets file is followed through atomic renames and ConfigMap `..data`
// swaps; a file over 1 MiB or not YAML keeps the last good snapshot, is counted in
// stargate_k8s_router_targets_file_reloads_total{result="rejected"} and logged once.
// Real files in a temp directory; short debounce, and no safety-net poll where a test
// proves the directory watch itself.
import t, { type Test } from 'tap'
import { mkdtemp, mkdir, rename, rm, symlink, writeFile, unlink } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setImmediate as nextMacrotask } from 'node:timers/promises'
import { Registry } from 'prom-client'
import { FileTargetSource } from '../../lib/discovery/file.ts'
import { WATCHED_LIST_MAX_BYTES } from '../../lib/discovery/watched-list.ts'
import { WatchedFile } from '../../lib/discovery/watched-file.ts'
import type { ReadFailure } from '../../lib/read-capped.ts'
import { SnapshotStore } from '../../lib/discovery/snapshot-store.ts'
import { createMetrics, type RouterMetrics } from '../../lib/metrics/metrics.ts'
import type { TargetSnapshot } from '../../lib/discovery/types.ts'
import { createLogSink, type LogSink } from '../fixtures/log-sink.ts'
import { waitFor, sleep } from '../fixtures/wait.ts'

type Pods = Record<string, string>

function yamlOf (pods: Pods): string {
  const lines = ['targets:']
  for (const [identity, address] of Object.entries(pods)) {
    lines.push(`  - identity: ${identity}`, `    address: ${address}`, '    grpcPort: 50051', '    quicPort: 50052')
  }
  return lines.join('\n') + '\n'
}

/** Valid YAML padded with comment lines to exactly size bytes. */
function paddedTo (text: string, size: number): string {
  let out = text
  let remaining = size - Buffer.byteLength(out)
  while (remaining > 0) {
    const n = Math.min(remaining, 1024)
    out += n === 1 ? '\n' : '#' + 'x'.repeat(n - 2) + '\n'
    remaining -= n
  }
  if (Buffer.byteLength(out) !== size) throw new Error('padding is off')
  return out
}

function podsOf (snapshot: TargetSnapshot): Pods {
  return Object.fromEntries(snapshot.targets.map((x) => [x.identity, x.address]))
}

async function reloads (metrics: RouterMetrics, result: 'success' | 'rejected'): Promise<number> {
  return (await metrics.targetsFileReloads.get()).values.find((v) => v.labels.result === result)?.value ?? -1
}

async function writeAtomically (path: string, text: string): Promise<void> {
  await writeFile(`${path}.tmp`, text)
  await rename(`${path}.tmp`, path)
}

interface Harness {
  readonly dir: string
  readonly path: string
  readonly store: SnapshotStore
  readonly metrics: RouterMetrics
  readonly log: LogSink
  readonly source: FileTargetSource
}

async function tempDir (t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'stargate-targets-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

async function startSource (t: Test, options: { dir: string, path: string, pollMs?: number }): Promise<Harness> {
  const store = new SnapshotStore()
  const metrics = createMetrics(new Registry(), { defaultMetrics: false })
  const log = createLogSink({ level: 'debug' })
  const source = new FileTargetSource({
    path: options.path,
    namespace: 'stargate',
    store,
    metrics,
    logger: log.logger,
    debounceMs: 20,
    pollMs: options.pollMs ?? 0,
  })
  t.teardown(() => source.stop())
  await source.start()
  await nextMacrotask() // the store publishes at the end of the tick
  return { dir: options.dir, path: options.path, store, metrics, log, source }
}

async function waitForPods (h: Harness, want: Pods): Promise<void> {
  await waitFor(() => JSON.stringify(podsOf(h.store.current())) === JSON.stringify(want), { message: `targets ${JSON.stringify(want)}` })
}

t.test('the first read of the targets file publishes its targets', async (t) => {
  const dir = await tempDir(t)
  const path = join(dir, 'targets.yaml')
  await writeFile(path, yamlOf({ 'stargate-1': '10.0.0.2', 'stargate-0': '10.0.0.1' }))
  const h = await startSource(t, { dir, path })
  const s = h.store.current()
  t.equal(s.initialized, true)
  t.equal(s.generation, 1)
  t.strictSame(podsOf(s), { 'stargate-0': '10.0.0.1', 'stargate-1': '10.0.0.2' })
  t.equal(h.source.lastError(), null)
  t.equal(h.source.stalenessMs(), 0)
  t.equal(await reloads(h.metrics, 'success'), 1)
  t.equal(await reloads(h.metrics, 'rejected'), 0)
  t.match(h.log.lines(), [{ level: 30, msg: 'targets file applied', file: path, targets: 2, skipped: 0 }])
})

t.test('bad entries are skipped with one warning each and the rest is published', async (t) => {
  const dir = await tempDir(t)
  const path = join(dir, 'targets.yaml')
  await writeFile(path, yamlOf({ 'stargate-0': '10.0.0.1', 'Bad-Name': '10.0.0.2', 'stargate-2': 'not-an-ip' }))
  const h = await startSource(t, { dir, path })
  t.strictSame(podsOf(h.store.current()), { 'stargate-0': '10.0.0.1' })
  const warnings = h.log.lines().filter((l) => l.msg === 'targets file entry skipped').map((l) => l.problem)
  t.strictSame(warnings, [
    'targets[1]: identity must be a pod name (lower-case DNS label)',
    'targets[2] (stargate-2): address must be an IPv4 or IPv6 address',
  ])
  t.equal(await reloads(h.metrics, 'success'), 1)
})

t.test('a missing file leaves the snapshot uninitialized until the file appears', async (t) => {
  const dir = await tempDir(t)
  const path = join(dir, 'targets.yaml')
  const h = await startSource(t, { dir, path })
  t.equal(h.store.current().initialized, false)
  t.equal(h.source.lastError(), `targets file missing: ${path} does not exist`)
  t.equal(await reloads(h.metrics, 'rejected'), 1)
  await writeAtomically(path, yamlOf({ 'stargate-0': '10.0.0.1' }))
  await waitForPods(h, { 'stargate-0': '10.0.0.1' })
  t.equal(h.store.current().initialized, true)
  t.equal(h.source.lastError(), null)
})

t.test('an atomic rename over the file is picked up by the directory watch', async (t) => {
  const dir = await tempDir(t)
  const path = join(dir, 'targets.yaml')
  await writeFile(path, yamlOf({ 'stargate-0': '10.0.0.1' }))
  const h = await startSource(t, { dir, path })
  await writeAtomically(path, yamlOf({ 'stargate-0': '10.0.0.1', 'stargate-1': '10.0.0.2' }))
  await waitForPods(h, { 'stargate-0': '10.0.0.1', 'stargate-1': '10.0.0.2' })
  t.equal(h.store.current().generation, 2)
})

t.test('an in-place rewrite of the file is picked up', async (t) => {
  const dir = await tempDir(t)
  const path = join(dir, 'targets.yaml')
  await writeFile(path, yamlOf({ 'stargate-0': '10.0.0.1' }))
  const h = await startSource(t, { dir, path })
  await writeFile(path, yamlOf({ 'stargate-0': '10.0.0.9' }))
  await waitForPods(h, { 'stargate-0': '10.0.0.9' })
})

t.test('a ConfigMap ..data swap is picked up, exactly as kubelet performs it', async (t) => {
  // Layout of a projected ConfigMap volume: targets.yaml -> ..data/targets.yaml,
  // ..data -> ..<timestamp> (a generation directory). Kubelet writes a new generation
  // directory, points ..data_tmp at it, renames ..data_tmp over ..data, and deletes the old one.
  const dir = await tempDir(t)
  const first = '..2026_11_30_10_00_00.000000001'
  await mkdir(join(dir, first))
  await writeFile(join(dir, first, 'targets.yaml'), yamlOf({ 'stargate-0': '10.0.0.1' }))
  await symlink(first, join(dir, '..data'))
  await symlink(join('..data', 'targets.yaml'), join(dir, 'targets.yaml'))
  const h = await startSource(t, { dir, path: join(dir, 'targets.yaml') })
  t.strictSame(podsOf(h.store.current()), { 'stargate-0': '10.0.0.1' })

  const second = '..2026_11_30_10_05_00.000000002'
  await mkdir(join(dir, second))
  await writeFile(join(dir, second, 'targets.yaml'), yamlOf({ 'stargate-0': '10.0.0.1', 'stargate-1': '10.0.0.2' }))
  await symlink(second, join(dir, '..data_tmp'))
  await rename(join(dir, '..data_tmp'), join(dir, '..data'))
  await rm(join(dir, first), { recursive: true })
  await waitForPods(h, { 'stargate-0': '10.0.0.1', 'stargate-1': '10.0.0.2' })

  // and a second swap, so the watch survived the first one
  const third = '..2026_11_30_10_10_00.000000003'
  await mkdir(join(dir, third))
  await writeFile(join(dir, third, 'targets.yaml'), yamlOf({ 'stargate-1': '10.0.0.2' }))
  await symlink(third, join(dir, '..data_tmp'))
  await rename(join(dir, '..data_tmp'), join(dir, '..data'))
  await rm(join(dir, second), { recursive: true })
  await waitForPods(h, { 'stargate-1': '10.0.0.2' })
  t.equal(h.source.lastError(), null)
})

t.test('removing an entry from the file publishes its removal', async (t) => {
  const dir = await tempDir(t)
  const path = join(dir, 'targets.yaml')
  await writeFile(path, yamlOf({ 'stargate-0': '10.0.0.1', 'stargate-1': '10.0.0.2', 'stargate-2': '10.0.0.3' }))
  const h = await startSource(t, { dir, path })
  const seen: string[][] = []
  h.store.subscribe((s) => { seen.push(s.targets.map((x) => x.identity)) })
  await writeAtomically(path, yamlOf({ 'stargate-0': '10.0.0.1', 'stargate-2': '10.0.0.3' }))
  await waitForPods(h, { 'stargate-0': '10.0.0.1', 'stargate-2': '10.0.0.3' })
  t.strictSame(seen, [['stargate-0', 'stargate-1', 'stargate-2'], ['stargate-0', 'stargate-2']])
  await writeAtomically(path, 'targets: []\n')
  await waitForPods(h, {})
  t.equal(h.store.current().initialized, true)
})

t.test('a file of exactly 1 MiB is used and one byte more is rejected, keeping the last good snapshot', async (t) => {
  t.equal(WATCHED_LIST_MAX_BYTES, 1024 * 1024)
  const dir = await tempDir(t)
  const path = join(dir, 'targets.yaml')
  await writeFile(path, paddedTo(yamlOf({ 'stargate-0': '10.0.0.1' }), WATCHED_LIST_MAX_BYTES))
  const h = await startSource(t, { dir, path })
  t.strictSame(podsOf(h.store.current()), { 'stargate-0': '10.0.0.1' })
  t.equal(h.source.lastError(), null)
  const good = h.store.current()

  await writeAtomically(path, paddedTo(yamlOf({ 'stargate-9': '10.0.0.9' }), WATCHED_LIST_MAX_BYTES + 1))
  await waitFor(async () => await reloads(h.metrics, 'rejected') === 1, { message: 'the oversized file to be rejected' })
  t.equal(h.store.current(), good, 'the last good snapshot stays')
  t.equal(h.source.lastError(), `targets file too_large: ${path} is 1048577 bytes, over the 1048576-byte limit`)
  t.match(h.log.lines().filter((l) => l.level === 50), [
    { msg: 'targets file rejected; keeping the last good targets', failure: 'too_large', detail: `${path} is 1048577 bytes, over the 1048576-byte limit` },
  ])
})

t.test('a file that is not YAML keeps the last good snapshot and is counted as rejected', async (t) => {
  const dir = await tempDir(t)
  const path = join(dir, 'targets.yaml')
  await writeFile(path, yamlOf({ 'stargate-0': '10.0.0.1' }))
  const h = await startSource(t, { dir, path })
  const good = h.store.current()
  await writeAtomically(path, 'targets: [oops\n')
  await waitFor(async () => await reloads(h.metrics, 'rejected') === 1, { message: 'the invalid file to be rejected' })
  t.equal(h.store.current(), good)
  t.match(h.source.lastError(), /^targets file invalid: not valid YAML or JSON: /)
  t.ok(h.source.stalenessMs() >= 0)

  // Recovery: a good file again is applied and clears the error.
  await writeAtomically(path, yamlOf({ 'stargate-0': '10.0.0.1', 'stargate-1': '10.0.0.2' }))
  await waitForPods(h, { 'stargate-0': '10.0.0.1', 'stargate-1': '10.0.0.2' })
  t.equal(h.source.lastError(), null)
  t.equal(h.source.stalenessMs(), 0)
  t.equal(await reloads(h.metrics, 'success'), 2)
})

t.test('the same bad content is reported once, however many times it is seen', async (t) => {
  const dir = await tempDir(t)
  const path = join(dir, 'targets.yaml')
  await writeFile(path, yamlOf({ 'stargate-0': '10.0.0.1' }))
  const h = await startSource(t, { dir, path, pollMs: 20 })
  await writeAtomically(path, 'targets: [oops\n')
  await waitFor(async () => await reloads(h.metrics, 'rejected') === 1, { message: 'the invalid file to be rejected' })
  for (let i = 0; i < 3; i++) await writeAtomically(path, 'targets: [oops\n') // new inode, same bytes
  // Proving an absence takes time: many polls (20 ms) and watch events go by.
  await sleep(400)
  t.equal(await reloads(h.metrics, 'rejected'), 1)
  t.equal(h.log.lines().filter((l) => l.msg === 'targets file rejected; keeping the last good targets').length, 1)
})

t.test('a watched file delivers content only when its bytes change, and each failure once', async (t) => {
  const dir = await tempDir(t)
  const path = join(dir, 'watched.txt')
  const events: Array<string | [ReadFailure, string]> = []
  const file = new WatchedFile({
    path,
    maxBytes: 10,
    pollMs: 0,
    debounceMs: 10_000, // only explicit checks in this test
    onContent: (content) => { events.push(content.toString()) },
    onFailure: (failure, detail) => { events.push([failure, detail]) },
  })
  t.teardown(() => { file.close() })
  await file.start()
  await file.check()
  await writeFile(path, 'one')
  await file.check()
  await file.check()
  await writeAtomically(path, 'one')
  await file.check()
  await writeFile(path, '0123456789') // exactly maxBytes
  await file.check()
  await writeFile(path, '0123456789A')
  await file.check()
  await file.check()
  await unlink(path)
  await file.check()
  await writeFile(path, 'one')
  await file.check()
  t.strictSame(events, [
    ['missing', `${path} does not exist`],
    'one',
    '0123456789',
    ['too_large', `${path} is 11 bytes, over the 10-byte limit`],
    ['missing', `${path} does not exist`],
    'one',
  ])
})
