// SPEC §8 "Detect": the mount directory watch turns a burst of fs events (one kubelet swap is
// several renames and unlinks) into one "maybe changed" signal, keeps signalling from the
// reconciliation poll when nothing is watched, and stops everything on close. Signals are
// recorded in a buffer; real directories.
import t, { type Test } from 'tap'
import { writeFileSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DirectoryWatcher } from '../../lib/tls/directory-watcher.ts'
import { ProjectedVolume } from '../fixtures/projected-volume.ts'
import { sleep, waitFor } from '../fixtures/wait.ts'

async function tempDir (t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'stargate-tls-watch-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

t.test('a burst of fs events in the mount directory gives one change signal', async (t) => {
  const dir = await tempDir(t)
  const signals: string[] = []
  const watcher = new DirectoryWatcher({ directories: [dir], debounceMs: 400, pollMs: 0, onMaybeChanged: (cause) => { signals.push(cause) } })
  await watcher.start()
  t.teardown(() => { watcher.close() })
  for (let i = 0; i < 20; i++) writeFileSync(join(dir, `file-${i}`), String(i))
  await waitFor(() => signals.length > 0, { message: 'a signal' })
  await sleep(600)
  t.same(signals, ['event'])
})

t.test('a kubelet swap gives a change signal', async (t) => {
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'tls'), { 'ca.crt': 'one' })
  const signals: string[] = []
  const watcher = new DirectoryWatcher({ directories: [volume.dir], debounceMs: 20, pollMs: 0, onMaybeChanged: (cause) => { signals.push(cause) } })
  await watcher.start()
  t.teardown(() => { watcher.close() })
  await volume.swap({ 'ca.crt': 'two' })
  await waitFor(() => signals.includes('event'), { message: 'an event signal' })
  t.pass('signalled')
})

t.test('without a watch the poll signals on every interval', async (t) => {
  const dir = await tempDir(t)
  const signals: string[] = []
  const watcher = new DirectoryWatcher({ directories: [dir], debounceMs: 20, pollMs: 50, watch: false, onMaybeChanged: (cause) => { signals.push(cause) } })
  await watcher.start()
  t.teardown(() => { watcher.close() })
  writeFileSync(join(dir, 'ignored'), 'x')
  await waitFor(() => signals.length >= 3, { message: 'three polls' })
  t.same(new Set(signals), new Set(['poll']), 'only polls: nothing watches the directory')
})

t.test('a closed watcher signals nothing more', async (t) => {
  const dir = await tempDir(t)
  const signals: string[] = []
  const watcher = new DirectoryWatcher({ directories: [dir], debounceMs: 20, pollMs: 30, onMaybeChanged: (cause) => { signals.push(cause) } })
  await watcher.start()
  watcher.close()
  watcher.close()
  writeFileSync(join(dir, 'after-close'), 'x')
  await sleep(200)
  t.same(signals, [])
})
