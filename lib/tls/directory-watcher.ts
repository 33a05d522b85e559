/**
 * Says "this material may have changed" for a set of mount directories (SPEC §8). It watches
 * the DIRECTORIES, not the files: kubelet replaces `..data` by rename and deletes the old
 * generation directory, so a watch on a file (an inode) goes quiet after the first swap, while
 * the directory sees every rename. Bursts (one swap is several events) are debounced into one
 * signal. A reconciliation poll signals every pollMs regardless, for missed events and for
 * writers that overwrite files in place on filesystems that report nothing.
 *
 * A directory that is itself replaced (or missing, or whose watch errors) is re-armed: checked
 * on every event and every poll by comparing (dev, inode), and retried every rearmMs while it
 * cannot be watched. A successful re-arm signals, since anything may have changed meanwhile.
 *
 * It never reads material: the manager re-reads and compares fingerprints, so a spurious
 * signal costs one read.
 */
import { watch, type FSWatcher } from 'node:fs'
import { stat } from 'node:fs/promises'

export interface DirectoryWatcherOptions {
  readonly directories: readonly string[]
  readonly debounceMs: number
  /** Reconciliation poll; 0 disables it (tests). Default 5 minutes. */
  readonly pollMs?: number
  /** Whether to use fs.watch at all (false: poll only). Default true. */
  readonly watch?: boolean
  /** How often to retry a directory that cannot be watched. Default min(1000, pollMs). */
  readonly rearmMs?: number
  readonly onMaybeChanged: (cause: 'event' | 'poll' | 'rearm') => void
  readonly onWatchError?: (directory: string, err: Error) => void
}

interface Watched {
  readonly directory: string
  watcher: FSWatcher | null
  identity: string
}

const DEFAULT_TLS_POLL_MS = 5 * 60 * 1000

export class DirectoryWatcher {
  readonly #options: DirectoryWatcherOptions
  readonly #watched: Watched[]
  #debounce: NodeJS.Timeout | null = null
  #poll: NodeJS.Timeout | null = null
  #rearm: NodeJS.Timeout | null = null
  #burstStart = 0
  #verifying: Promise<boolean> | null = null
  #closed = false

  constructor (options: DirectoryWatcherOptions) {
    this.#options = options
    this.#watched = [...new Set(options.directories)].map((directory) => ({ directory, watcher: null, identity: '' }))
  }

  async start (): Promise<void> {
    if (this.#options.watch !== false) await this.#verifyAll()
    const pollMs = this.#options.pollMs ?? DEFAULT_TLS_POLL_MS
    if (pollMs > 0) {
      this.#poll = setInterval(() => { void this.#onPoll() }, pollMs)
      this.#poll.unref()
    }
  }

  close (): void {
    if (this.#closed) return
    this.#closed = true
    for (const entry of this.#watched) this.#disarm(entry)
    if (this.#debounce !== null) clearTimeout(this.#debounce)
    if (this.#poll !== null) clearInterval(this.#poll)
    if (this.#rearm !== null) clearTimeout(this.#rearm)
    this.#debounce = this.#poll = this.#rearm = null
  }

  async #onPoll (): Promise<void> {
    if (this.#options.watch !== false) await this.#verifyAll()
    if (!this.#closed) this.#options.onMaybeChanged('poll')
  }

  /**
   * Re-arms every directory that was replaced, vanished, or lost its watch; true if any was.
   * Concurrent callers (an event and the poll) share one pass, so a directory is never armed twice.
   */
  #verifyAll (): Promise<boolean> {
    this.#verifying ??= this.#verifyPass().finally(() => { this.#verifying = null })
    return this.#verifying
  }

  async #verifyPass (): Promise<boolean> {
    let rearmed = false
    for (const entry of this.#watched) {
      const identity = await identityOf(entry.directory)
      if (this.#closed) return false
      if (entry.watcher !== null && identity === entry.identity) continue
      this.#disarm(entry)
      if (identity !== null && await this.#arm(entry)) rearmed = true
    }
    this.#scheduleRearmIfNeeded()
    return rearmed
  }

  async #arm (entry: Watched): Promise<boolean> {
    const identity = await identityOf(entry.directory)
    if (identity === null || this.#closed) return false
    try {
      const watcher = watch(entry.directory, { persistent: false }, () => { this.#onEvent() })
      watcher.on('error', (err) => {
        this.#options.onWatchError?.(entry.directory, err)
        if (entry.watcher === watcher) this.#disarm(entry)
        this.#scheduleRearmIfNeeded()
      })
      entry.watcher = watcher
      entry.identity = identity
      return true
    } catch (err) {
      this.#options.onWatchError?.(entry.directory, err as Error)
      return false
    }
  }

  #disarm (entry: Watched): void {
    entry.watcher?.close()
    entry.watcher = null
    entry.identity = ''
  }

  #scheduleRearmIfNeeded (): void {
    if (this.#closed || this.#rearm !== null || this.#watched.every((entry) => entry.watcher !== null)) return
    const pollMs = this.#options.pollMs ?? DEFAULT_TLS_POLL_MS
    const rearmMs = this.#options.rearmMs ?? (pollMs > 0 ? Math.min(1000, pollMs) : 1000)
    this.#rearm = setTimeout(() => {
      this.#rearm = null
      void this.#verifyAll().then((rearmed) => {
        if (rearmed && !this.#closed) this.#options.onMaybeChanged('rearm')
      })
    }, rearmMs)
    this.#rearm.unref()
  }

  #onEvent (): void {
    if (this.#closed) return
    // Trailing debounce, but a burst that never pauses still signals every maxWait.
    const now = Date.now()
    if (this.#burstStart === 0) this.#burstStart = now
    const maxWait = Math.max(this.#options.debounceMs * 5, 1000)
    const delay = Math.min(this.#options.debounceMs, Math.max(0, this.#burstStart + maxWait - now))
    if (this.#debounce !== null) clearTimeout(this.#debounce)
    this.#debounce = setTimeout(() => {
      this.#debounce = null
      this.#burstStart = 0
      // An event on a directory that was renamed away or deleted is the last one it will send.
      void this.#verifyAll().then(() => {
        if (!this.#closed) this.#options.onMaybeChanged('event')
      })
    }, delay)
    this.#debounce.unref()
  }
}

async function identityOf (directory: string): Promise<string | null> {
  try {
    const info = await stat(directory)
    return info.isDirectory() ? `${info.dev}:${info.ino}` : null
  } catch {
    return null
  }
}
