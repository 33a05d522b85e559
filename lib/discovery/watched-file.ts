/**
 * Follows one file's content through every way Kubernetes and editors replace it: atomic
 * rename over the file, ConfigMap/Secret `..data` symlink swaps (the file is a symlink into
 * a generation directory that is swapped and deleted), and in-place rewrites. It watches the
 * parent directory (a watch on the file itself dies with the replaced inode), debounces
 * bursts, and re-reads on a slow poll as a safety net for missed events. Content is
 * delivered only when its bytes change. Reads are capped at maxBytes.
 */
import { watch, type FSWatcher } from 'node:fs'
import { constants as fsConstants } from 'node:fs'
import { open } from 'node:fs/promises'
import { createHash } from 'node:crypto'
import { dirname } from 'node:path'

export type ReadFailure = 'missing' | 'unreadable' | 'too_large'

export interface WatchedFileOptions {
  readonly path: string
  readonly maxBytes: number
  readonly debounceMs?: number
  readonly pollMs?: number
  readonly onContent: (content: Buffer) => void
  readonly onFailure: (failure: ReadFailure, detail: string) => void
}

/**
 * Opened non-blocking (issue 14): open(2) of a FIFO with no writer blocks, which would hang a
 * libuv thread, every later read, and shutdown (which waits for a read in progress); with
 * O_NONBLOCK it returns at once and the fstat below refuses anything but a regular file (FIFO,
 * socket, device). O_NONBLOCK changes nothing for regular files.
 */
const OPEN_FLAGS = fsConstants.O_RDONLY | fsConstants.O_NONBLOCK | fsConstants.O_NOCTTY

export interface ReadCappedOptions {
  /** Refuse a symlink as the last path component (the caller resolved and checked it). */
  readonly noFollow?: boolean
}

export async function readCapped (path: string, maxBytes: number, options: ReadCappedOptions = {}): Promise<{ ok: true, content: Buffer } | { ok: false, failure: ReadFailure, detail: string }> {
  let handle
  try {
    handle = await open(path, options.noFollow === true ? OPEN_FLAGS | fsConstants.O_NOFOLLOW : OPEN_FLAGS)
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOENT') return { ok: false, failure: 'missing', detail: `${path} does not exist` }
    if (code === 'ELOOP') return { ok: false, failure: 'unreadable', detail: `${path} became a symlink while it was read` }
    return { ok: false, failure: 'unreadable', detail: `${path}: ${code ?? (err as Error).message}` }
  }
  try {
    const info = await handle.stat()
    if (!info.isFile()) return { ok: false, failure: 'unreadable', detail: `${path} is not a regular file (${kindOf(info)})` }
    const size = info.size
    if (size > maxBytes) return { ok: false, failure: 'too_large', detail: `${path} is ${size} bytes, over the ${maxBytes}-byte limit` }
    // Read one byte past the limit: the file may grow between stat and read.
    const buffer = Buffer.allocUnsafe(maxBytes + 1)
    let length = 0
    for (;;) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, length)
      if (bytesRead === 0) break
      length += bytesRead
      if (length > maxBytes) return { ok: false, failure: 'too_large', detail: `${path} is over the ${maxBytes}-byte limit` }
    }
    return { ok: true, content: Buffer.from(buffer.subarray(0, length)) }
  } catch (err) {
    return { ok: false, failure: 'unreadable', detail: `${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` }
  } finally {
    await handle.close()
  }
}

function kindOf (info: { isFIFO (): boolean, isSocket (): boolean, isCharacterDevice (): boolean, isBlockDevice (): boolean, isDirectory (): boolean }): string {
  if (info.isFIFO()) return 'a FIFO'
  if (info.isSocket()) return 'a socket'
  if (info.isCharacterDevice() || info.isBlockDevice()) return 'a device'
  if (info.isDirectory()) return 'a directory'
  return 'not a file'
}

export class WatchedFile {
  readonly #options: WatchedFileOptions
  #watcher: FSWatcher | null = null
  #debounce: NodeJS.Timeout | null = null
  #poll: NodeJS.Timeout | null = null
  #lastDigest = ''
  #lastFailure = ''
  #reading: Promise<void> | null = null
  #again = false
  #closed = false

  constructor (options: WatchedFileOptions) {
    this.#options = options
  }

  /** Reads the file once (the returned promise settles after the first delivery) and starts watching. */
  async start (): Promise<void> {
    this.#arm()
    const pollMs = this.#options.pollMs ?? 10000
    if (pollMs > 0) {
      this.#poll = setInterval(() => { this.#rearmIfNeeded(); void this.check() }, pollMs)
      this.#poll.unref()
    }
    await this.check()
  }

  close (): void {
    this.#closed = true
    this.#watcher?.close()
    this.#watcher = null
    if (this.#debounce !== null) clearTimeout(this.#debounce)
    if (this.#poll !== null) clearInterval(this.#poll)
  }

  /** Re-reads now; concurrent calls coalesce into one extra read. */
  check (): Promise<void> {
    if (this.#reading !== null) {
      this.#again = true
      return this.#reading
    }
    this.#reading = this.#read().finally(() => {
      this.#reading = null
      if (this.#again && !this.#closed) {
        this.#again = false
        void this.check()
      }
    })
    return this.#reading
  }

  async #read (): Promise<void> {
    const result = await readCapped(this.#options.path, this.#options.maxBytes)
    if (this.#closed) return
    if (!result.ok) {
      const key = `${result.failure}:${result.detail}`
      if (key !== this.#lastFailure) {
        this.#lastFailure = key
        this.#lastDigest = ''
        this.#options.onFailure(result.failure, result.detail)
      }
      return
    }
    this.#lastFailure = ''
    const digest = createHash('sha256').update(result.content).digest('hex')
    if (digest === this.#lastDigest) return
    this.#lastDigest = digest
    this.#options.onContent(result.content)
  }

  #arm (): void {
    try {
      this.#watcher = watch(dirname(this.#options.path), { persistent: false }, () => { this.#schedule() })
      this.#watcher.on('error', () => {
        // The directory itself went away (a replaced mount); the poll re-arms the watch.
        this.#watcher?.close()
        this.#watcher = null
      })
    } catch {
      this.#watcher = null
    }
  }

  #rearmIfNeeded (): void {
    if (this.#watcher === null && !this.#closed) this.#arm()
  }

  #schedule (): void {
    if (this.#closed) return
    if (this.#debounce !== null) clearTimeout(this.#debounce)
    this.#debounce = setTimeout(() => {
      this.#debounce = null
      void this.check()
    }, this.#options.debounceMs ?? 100)
    this.#debounce.unref()
  }
}
