/**
 * HTTP/2 client sessions to Stargate pods, pooled per pod address (SPEC §5: a pooled session
 * per pod, not a connection per call). A pod gets a second session only when the first has
 * as many open streams as the pod allows (its SETTINGS_MAX_CONCURRENT_STREAMS), and at most
 * MAX_SESSIONS_PER_POD: a pod that allows no streams, or a few, cannot make the router open a
 * connection per registration (uncapped, a pod saying 0 would get one new session, never
 * closed, per Pylon retry, until the router ran out of descriptors). A session whose pod allows 0 streams from
 * its first SETTINGS is closed at once and fails what waited for it.
 *
 * Sessions are tagged with the trust key they were made under, so a change of the
 * upstream trust bundle can close exactly the sessions made with the old one; and with their
 * target, so sessions to pods that left the snapshot (or moved to a new IP) are closed
 * gracefully (GOAWAY: open streams finish, no new ones); the pool subscribes to the snapshot
 * for that itself, as HttpPods does.
 */
import http2, { type ClientHttp2Session, type ClientHttp2Stream, type OutgoingHttpHeaders, type SecureClientSessionOptions } from 'node:http2'
import type { SecureContext } from 'node:tls'
import type { PodTarget, SnapshotReader, TargetSnapshot } from '../discovery/types.ts'
import type { Logger } from '../log.ts'
import { GRPC_ERRORS, grpcError } from './errors.ts'

/** The upstream TLS material in force, from lib/tls (null: dial h2c). */
export interface UpstreamTls {
  readonly secureContext: SecureContext
  /** Names the upstream trust it verifies with (lib/tls/trust-policy.ts): a change closes what another key made. */
  readonly key: string
}

export interface UpstreamPoolOptions {
  /** The pool follows it: sessions to pods that left or moved are closed (GOAWAY). */
  readonly snapshot: SnapshotReader
  readonly connectTimeoutMs: number
  /** Called per new session; null dials cleartext HTTP/2 (h2c). */
  readonly tls: (() => UpstreamTls) | null
  /** TLS server name to verify for a target (the advertised host). */
  readonly serverName: (target: PodTarget) => string
  readonly logger: Logger
  readonly onSessionCountChange?: (count: number) => void
  readonly settings?: http2.Settings
}

/**
 * invalid_request: Node refused the caller's headers (they cannot be sent as given). Each is a
 * code of GRPC_ERRORS, whose message the error carries: it becomes the Pylon's grpc-message.
 */
export type UpstreamErrorCode = 'connect_timeout' | 'connect_failed' | 'invalid_request'

export class UpstreamConnectError extends Error {
  readonly code: UpstreamErrorCode
  readonly address: string
  constructor (code: UpstreamErrorCode, address: string, message: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause })
    this.name = 'UpstreamConnectError'
    this.code = code
    this.address = address
  }
}

/**
 * Called once per openStream with the caller's own context: the caller passes a module-level
 * function and its per-stream state, so no closure is made per registration stream.
 */
export type OpenStreamCallback<C> = (context: C, err: UpstreamConnectError | null, stream: ClientHttp2Stream | null) => void

/** An openStream call waiting for its session's SETTINGS (plain data, no closure). */
interface WaitingOpen {
  readonly headers: OutgoingHttpHeaders | readonly string[]
  readonly context: unknown
  readonly callback: OpenStreamCallback<unknown>
}

/** The trust key of sessions dialled without TLS (h2c). */
const CLEARTEXT = 'cleartext'

/** Sessions to one pod: 32 × a typical 100-stream limit is far more registrations than a pod serves. */
export const MAX_SESSIONS_PER_POD = 32

interface PooledSession {
  readonly session: ClientHttp2Session
  readonly target: PodTarget
  readonly key: string
  /** The upstream trust key it was made under. */
  readonly trustKey: string
  connected: boolean
  /** Streams opened through the pool and not yet closed. */
  active: number
  waiters: WaitingOpen[]
  timer: NodeJS.Timeout | null
}

const kPooled = Symbol('pooled')
type PooledStream = ClientHttp2Stream & { [kPooled]?: PooledSession }

function onPooledStreamClose (this: PooledStream): void {
  const pooled = this[kPooled]
  if (pooled !== undefined) pooled.active--
}

function keyOf (target: PodTarget): string {
  return `${target.host}:${target.grpcPort}`
}

export class UpstreamPool {
  readonly #options: UpstreamPoolOptions
  readonly #sessions = new Map<string, PooledSession[]>()
  #count = 0
  #closed = false
  #closing: Promise<void> | null = null
  readonly #unsubscribe: () => void

  constructor (options: UpstreamPoolOptions) {
    this.#options = options
    this.#unsubscribe = options.snapshot.subscribe((snapshot) => { this.#retain(snapshot) })
  }

  /** Number of live sessions (connecting or connected). */
  get size (): number {
    return this.#count
  }

  /** Open streams over every pooled session: what a leak test counts. */
  openStreams (): number {
    let n = 0
    for (const list of this.#sessions.values()) for (const pooled of list) n += pooled.active
    return n
  }

  /**
   * Opens a stream to the target on a pooled session: synchronously when a connected session
   * with room exists, else after connecting. Errors are UpstreamConnectError. `callback` gets
   * `context` back as its first argument.
   */
  openStream<C> (target: PodTarget, headers: OutgoingHttpHeaders | readonly string[], context: C, callback: OpenStreamCallback<C>): void {
    const pooled = this.#acquire(target)
    if (pooled instanceof UpstreamConnectError) callback(context, pooled, null)
    else if (!pooled.connected) pooled.waiters.push({ headers, context, callback: callback as OpenStreamCallback<unknown> })
    else this.#request(pooled, headers, context, callback)
  }

  #request<C> (pooled: PooledSession, headers: OutgoingHttpHeaders | readonly string[], context: C, callback: OpenStreamCallback<C>): void {
    let stream: PooledStream
    try {
      stream = pooled.session.request(headers, { endStream: false })
    } catch (cause) {
      // request() validates the header list before anything is sent: a Pylon's two
      // content-type fields or a connection header are the request's fault, not the pod's.
      const code = (cause as NodeJS.ErrnoException).code ?? ''
      if (code.startsWith('ERR_HTTP2_') || code === 'ERR_INVALID_CHAR' || code === 'ERR_INVALID_HTTP_TOKEN') {
        callback(context, new UpstreamConnectError('invalid_request', pooled.key, grpcError('invalid_request', { code }).message, cause), null)
      } else {
        callback(context, new UpstreamConnectError('connect_failed', pooled.key, grpcError('connect_failed', { cause: (cause as Error).message }).message, cause), null)
      }
      return
    }
    pooled.active++
    stream[kPooled] = pooled
    stream.once('close', onPooledStreamClose)
    callback(context, null, stream)
  }

  /** A connected session with room, a connecting one to wait for, or why there is none. */
  #acquire (target: PodTarget): PooledSession | UpstreamConnectError {
    if (this.#closed) {
      return new UpstreamConnectError('connect_failed', keyOf(target), grpcError('connect_failed', { cause: GRPC_ERRORS.shutting_down.message }).message)
    }
    const key = keyOf(target)
    const list = this.#sessions.get(key)
    const trustKey = this.#options.tls?.().key ?? CLEARTEXT
    let live = 0
    if (list !== undefined) {
      for (const pooled of list) {
        if (pooled.session.closed || pooled.session.destroyed) continue
        live++
        if (pooled.trustKey !== trustKey) continue
        if (!pooled.connected) return pooled
        const max = pooled.session.remoteSettings.maxConcurrentStreams ?? 0xffffffff
        if (pooled.active < max) return pooled
      }
    }
    if (live >= MAX_SESSIONS_PER_POD) {
      return new UpstreamConnectError('connect_failed', key, grpcError('connect_failed', { cause: `every stream the pod allows on ${live} sessions is in use` }).message)
    }
    return this.#connect(target, key)
  }

  /** Closes sessions (gracefully) whose pod is not present in the snapshot at that address any more. */
  #retain (snapshot: TargetSnapshot): void {
    if (!snapshot.initialized) return
    const live = new Set<string>()
    for (const target of snapshot.targets) live.add(keyOf(target))
    // An unready pod keeps its registrations, so it keeps the sessions that carry them.
    for (const target of snapshot.unready.values()) live.add(keyOf(target))
    for (const [key, list] of this.#sessions) {
      if (live.has(key)) continue
      for (const pooled of list) pooled.session.close()
    }
  }

  /** Upstream trust changed: sessions made under another trust key get GOAWAY now and are destroyed after graceMs. */
  closeTrust (key: string, graceMs: number): number {
    let closed = 0
    for (const list of this.#sessions.values()) {
      for (const pooled of list) {
        if (pooled.trustKey === key) continue
        closed++
        closeGracefully(pooled.session, graceMs)
      }
    }
    return closed
  }

  /**
   * Shutdown: no new sessions; close the existing ones after their streams end or graceMs.
   * Resolves once every session with streams is gone; a session without any has been told
   * GOAWAY and is not waited for (Node's graceful close then waits for the pod to close its
   * side of the TCP connection, which only delays the router's exit by the pod's load).
   * Idempotent: a second call waits for the first.
   */
  close (graceMs: number): Promise<void> {
    this.#closing ??= this.#close(graceMs)
    return this.#closing
  }

  async #close (graceMs: number): Promise<void> {
    this.#closed = true
    this.#unsubscribe()
    const gone: Array<Promise<void>> = []
    for (const list of this.#sessions.values()) {
      // A session leaves the map on its 'close' (#forget), so every one here has yet to emit it.
      for (const pooled of list) if (pooled.active > 0) gone.push(new Promise((resolve) => { pooled.session.once('close', resolve) }))
    }
    for (const list of this.#sessions.values()) for (const pooled of list) closeGracefully(pooled.session, graceMs)
    await Promise.all(gone)
  }

  #connect (target: PodTarget, key: string): PooledSession {
    const tls = this.#options.tls?.() ?? null
    const authority = tls === null ? `http://${key}` : `https://${key}`
    const options: SecureClientSessionOptions = {
      settings: { enablePush: false, ...this.#options.settings },
      // Node's default 10 MB per session is too small for thousands of registration streams.
      maxSessionMemory: 64,
    }
    if (tls !== null) {
      options.secureContext = tls.secureContext
      options.servername = this.#options.serverName(target)
      options.ALPNProtocols = ['h2']
    }
    const session = http2.connect(authority, options)
    const pooled: PooledSession = { session, target, key, trustKey: tls?.key ?? CLEARTEXT, connected: false, active: 0, waiters: [], timer: null }
    let list = this.#sessions.get(key)
    if (list === undefined) {
      list = []
      this.#sessions.set(key, list)
    }
    list.push(pooled)
    this.#setCount(this.#count + 1)

    pooled.timer = setTimeout(() => {
      pooled.timer = null
      this.#fail(pooled, new UpstreamConnectError('connect_timeout', key, grpcError('connect_timeout').message))
    }, this.#options.connectTimeoutMs)
    // Ready once the pod's SETTINGS arrived: a socket that accepts but never speaks HTTP/2
    // is still "connecting" and runs into the connect timeout.
    session.once('remoteSettings', (settings: http2.Settings) => {
      if (pooled.timer !== null) clearTimeout(pooled.timer)
      pooled.timer = null
      if (settings.maxConcurrentStreams === 0) {
        // A request on it would wait in nghttp2 for a stream the pod never allows.
        this.#fail(pooled, new UpstreamConnectError('connect_failed', key, grpcError('connect_failed', { cause: 'the pod allows no streams (SETTINGS_MAX_CONCURRENT_STREAMS 0)' }).message))
        return
      }
      pooled.connected = true
      const waiters = pooled.waiters
      pooled.waiters = []
      const max = settings.maxConcurrentStreams ?? 0xffffffff
      for (const waiter of waiters) {
        // More waited than the pod allows on one session: the rest go to another (or fail at
        // the cap) rather than wait in nghttp2 for streams long-lived registrations never free.
        if (pooled.active < max) this.#request(pooled, waiter.headers, waiter.context, waiter.callback)
        else this.openStream(pooled.target, waiter.headers, waiter.context, waiter.callback)
      }
    })
    session.on('error', (err: NodeJS.ErrnoException) => {
      if (!pooled.connected) {
        this.#fail(pooled, new UpstreamConnectError('connect_failed', key, grpcError('connect_failed', { cause: err.code ?? err.message }).message, err))
      } else {
        this.#options.logger.debug({ upstream: key, err: err.code ?? err.message }, 'upstream session error')
      }
    })
    session.on('close', () => { this.#forget(pooled) })
    session.on('goaway', () => {
      // The pod is going away or shedding load: no new streams on this session.
      this.#forget(pooled)
    })
    return pooled
  }

  #fail (pooled: PooledSession, err: UpstreamConnectError): void {
    const waiters = pooled.waiters
    pooled.waiters = []
    this.#forget(pooled)
    pooled.session.destroy()
    for (const waiter of waiters) waiter.callback(waiter.context, err, null)
  }

  #forget (pooled: PooledSession): void {
    const list = this.#sessions.get(pooled.key)
    if (list === undefined) return
    const at = list.indexOf(pooled)
    if (at < 0) return
    list.splice(at, 1)
    if (list.length === 0) this.#sessions.delete(pooled.key)
    if (pooled.timer !== null) clearTimeout(pooled.timer)
    this.#setCount(this.#count - 1)
    if (pooled.waiters.length > 0) {
      const waiters = pooled.waiters
      pooled.waiters = []
      const err = new UpstreamConnectError('connect_failed', pooled.key, grpcError('connect_failed', { cause: 'session closed before connecting' }).message)
      for (const waiter of waiters) waiter.callback(waiter.context, err, null)
    }
  }

  #setCount (count: number): void {
    this.#count = count
    this.#options.onSessionCountChange?.(count)
  }
}

function closeGracefully (session: ClientHttp2Session, graceMs: number): void {
  if (session.destroyed) return
  session.close()
  const timer = setTimeout(() => { session.destroy() }, graceMs)
  timer.unref()
  session.once('close', () => { clearTimeout(timer) })
}
