/**
 * Follows one file's content through every way Kubernetes and editors replace it: atomic
 * rename over the file, ConfigMap/Secret `..data` symlink swaps (the file is a symlink into
 * a generation directory that is swapped and deleted), and in-place rewrites. It watches the
 * parent directory (a watch on the file itself dies with the replaced inode), debounces
 * bursts, and re-reads on a slow poll as a safety net for missed events. Content is
 * delivered only when its bytes change. Reads are capped at maxBytes.
 */
import { watch, type FSWatcher } from 'node:fs'
import { createHash } from 'node:crypto'
import { dirname } from 'node:path'
import { readCapped, type ReadFailure } from '../read-capped.ts'

export interface WatchedFileOptions {
  readonly path: string
  readonly maxBytes: number
  readonly debounceMs?: number
  readonly pollMs?: number
  readonly onContent: (content: Buffer) => void
  readonly onFailure: (failure: ReadFailure, detail: string) => void
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
