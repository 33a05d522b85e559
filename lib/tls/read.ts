/**
 * Reads the files of one piece of TLS material as ONE generation (SPEC §8).
 *
 * kubelet's atomic writer lays a Secret volume out as
 *
 *   <dir>/..2026_11_30_13_00_00.123456789/tls.crt   the generation directory, never modified
 *   <dir>/..data -> ..2026_11_30_13_00_00.123456789  swapped by rename(..data_tmp, ..data)
 *   <dir>/tls.crt -> ..data/tls.crt                  stable user-visible links
 *
 * and deletes the old generation directory right after the rename. Opening <dir>/tls.crt and
 * then <dir>/tls.key can therefore return a certificate of generation N and a key of N+1. So for
 * each directory with a `..data` symlink: resolve it once, read every file through the resolved
 * generation directory, then check that `..data` still resolves the same; if it moved, or a file
 * vanished (ENOENT: the generation was deleted under us), start again, a bounded number of times.
 * Plain files (no `..data` beside them) are read as they are.
 *
 * Only regular files inside the mount are read: each file is lstat'ed, a symlink is
 * followed only when its target stays inside the mount directory, `..data` must name an entry
 * of the directory, and FIFOs, sockets and devices are refused without blocking on them (see
 * readCapped), so a hostile or broken volume cannot hang a reload or shutdown, or make the
 * router read /dev/zero or a file outside the Secret.
 */
import { lstat, readlink, realpath, stat } from 'node:fs/promises'
import { basename, dirname, join, resolve, sep } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { readCapped } from '../read-capped.ts'
import { fingerprintOf } from './validate.ts'

/** Per file; exactly this many bytes is allowed (SPEC §8). */
export const MATERIAL_MAX_BYTES = 1024 * 1024

export interface ReadOptions {
  readonly maxBytes?: number
  /** Attempts before giving up on a moving or vanishing generation (default 5). */
  readonly attempts?: number
  /** Pause before attempt n+1 is n × retryDelayMs (default 10). */
  readonly retryDelayMs?: number
  /** Test hook: runs after each file is read (e.g. to swap the volume mid-read). */
  readonly afterFileRead?: (path: string, attempt: number) => void | Promise<void>
}

export type ReadResult =
  | {
    readonly ok: true
    /** File contents, in the order of the paths given. */
    readonly contents: readonly Buffer[]
    /** fingerprintOf(contents). */
    readonly fingerprint: string
    /** The resolved `..data` target per directory that has one (for logs). */
    readonly generations: Readonly<Record<string, string>>
    readonly attempts: number
  }
  | { readonly ok: false, readonly reason: 'too_large' | 'unreadable', readonly detail: string }

type Attempt =
  | { readonly kind: 'done', readonly result: ReadResult }
  | { readonly kind: 'retry', readonly detail: string }

export async function readMaterialFiles (paths: readonly string[], options: ReadOptions = {}): Promise<ReadResult> {
  const attempts = Math.max(1, options.attempts ?? 5)
  const retryDelayMs = options.retryDelayMs ?? 10
  let lastDetail = ''
  for (let attempt = 1; attempt <= attempts; attempt++) {
    const outcome = await readOnce(paths, attempt, options)
    if (outcome.kind === 'done') return outcome.result
    lastDetail = outcome.detail
    if (attempt < attempts) await sleep(attempt * retryDelayMs)
  }
  return { ok: false, reason: 'unreadable', detail: `${lastDetail} (gave up after ${attempts} attempts)` }
}

async function readOnce (paths: readonly string[], attempt: number, options: ReadOptions): Promise<Attempt> {
  const maxBytes = options.maxBytes ?? MATERIAL_MAX_BYTES
  const resolved = new Map<string, string | null>()
  for (const path of paths) {
    const dir = dirname(path)
    if (resolved.has(dir)) continue
    const generation = await resolveData(dir)
    if (typeof generation === 'object' && generation !== null) return generation
    resolved.set(dir, generation)
  }
  const contents: Buffer[] = []
  for (const path of paths) {
    const dir = dirname(path)
    const generation = resolved.get(dir) ?? null
    const through = generation === null ? path : join(resolve(dir, generation), basename(path))
    const confined = await confine(through, dir)
    if (!confined.ok) return { kind: 'done', result: { ok: false, reason: 'unreadable', detail: confined.detail.replace(through, path) } }
    const read = await readCapped(confined.path, maxBytes, { noFollow: true })
    if (!read.ok) {
      if (generation !== null) {
        if (await resolveData(dir) !== generation) return { kind: 'retry', detail: `${dir}/..data moved while ${path} was read` }
        if (read.failure === 'missing') {
          if (!await isDirectory(resolve(dir, generation))) return { kind: 'retry', detail: `generation directory ${generation} of ${dir} was deleted while it was read` }
          return { kind: 'done', result: { ok: false, reason: 'unreadable', detail: `${path} does not exist in generation ${generation} (is the key in the secret?)` } }
        }
      }
      if (read.failure === 'missing') return { kind: 'done', result: { ok: false, reason: 'unreadable', detail: await describeMissing(path) } }
      return { kind: 'done', result: { ok: false, reason: read.failure, detail: read.detail.replace(through, path) } }
    }
    contents.push(read.content)
    await options.afterFileRead?.(path, attempt)
  }
  const generations: Record<string, string> = {}
  for (const [dir, generation] of resolved) {
    if (generation === null) continue
    if (await resolveData(dir) !== generation) return { kind: 'retry', detail: `${dir}/..data moved while the material was read` }
    generations[dir] = generation
  }
  return { kind: 'done', result: { ok: true, contents, fingerprint: fingerprintOf(contents), generations, attempts: attempt } }
}

/**
 * The target of `<dir>/..data` (a name inside dir), null when dir is not a projected volume, or
 * a finished failure when the directory itself cannot be read.
 */
async function resolveData (dir: string): Promise<string | null | Attempt> {
  const link = join(dir, '..data')
  try {
    const info = await lstat(link)
    if (!info.isSymbolicLink()) return null
    const target = await readlink(link)
    // kubelet's atomic writer points it at a sibling generation directory, by name.
    if (target === '' || target === '.' || target === '..' || target.includes(sep)) {
      return { kind: 'done', result: { ok: false, reason: 'unreadable', detail: `${link} points outside the mount directory (${target})` } }
    }
    return target
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOENT') return null
    return { kind: 'done', result: { ok: false, reason: 'unreadable', detail: `${link}: ${code ?? (err as Error).message}` } }
  }
}

/**
 * The path to open: the file itself, or a symlink's target when it stays inside the mount
 * directory. A missing file passes (the read reports it, with the retry rules above).
 */
async function confine (path: string, dir: string): Promise<{ ok: true, path: string } | { ok: false, detail: string }> {
  let info
  try {
    info = await lstat(path)
  } catch {
    return { ok: true, path }
  }
  if (!info.isSymbolicLink()) return { ok: true, path }
  let target: string
  let mount: string
  try {
    target = await realpath(path)
    mount = await realpath(dir)
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    return code === 'ENOENT' ? { ok: true, path } : { ok: false, detail: `${path}: ${code ?? (err as Error).message}` }
  }
  if (!target.startsWith(mount + sep)) return { ok: false, detail: `${path} is a symlink leaving its mount directory ${dir}` }
  return { ok: true, path: target }
}

async function isDirectory (path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory()
  } catch {
    return false
  }
}

async function describeMissing (path: string): Promise<string> {
  const dir = dirname(path)
  try {
    if (!(await stat(dir)).isDirectory()) return `${dir} is not a directory`
  } catch {
    return `mount directory ${dir} does not exist (is the secret mounted there, as a directory and not with subPath?)`
  }
  return `${path} does not exist`
}
