/**
 * List+watch of the EndpointSlices of one Service with @kubernetes/client-node, kept alive.
 *
 * The library's informer (ListWatch) relists by itself on 410 Gone, but stops for good on
 * any other error (API server down, 401/403, network): this adapter restarts it with
 * exponential backoff (1 s doubling to 30 s, jittered) and keeps the last state meanwhile.
 * It only translates informer events; what a slice means is the consumer's business (the
 * Stargate target source, and the peer set of router replicas). The watch request is
 * bounded-watch.ts: the library's, with a bound on each event line.
 */
import { DiscoveryV1Api, ListWatch, type KubeConfig, type V1EndpointSlice, type Watch } from '@kubernetes/client-node'
import { BoundedWatch } from './bounded-watch.ts'
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
  readonly backoff?: { readonly baseMs: number, readonly maxMs: number }
  readonly random?: () => number
  readonly now?: () => number
}

type WatchDone = (err: unknown) => void
type WatchCallback = (phase: string, apiObj: unknown, watchObj?: unknown) => void

export class EndpointSliceWatch {
  readonly #options: EndpointSliceWatchOptions
  readonly #informer: ListWatch<V1EndpointSlice>
  readonly #now: () => number
  #attempt = 0
  #restartTimer: NodeJS.Timeout | null = null
  #stopped = true
  #listed = false
  #watching = false
  #unhealthySince: number

  constructor (options: EndpointSliceWatchOptions) {
    this.#options = options
    this.#now = options.now ?? Date.now
    this.#unhealthySince = this.#now()
    const { kubeConfig, namespace, serviceName, consumer } = options
    const api = kubeConfig.makeApiClient(DiscoveryV1Api)
    const labelSelector = `kubernetes.io/service-name=${serviceName}`
    const path = `/apis/discovery.k8s.io/v1/namespaces/${encodeURIComponent(namespace)}/endpointslices`
    const listFn = async (): Promise<{ items: V1EndpointSlice[], metadata?: { resourceVersion?: string } }> => {
      const list = await api.listNamespacedEndpointSlice({ namespace, labelSelector })
      // Applied here, in full, before the informer replays it as per-object events: the
      // consumer sees one complete list and never a half-applied relist.
      consumer.onList(list.items)
      this.#listed = true
      return list
    }
    this.#informer = new ListWatch<V1EndpointSlice>(path, this.#trackingWatch(new BoundedWatch(kubeConfig)) as Watch, listFn, false, labelSelector)
    this.#informer.on('add', (obj) => { consumer.onUpsert(obj) })
    this.#informer.on('update', (obj) => { consumer.onUpsert(obj) })
    this.#informer.on('delete', (obj) => { consumer.onDelete(obj) })
    this.#informer.on('error', (err) => { this.#onError(err) })
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
    await this.#informer.stop()
  }

  #run (): void {
    this.#informer.start().catch((err: unknown) => { this.#onError(err) })
  }

  /** Wraps the library's Watch to learn when a watch stream is established and when it ends. */
  #trackingWatch (watch: BoundedWatch): Pick<Watch, 'watch'> {
    return {
      watch: async (path: string, query: Record<string, string | number | boolean | undefined>, callback: WatchCallback, done: WatchDone): Promise<AbortController> => {
        let ended = false
        const controller = await watch.watch(path, query, (phase, obj, watchObj) => {
          this.#attempt = 0
          callback(phase, obj, watchObj)
        }, (err: unknown) => {
          ended = true
          this.#setWatching(false)
          done(err)
        })
        if (!ended) {
          this.#attempt = 0
          this.#setWatching(true)
        }
        return controller
      },
    }
  }

  #setWatching (watching: boolean): void {
    if (this.#watching && !watching) this.#unhealthySince = this.#now()
    this.#watching = watching
  }

  #onError (err: unknown): void {
    this.#setWatching(false)
    if (this.#stopped) return
    const delay = this.#nextDelay()
    this.#options.onRestart?.()
    this.#options.logger.warn({ reason: describeError(err), retryInMs: delay, namespace: this.#options.namespace, service: this.#options.serviceName },
      'endpointslice watch failed; keeping the last known slices and restarting')
    if (this.#restartTimer !== null) clearTimeout(this.#restartTimer)
    this.#restartTimer = setTimeout(() => {
      this.#restartTimer = null
      if (!this.#stopped) this.#run()
    }, delay)
    this.#restartTimer.unref()
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

/** A log-safe description of a client error: status code and message, never headers. */
function describeError (err: unknown): string {
  if (typeof err !== 'object' || err === null) return String(err)
  const e = err as { code?: unknown, statusCode?: unknown, message?: unknown, cause?: { code?: unknown } }
  const status = typeof e.statusCode === 'number' ? e.statusCode : typeof e.code === 'number' ? e.code : undefined
  const hints: Record<number, string> = {
    401: 'the API server rejected the credentials (401): check the service account token',
    403: 'the API server denied access (403): the Role needs get/list/watch on endpointslices in this namespace',
  }
  if (status !== undefined && hints[status] !== undefined) return hints[status]
  const code = typeof e.cause?.code === 'string' ? ` (${e.cause.code})` : typeof e.code === 'string' ? ` (${e.code})` : ''
  const message = typeof e.message === 'string' ? e.message.split('\n')[0] : 'unknown error'
  return status !== undefined ? `HTTP ${status}: ${message}` : `${message}${code}`
}
