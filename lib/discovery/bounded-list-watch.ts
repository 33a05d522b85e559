/**
 * The Kubernetes list and watch requests of @kubernetes/client-node's ListWatch informer, each
 * bounded. The library's own buffer both without limit: the list answer whole, with no deadline
 * (a list that never ends grows the router's memory at its rate; a 300 MiB one holds 1.8 GiB and
 * blocks the event loop past the kubelet's probe timeout), and each watch line until its
 * newline (node:readline: a watch answer streaming bytes without one grows memory until V8's
 * string limit ends the process). That is what a broken proxy in front of the API server, or
 * anything answering in its place, can send. Here a list answer is read up to maxBytes within
 * timeoutMs, and a watch line over maxLineBytes ends the watch; each failure reaches the
 * informer's adapter (endpoint-slice-watch.ts), which reports it and restarts with backoff,
 * keeping the last slices.
 *
 * The rest is the library's protocol, so its ListWatch drives these unchanged: the query, the
 * KubeConfig's authentication, the list's `items` and `metadata.resourceVersion` as JSON (the
 * raw objects, as watch events carry them), `?watch=true`, one JSON event per line (lines
 * that are not a JSON object are ignored), `done(err)` once when the stream ends or fails, a
 * TimeoutError after inactivityMs without a byte (the informer re-watches at once on it), and
 * an AbortController that ends the watch without done (its owner knows it ended it).
 * Requests go through the fetch of the undici the library itself uses, because the
 * KubeConfig's dispatcher (cluster CA, client certificates) is one of its Agents.
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
/** One Service's slices: 1,000 endpoints a slice, ~0.5 MB each; 64 MiB is over 100 full slices. */
export const DEFAULT_MAX_LIST_BYTES = 64 * 1024 * 1024
const DEFAULT_LIST_TIMEOUT_MS = 60_000
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

export interface ListAnswer {
  readonly items: unknown[]
  readonly metadata: { readonly resourceVersion?: string }
}

export interface BoundedListOptions {
  readonly maxBytes?: number
  readonly timeoutMs?: number
}

/**
 * A GET of `path` with `query` as the KubeConfig authenticates it; an answer other than 200 is
 * an error carrying its statusCode (what the informer reads for 410 and the adapter's log for
 * 401 and 403).
 */
async function authorizedGet (config: KubeConfig, path: string, query: Record<string, string | number | boolean | undefined>, signal: AbortSignal): Promise<Response> {
  const cluster = config.getCurrentCluster()
  if (cluster === null) throw new Error('No currently active cluster')
  const url = new URL(cluster.server + path)
  for (const [key, value] of Object.entries(query)) {
    if (value !== undefined) url.searchParams.set(key, String(value))
  }
  const ctx = new RequestContext(url.toString(), HttpMethod.GET)
  await config.applySecurityAuthentication(ctx)
  const response = await libraryFetch(url, { method: 'GET', headers: ctx.getHeaders(), dispatcher: ctx.getDispatcher(), signal })
  if (response.status === 200) return response
  void response.body?.cancel().catch(() => {})
  const error = new Error(response.statusText || STATUS_CODES[response.status] || 'Internal Server Error') as Error & { statusCode: number }
  error.statusCode = response.status
  throw error
}

/** A GET of a list (`path` with `query`): its items and resourceVersion, or an error to restart on. */
export async function boundedList (config: KubeConfig, path: string, query: Record<string, string>, options: BoundedListOptions = {}): Promise<ListAnswer> {
  const maxBytes = options.maxBytes ?? DEFAULT_MAX_LIST_BYTES
  const timeoutMs = options.timeoutMs ?? DEFAULT_LIST_TIMEOUT_MS
  const controller = new AbortController()
  let timedOut = false
  const timer = setTimeout(() => { timedOut = true; controller.abort() }, timeoutMs)
  timer.unref()
  try {
    const response = await authorizedGet(config, path, query, controller.signal)
    const parts: Buffer[] = []
    let bytes = 0
    if (response.body !== null) {
      for await (const chunk of response.body) {
        bytes += (chunk as Uint8Array).byteLength
        if (bytes > maxBytes) {
          controller.abort()
          throw new Error(`list answer over ${maxBytes} bytes; not read further`)
        }
        parts.push(Buffer.from(chunk as Uint8Array))
      }
    }
    let answer: unknown
    try { answer = JSON.parse(Buffer.concat(parts, bytes).toString('utf8')) } catch { throw new Error('list answer is not JSON') }
    const list = answer !== null && typeof answer === 'object' ? answer as { items?: unknown, metadata?: { resourceVersion?: unknown } } : null
    if (list === null || !Array.isArray(list.items)) throw new Error('list answer has no items list')
    const version = list.metadata?.resourceVersion
    return { items: list.items, metadata: typeof version === 'string' ? { resourceVersion: version } : {} }
  } catch (err) {
    throw timedOut ? new Error(`list answer not complete within ${timeoutMs} ms`) : err
  } finally {
    clearTimeout(timer)
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
    const controller = new AbortController()

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
    // The owner's abort ends the watch without done: ListWatch aborts only the request it is
    // replacing or stopping, and a done would make it start a second list+watch (null) or
    // report the abort as a failure (an error), which its owner restarts from.
    controller.signal.addEventListener('abort', () => {
      if (finished) return
      finished = true
      clearTimeout(timer)
    }, { once: true })
    try {
      const response = await authorizedGet(this.#config, path, { watch: 'true', ...query }, controller.signal)
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
            let event: unknown
            try { event = JSON.parse(line) } catch { continue }
            if (event === null || typeof event !== 'object' || Array.isArray(event)) continue
            const { type, object } = event as { type?: unknown, object?: unknown }
            callback(String(type), object, event)
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
