/**
 * Every live connection the router could drain, with its kind and the time it opened (SPEC
 * §10, §11). Each connection kind registers its connections here as they open and releases
 * them as they close; the registry itself does no I/O: drain and abort are the connections'.
 *
 * Who calls what:
 * - the front door, the raw QUIC relay and the WebTransport relays: add() when a connection
 *   opens, release() (the returned function) when it closed;
 * - the shutdown (server/router.ts): drainAll('shutdown'), then whenEmpty() against the drain
 *   deadline, abortAll() past it;
 * - replica balancing: count(kind) for its load, list(kind) for the oldest connections, and
 *   drain(connection, reason) for the ones it moves.
 *
 * While drainAll is in force, a connection added later (one accepted in the window before a
 * listener closed) is drained as soon as it is added. The counts and lists are computed when
 * asked (a walk over the live set): callers ask per interval or per scrape, never per request.
 */
import { CONNECTION_KINDS, type ConnectionKind, type DrainableConnection } from './connection-kinds.ts'
import type { DrainReason } from './drain-reasons.ts'
import type { DrainMetrics } from './drain-metrics.ts'

export interface ConnectionRegistryOptions {
  /** The clock openedAt values are read on (ms); for age comparisons only. */
  readonly now?: () => number
  /** Counts drains by kind and reason; null counts nothing (unit tests). */
  readonly metrics?: DrainMetrics | null
}

export type Release = () => void

export class ConnectionRegistry {
  readonly #live = new Set<DrainableConnection>()
  /** Connections told to drain: their drain's promise (so a second drain() returns it). */
  readonly #draining = new Map<DrainableConnection, Promise<void>>()
  readonly #metrics: DrainMetrics | null
  readonly now: () => number
  #drainingAll: DrainReason | null = null
  #emptyWaiters: Array<() => void> = []

  constructor (options: ConnectionRegistryOptions = {}) {
    this.now = options.now ?? Date.now
    this.#metrics = options.metrics ?? null
    this.#metrics?.setOpenSource(() => this.counts())
  }

  /** Live connections. */
  get size (): number {
    return this.#live.size
  }

  /** The reason of drainAll once called, else null. */
  get drainingAll (): DrainReason | null {
    return this.#drainingAll
  }

  /** A connection opened: tracked until the returned function is called (when it closed). */
  add (connection: DrainableConnection): Release {
    this.#live.add(connection)
    if (this.#drainingAll !== null) void this.drain(connection, this.#drainingAll)
    let released = false
    return () => {
      if (released) return
      released = true
      this.#live.delete(connection)
      this.#draining.delete(connection)
      if (this.#live.size === 0) this.#notifyEmpty()
    }
  }

  /** Live connections of a kind. */
  count (kind: ConnectionKind): number {
    let n = 0
    for (const connection of this.#live) if (connection.kind === kind) n++
    return n
  }

  /** Live connections by kind (every kind present, 0 when none). */
  counts (): Record<ConnectionKind, number> {
    const out = Object.fromEntries(CONNECTION_KINDS.map((kind) => [kind, 0])) as Record<ConnectionKind, number>
    for (const connection of this.#live) out[connection.kind]++
    return out
  }

  /** Live connections of a kind, oldest first; those already draining are left out. */
  list (kind: ConnectionKind): DrainableConnection[] {
    const out: DrainableConnection[] = []
    for (const connection of this.#live) if (connection.kind === kind && !this.#draining.has(connection)) out.push(connection)
    return out.sort(byAge)
  }

  /** Whether a connection was told to drain. */
  isDraining (connection: DrainableConnection): boolean {
    return this.#draining.has(connection)
  }

  /**
   * Drains one connection (counted by its kind now and the reason); resolves once it closed.
   * Draining a connection twice returns the first drain's promise.
   */
  drain (connection: DrainableConnection, reason: DrainReason): Promise<void> {
    const started = this.#draining.get(connection)
    if (started !== undefined) return started
    this.#metrics?.drained.labels(connection.kind, reason).inc()
    let done: Promise<void>
    try {
      done = connection.drain(reason).catch(() => {})
    } catch {
      // A connection whose drain throws is gone as far as the registry can tell.
      done = Promise.resolve()
    }
    if (this.#live.has(connection)) this.#draining.set(connection, done)
    return done
  }

  /** Drains every live connection, and every one added from now on; resolves once none is left. */
  drainAll (reason: DrainReason): Promise<void> {
    this.#drainingAll ??= reason
    for (const connection of [...this.#live]) void this.drain(connection, reason)
    return this.whenEmpty()
  }

  /** Closes every live connection now (a drain's deadline passed). */
  abortAll (reason: DrainReason): void {
    for (const connection of [...this.#live]) {
      try {
        connection.abort(reason)
      } catch {
        // Best effort: the process exits next.
      }
    }
  }

  /** Resolves once no connection is live (at once when none is). */
  whenEmpty (): Promise<void> {
    if (this.#live.size === 0) return Promise.resolve()
    return new Promise((resolve) => { this.#emptyWaiters.push(resolve) })
  }

  #notifyEmpty (): void {
    const waiters = this.#emptyWaiters
    this.#emptyWaiters = []
    for (const resolve of waiters) resolve()
  }
}

function byAge (a: DrainableConnection, b: DrainableConnection): number {
  return a.openedAt - b.openedAt
}
