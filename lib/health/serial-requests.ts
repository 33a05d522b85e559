/**
 * The health port answers the requests of one connection one at a time, and closes a
 * connection that pipelines more than a few (SPEC §12: probes are answered under load on the
 * port). Node's HTTP server parses every request already read from a connection and hands each
 * to the application at once, answers or not; 50 `GET /metrics` in one write on each of 300
 * connections that never read made the router render /metrics 15,000 times and left /livez
 * unanswered for half a minute. Here a request waits until the previous one of its connection
 * was answered, and a connection with more than maxWaiting requests waiting is closed: no
 * kubelet or Prometheus pipelines (each sends a request and reads its answer), so only a
 * client that does not read its answers gets there, and it costs one read's worth of parsed
 * requests before it is gone.
 *
 * Who calls what: the listener's request handler calls arrive() for each request and runs it
 * when told 'run'; done() when a running request's response closed, which returns the next to
 * run, if any. Generic over the connection and request types for the unit tests.
 */

export type Arrival = 'run' | 'wait' | 'close'

interface Line<R> {
  running: boolean
  readonly waiting: R[]
}

export class SerialRequests<C extends object, R> {
  readonly maxWaiting: number
  readonly #lines = new WeakMap<C, Line<R>>()

  constructor (maxWaiting: number) {
    if (!Number.isInteger(maxWaiting) || maxWaiting < 0) throw new Error(`pipelined requests bound must be a whole number, got ${maxWaiting}`)
    this.maxWaiting = maxWaiting
  }

  /** A request of this connection: run it now, let it wait its turn, or close the connection. */
  arrive (connection: C, request: R): Arrival {
    let line = this.#lines.get(connection)
    if (line === undefined) {
      line = { running: false, waiting: [] }
      this.#lines.set(connection, line)
    }
    if (!line.running) {
      line.running = true
      return 'run'
    }
    if (line.waiting.length >= this.maxWaiting) {
      line.waiting.length = 0
      return 'close'
    }
    line.waiting.push(request)
    return 'wait'
  }

  /** The running request of this connection is over; returns the next one to run, or null. */
  done (connection: C): R | null {
    const line = this.#lines.get(connection)
    if (line === undefined) return null
    // At most maxWaiting entries: shift() is cheap here.
    const next = line.waiting.shift()
    if (next === undefined) {
      line.running = false
      return null
    }
    return next
  }
}
