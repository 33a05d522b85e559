/**
 * The health listener's connection cap (SPEC §9, §12: probes are answered when the cap is
 * reached). Node's server.maxConnections closes the *newest* connection at accept, and the
 * newest is the kubelet's probe: 256 idle connections held open (a client that connects and
 * says nothing, re-opened within the 10 s head timeout) left /livez unanswered and the kubelet
 * restarted the router. Here a new connection over the cap is always taken, and room is made
 * by closing the *oldest* connection with no request in flight (kept alive between requests,
 * or not yet through its request head); only when every connection has a request in flight
 * (clients that do not read their answers) the oldest of those goes. A probe lives for one
 * request, so it is the newest connection for all of its short life: evicting it would take
 * as many new connections within that life as the cap. The NetworkPolicy of the chart keeps
 * everyone else off the port (docs/configuration.md).
 *
 * Who calls what: the listener calls admit() for each accepted connection and closed() when one
 * closes, requestStarted()/requestFinished() around each request. Pure bookkeeping; the
 * listener closes what admit() returns. Generic over the connection type for the unit tests.
 */

export type EvictedState = 'idle' | 'busy'

export interface Eviction<C> {
  readonly connection: C
  /** idle: no request in flight; busy: every connection had one. */
  readonly state: EvictedState
}

export class ConnectionCap<C> {
  readonly max: number
  /** Open connections in accept order, with their requests in flight. */
  readonly #open = new Map<C, number>()

  constructor (max: number) {
    if (!Number.isInteger(max) || max < 1) throw new Error(`connection cap must be a whole number above 0, got ${max}`)
    this.max = max
  }

  get size (): number {
    return this.#open.size
  }

  /** Takes a new connection; returns the one to close to stay within the cap, if any. */
  admit (connection: C): Eviction<C> | null {
    let eviction: Eviction<C> | null = null
    if (this.#open.size >= this.max) {
      eviction = this.#pickVictim()
      if (eviction !== null) this.#open.delete(eviction.connection)
    }
    this.#open.set(connection, 0)
    return eviction
  }

  requestStarted (connection: C): void {
    const n = this.#open.get(connection)
    if (n !== undefined) this.#open.set(connection, n + 1)
  }

  requestFinished (connection: C): void {
    const n = this.#open.get(connection)
    if (n !== undefined && n > 0) this.#open.set(connection, n - 1)
  }

  closed (connection: C): void {
    this.#open.delete(connection)
  }

  #pickVictim (): Eviction<C> | null {
    let oldest: C | null = null
    for (const [connection, requests] of this.#open) {
      if (requests === 0) return { connection, state: 'idle' }
      oldest ??= connection
    }
    return oldest === null ? null : { connection: oldest, state: 'busy' }
  }
}
