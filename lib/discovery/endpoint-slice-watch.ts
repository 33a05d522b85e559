/**
 * List+watch of the EndpointSlices of one Service with @kubernetes/client-node, kept alive.
 *
 * The library's informer (ListWatch) relists by itself on 410 Gone, but stops for good on
 * any other error (API server down, 401/403, network): this adapter restarts it with
 * exponential backoff (1 s doubling to 30 s, jittered) and keeps the last state meanwhile.
 * When the consumer fails on an event, the informer's cache already holds what the consumer
 * missed, so the restart after it is a fresh informer: its list gives the consumer the truth.
 * It only translates informer events; what a slice means is the consumer's business (the
 * Stargate target source, and the peer set of router replicas). The watch request is
 * bounded-list-watch.ts: the library's, with a bound on each event line.
 */
import { ListWatch, type KubeConfig, type V1EndpointSlice, type Watch } from '@kubernetes/client-node'
import { BoundedWatch, boundedList } from './bounded-list-watch.ts'
import type { Logger } from '../log.ts'

export interface EndpointSliceConsumer {
  /** A complete list: the set of slices is exactly `items` (relists replace everything). */
  onList (items: readonly unknown[]): void
  onUpsert (slice: unknown): void
  onDelete (slice: unknown): void
}

export interface EndpointSliceWatchOptions {
  readonly kubeConfig: KubeConfig
  readonly namespace: string
  readonly serviceName: string
  readonly consumer: EndpointSliceConsumer
  readonly logger: Logger
  readonly onRestart?: () => void
  /**
   * An object from the API server that is not one of the watched slices was dropped before the
   * informer saw it: not an object with metadata (the informer reads `metadata` unchecked, and
   * its throw would end the process), or a slice of another namespace or Service.
   */
  readonly onIgnored?: (reason: IgnoredReason) => void
  readonly backoff?: { readonly baseMs: number, readonly maxMs: number }
  readonly random?: () => number
  readonly now?: () => number
}

type WatchDone = (err: unknown) => void
type WatchCallback = (phase: string, apiObj: unknown, watchObj?: unknown) => void

export type IgnoredReason = 'malformed_slice' | 'foreign_slice'

const SERVICE_NAME_LABEL = 'kubernetes.io/service-name'

/**
 * Why an object is not a slice of this namespace and Service, or null when it is one. A
 * DELETED object may carry another Service's label (the API server sends DELETED for a slice
 * that stopped matching the selector) and a BOOKMARK only a resourceVersion: for those the
 * label is not checked (`phase`).
 */
export function ignoredReason (obj: unknown, namespace: string, serviceName: string, phase = 'ADDED'): IgnoredReason | null {
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) return 'malformed_slice'
  const metadata = (obj as { metadata?: unknown }).metadata
  if (metadata === null || typeof metadata !== 'object' || Array.isArray(metadata)) return 'malformed_slice'
  const { namespace: ns, labels } = metadata as { namespace?: unknown, labels?: unknown }
  // A list item may leave its namespace out (it is the list's); a watch object names it.
  if (phase === 'BOOKMARK') return null
  if (ns !== undefined && ns !== namespace) return 'foreign_slice'
  if (phase === 'DELETED') return null
  const service = labels !== null && typeof labels === 'object' ? (labels as Record<string, unknown>)[SERVICE_NAME_LABEL] : undefined
  return service === serviceName ? null : 'foreign_slice'
}

/**
 * Relists in a row (a 410 after every event resets the library's own delay to 0): the n-th
 * list within RELIST_WINDOW_MS of others waits RELIST_BASE_MS × 2^(n-1), at most the backoff
 * maximum. A real compaction relists once in minutes and never waits.
 */
const RELIST_WINDOW_MS = 60_000
const RELIST_BASE_MS = 250

export class EndpointSliceWatch {
  readonly #options: EndpointSliceWatchOptions
  /** Null until a run needs one, and after a consumer failure or a stop. */
  #informer: ListWatch<V1EndpointSlice> | null = null
  /** The informer in use; what a replaced one still delivers (its list, events, errors) is dropped. */
  #generation = 0
  readonly #now: () => number
  #attempt = 0
  #restartTimer: NodeJS.Timeout | null = null
  #stopped = true
  #listed = false
  #watching = false
  #unhealthySince: number
  /** Start times of the lists in the last RELIST_WINDOW_MS (a handful: each waits longer). */
  #listStarts: number[] = []

  constructor (options: EndpointSliceWatchOptions) {
    this.#options = options
    this.#now = options.now ?? Date.now
    this.#unhealthySince = this.#now()
  }

  /** Milliseconds since the slices were last known to be current; 0 while the watch is up. */
  stalenessMs (): number {
    return this.#listed && this.#watching ? 0 : this.#now() - this.#unhealthySince
  }

  start (): void {
    if (!this.#stopped) return
    this.#stopped = false
    this.#run()
  }

  async stop (): Promise<void> {
    this.#stopped = true
    if (this.#restartTimer !== null) clearTimeout(this.#restartTimer)
    this.#restartTimer = null
    this.#setWatching(false)
    await this.#replaceInformer()
  }

  #run (): void {
    this.#informer ??= this.#newInformer()
    const current = this.#isCurrent(this.#generation)
    this.#contain(this.#informer.start(), current)
  }

  #isCurrent (generation: number): () => boolean {
    return () => generation === this.#generation && !this.#stopped
  }

  /** Stops the informer in use; the next run starts a fresh one. */
  async #replaceInformer (): Promise<void> {
    const informer = this.#informer
    this.#informer = null
    this.#generation++
    await informer?.stop()
  }

  #newInformer (): ListWatch<V1EndpointSlice> {
    const { kubeConfig, namespace, serviceName, consumer } = this.#options
    const current = this.#isCurrent(++this.#generation)
    const labelSelector = `${SERVICE_NAME_LABEL}=${serviceName}`
    const path = `/apis/discovery.k8s.io/v1/namespaces/${encodeURIComponent(namespace)}/endpointslices`
    const listFn = async (): Promise<{ items: V1EndpointSlice[], metadata?: { resourceVersion?: string } }> => {
      await this.#relistPause()
      const list = await boundedList(kubeConfig, path, { labelSelector })
      // A stopped informer still goes on from its list to a watch: it must not get either.
      if (!current()) throw new Error('endpointslice informer replaced')
      const items = list.items.filter((item) => this.#belongs(item)) as V1EndpointSlice[]
      // Applied here, in full, before the informer replays it as per-object events: the
      // consumer sees one complete list and never a half-applied relist.
      consumer.onList(items)
      this.#listed = true
      return { items, metadata: list.metadata }
    }
    const informer = new ListWatch<V1EndpointSlice>(path, this.#trackingWatch(new BoundedWatch(kubeConfig), current) as Watch, listFn, false, labelSelector)
    informer.on('add', (obj) => { if (current()) consumer.onUpsert(obj) })
    informer.on('update', (obj) => { if (current()) consumer.onUpsert(obj) })
    informer.on('delete', (obj) => { if (current()) consumer.onDelete(obj) })
    informer.on('error', (err) => { if (current()) this.#onError(err) })
    return informer
  }

  /** Wraps the library's Watch to learn when a watch stream is established and when it ends. */
  #trackingWatch (watch: BoundedWatch, current: () => boolean): Pick<Watch, 'watch'> {
    return {
      watch: async (path: string, query: Record<string, string | number | boolean | undefined>, callback: WatchCallback, done: WatchDone): Promise<AbortController> => {
        if (!current()) {
          // A replaced informer asking for a watch after its stop: it gets none.
          const none = new AbortController()
          none.abort()
          return none
        }
        let ended = false
        const controller = await watch.watch(path, query, (phase, obj, watchObj) => {
          if (!current()) return
          if (phase === 'ERROR') {
            // The informer reads `code` of it (410: relist); anything else is not a Status.
            if (obj === null || typeof obj !== 'object') return
          } else if (!this.#belongs(obj, phase)) {
            return
          }
          this.#attempt = 0
          this.#contain(callback(phase, obj, watchObj), current)
        }, (err: unknown) => {
          ended = true
          if (!current()) return
          this.#setWatching(false)
          this.#contain(done(err), current)
        })
        // Replaced while the request was made: the informer's stop had no request to abort.
        if (!current()) {
          controller.abort()
          return controller
        }
        if (!ended) {
          this.#attempt = 0
          this.#setWatching(true)
        }
        return controller
      },
    }
  }

  /** Whether a slice from the API server is one of ours; counted when it is not. */
  #belongs (obj: unknown, phase?: string): boolean {
    const reason = ignoredReason(obj, this.#options.namespace, this.#options.serviceName, phase)
    if (reason === null) return true
    this.#options.onIgnored?.(reason)
    return false
  }

  /**
   * The informer's handlers are async and the watch drops what they return: a rejection would
   * be unhandled, which ends the process (lib/uncaught-errors.ts). It is the consumer failing
   * on an event (the informer's own failures are errors it reports): the informer's cache went
   * ahead of the consumer, so the one restart after it is a fresh informer, whose list gives
   * the consumer every slice again. Later rejections of the replaced informer are dropped.
   */
  #contain (result: unknown, current: () => boolean): void {
    if (!(result instanceof Promise)) return
    result.catch((err: unknown) => {
      if (!current()) return
      // Stopping an informer only aborts its request; a failure of it must not go unhandled.
      this.#replaceInformer().catch((stopErr: unknown) => { this.#options.logger.debug({ err: stopErr }, 'endpointslice informer stop failed') })
      const delay = this.#restart()
      this.#options.logger.error({ reason: describeError(err), retryInMs: delay, namespace: this.#options.namespace, service: this.#options.serviceName },
        'endpointslice event could not be applied; relisting the slices')
    })
  }

  /** Waits before a list that follows others closely (RELIST_WINDOW_MS); throws once stopped. */
  async #relistPause (): Promise<void> {
    const now = this.#now()
    this.#listStarts = this.#listStarts.filter((at) => now - at < RELIST_WINDOW_MS)
    const recent = this.#listStarts.length
    if (recent > 0) {
      const maxMs = this.#options.backoff?.maxMs ?? 30_000
      const random = this.#options.random ?? Math.random
      const waitMs = Math.round(Math.min(maxMs, RELIST_BASE_MS * 2 ** Math.min(recent - 1, 20)) * (0.8 + 0.4 * random()))
      this.#options.logger.warn({ recentLists: recent, waitMs, namespace: this.#options.namespace, service: this.#options.serviceName },
        'endpointslices relisted again soon after the last list; waiting first')
      await new Promise((resolve) => { setTimeout(resolve, waitMs).unref() })
      if (this.#stopped) throw new Error('endpointslice watch stopped')
    }
    this.#listStarts.push(this.#now())
  }

  #setWatching (watching: boolean): void {
    if (this.#watching && !watching) this.#unhealthySince = this.#now()
    this.#watching = watching
  }

  #onError (err: unknown): void {
    const delay = this.#restart()
    if (delay === null) return
    this.#options.logger.warn({ reason: describeError(err), retryInMs: delay, namespace: this.#options.namespace, service: this.#options.serviceName },
      'endpointslice watch failed; keeping the last known slices and restarting')
  }

  /** Runs the informer again after the backoff: the delay, or null once stopped. */
  #restart (): number | null {
    this.#setWatching(false)
    if (this.#stopped) return null
    const delay = this.#nextDelay()
    this.#options.onRestart?.()
    if (this.#restartTimer !== null) clearTimeout(this.#restartTimer)
    this.#restartTimer = setTimeout(() => {
      this.#restartTimer = null
      if (!this.#stopped) this.#run()
    }, delay)
    this.#restartTimer.unref()
    return delay
  }

  #nextDelay (): number {
    const base = this.#options.backoff?.baseMs ?? 1000
    const max = this.#options.backoff?.maxMs ?? 30000
    const exp = Math.min(max, base * 2 ** this.#attempt)
    this.#attempt = Math.min(this.#attempt + 1, 30)
    const random = this.#options.random ?? Math.random
    return Math.round(exp * (0.8 + 0.4 * random()))
  }
}

/** Not every numeric `code` is a status: a DOMException's is its legacy code (AbortError: 20). */
function isHttpStatus (code: unknown): code is number {
  return typeof code === 'number' && Number.isInteger(code) && code >= 100 && code <= 599
}

/** A log-safe description of a client error: status code and message, never headers. */
export function describeError (err: unknown): string {
  if (typeof err !== 'object' || err === null) return String(err)
  const e = err as { code?: unknown, statusCode?: unknown, message?: unknown, cause?: { code?: unknown } }
  const status = isHttpStatus(e.statusCode) ? e.statusCode : isHttpStatus(e.code) ? e.code : undefined
  const hints: Record<number, string> = {
    401: 'the API server rejected the credentials (401): check the service account token',
    403: 'the API server denied access (403): the Role needs get/list/watch on endpointslices in this namespace',
  }
  if (status !== undefined && hints[status] !== undefined) return hints[status]
  const code = typeof e.cause?.code === 'string' ? ` (${e.cause.code})` : typeof e.code === 'string' ? ` (${e.code})` : ''
  const message = typeof e.message === 'string' ? e.message.split('\n')[0] : 'unknown error'
  return status !== undefined ? `HTTP ${status}: ${message}` : `${message}${code}`
}
