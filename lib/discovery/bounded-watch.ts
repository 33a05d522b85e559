/**
 * The Kubernetes watch request of @kubernetes/client-node's `Watch`, with every event line
 * bounded. The library reads the stream with node:readline, which buffers a line until its
 * newline: a watch answer streaming bytes without one (a broken proxy in front of the API
 * server, or anything answering in its place) grew the router's memory at the stream's rate
 * until V8's string limit ended the process. Here a line over maxLineBytes ends the watch with
 * an error, which the informer's adapter (endpoint-slice-watch.ts) reports and restarts with
 * backoff, keeping the last slices.
 *
 * The rest is the library's watch protocol, so its ListWatch informer drives this unchanged:
 * `?watch=true` and the query, the KubeConfig's authentication, one JSON event per line
 * (lines that are not JSON are ignored), `done(err)` once, a TimeoutError after
 * inactivityMs without a byte (the informer re-watches at once on it), and an AbortController
 * that ends the request. The request goes through the fetch of the undici the library itself
 * uses, because the KubeConfig's dispatcher (cluster CA, client certificates) is one of its
 * Agents.
 */
import { createRequire } from 'node:module'
import { STATUS_CODES } from 'node:http'
import { HttpMethod, RequestContext, type KubeConfig } from '@kubernetes/client-node'

/** The part of that undici's fetch used here (its types are the library's undici's, not ours). */
type LibraryFetch = (url: URL, init: { method: 'GET', headers: Record<string, string>, dispatcher: unknown, signal: AbortSignal }) => Promise<Response>
const libraryRequire = createRequire(import.meta.resolve('@kubernetes/client-node'))
const { fetch: libraryFetch } = libraryRequire('undici') as { fetch: LibraryFetch }

/** Larger than any object etcd stores (1.5 MiB by default), even JSON-escaped twice over. */
export const DEFAULT_MAX_WATCH_LINE_BYTES = 8 * 1024 * 1024
const DEFAULT_INACTIVITY_MS = 30_000
const NEWLINE = 0x0a

export type WatchEventCallback = (phase: string, apiObj: unknown, watchObj?: unknown) => void
export type WatchDoneCallback = (err: unknown) => void

export interface BoundedWatchOptions {
  readonly maxLineBytes?: number
  readonly inactivityMs?: number
}

export class WatchLineTooLongError extends Error {
  constructor (maxLineBytes: number) {
    super(`watch event line over ${maxLineBytes} bytes without a newline; the watch is ended`)
    this.name = 'WatchLineTooLongError'
  }
}

export class BoundedWatch {
  readonly #config: KubeConfig
  readonly #maxLineBytes: number
  readonly #inactivityMs: number

  constructor (config: KubeConfig, options: BoundedWatchOptions = {}) {
    this.#config = config
    this.#maxLineBytes = options.maxLineBytes ?? DEFAULT_MAX_WATCH_LINE_BYTES
    this.#inactivityMs = options.inactivityMs ?? DEFAULT_INACTIVITY_MS
  }

  async watch (path: string, query: Record<string, string | number | boolean | undefined>, callback: WatchEventCallback, done: WatchDoneCallback): Promise<AbortController> {
    const cluster = this.#config.getCurrentCluster()
    if (cluster === null) throw new Error('No currently active cluster')
    const url = new URL(cluster.server + path)
    url.searchParams.set('watch', 'true')
    for (const [key, value] of Object.entries(query)) {
      if (value !== undefined) url.searchParams.set(key, String(value))
    }
    const controller = new AbortController()
    const ctx = new RequestContext(url.toString(), HttpMethod.GET)
    await this.#config.applySecurityAuthentication(ctx)

    let finished = false
    const finish = (err: unknown): void => {
      if (finished) return
      finished = true
      clearTimeout(timer)
      controller.abort()
      done(err)
    }
    // Restarted by every chunk (refresh: no allocation per chunk).
    const timer = setTimeout(() => { finish(new DOMException('The operation was aborted due to timeout', 'TimeoutError')) }, this.#inactivityMs)
    timer.unref()
    const arm = (): void => { timer.refresh() }
    try {
      const response = await libraryFetch(url, { method: 'GET', headers: ctx.getHeaders(), dispatcher: ctx.getDispatcher(), signal: controller.signal })
      if (response.status !== 200) {
        const error = new Error(response.statusText || STATUS_CODES[response.status] || 'Internal Server Error') as Error & { statusCode: number }
        error.statusCode = response.status
        void response.body?.cancel().catch(() => {})
        throw error
      }
      arm()
      const body = response.body
      if (body === null) { finish(null); return controller }
      const lines = new LineSplitter(this.#maxLineBytes)
      void (async () => {
        for await (const chunk of body) {
          if (finished) return
          arm()
          for (const line of lines.push(chunk as Uint8Array)) {
            if (finished) return
            let event: { type?: unknown, object?: unknown }
            try { event = JSON.parse(line) as typeof event } catch { continue }
            callback(String(event.type), event.object, event)
          }
        }
        finish(null)
      })().catch(finish)
    } catch (err) {
      finish(err)
    }
    return controller
  }
}

/** Newline-delimited lines out of byte chunks, a line never over maxLineBytes. */
export class LineSplitter {
  readonly #maxLineBytes: number
  #parts: Buffer[] = []
  #partBytes = 0

  constructor (maxLineBytes: number) {
    this.#maxLineBytes = maxLineBytes
  }

  /** The lines the chunk completes; throws WatchLineTooLongError past the bound. */
  push (chunk: Uint8Array): string[] {
    const bytes = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
    const lines: string[] = []
    let start = 0
    let end = bytes.indexOf(NEWLINE, start)
    while (end >= 0) {
      if (this.#partBytes + end - start > this.#maxLineBytes) throw new WatchLineTooLongError(this.#maxLineBytes)
      const tail = bytes.subarray(start, end)
      lines.push(this.#parts.length === 0 ? tail.toString('utf8') : Buffer.concat([...this.#parts, tail]).toString('utf8'))
      this.#parts = []
      this.#partBytes = 0
      start = end + 1
      end = bytes.indexOf(NEWLINE, start)
    }
    if (start < bytes.length) {
      this.#partBytes += bytes.length - start
      if (this.#partBytes > this.#maxLineBytes) throw new WatchLineTooLongError(this.#maxLineBytes)
      // A copy: the stream may reuse the chunk's memory.
      this.#parts.push(Buffer.from(bytes.subarray(start)))
    }
    return lines
  }
}
