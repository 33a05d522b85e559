/**
 * The requests of one HTTP/1.1 connection, run one at a time: a request waits until the
 * previous one of its connection is over, and a connection with more than maxWaiting requests
 * waiting is closed. HTTP/1.1 answers leave in request order anyway (RFC 9112 §9.3.2), so
 * running pipelined requests at once buys a client nothing but costs the router: Node's HTTP
 * server parses every request already read from a connection and hands each to the
 * application at once, answers read or not.
 *
 * - The health port (lib/health/server.ts): without it, 50 `GET /metrics` in one write on each
 *   of 300 connections that never read have the router render /metrics 15,000 times and leave
 *   /livez unanswered for half a minute.
 * - The front door (lib/http-forward/forwarder.ts): without it, 300 pipelined GETs of large
 *   answers on 4 connections that never read hold all 1,024 connections of a pod (one each, up
 *   to the client's share), 39 MiB of RSS per connection.
 *
 * A waiting request costs only its parsed head; maxWaiting bounds that, and the connection is
 * closed beyond it (Node keeps reading a connection whose waiting requests wrote nothing, so
 * the bound is what stops it). Kubelets, Prometheus and HTTP clients send a request and read its
 * answer before the next, or pipeline a few; a client over the bound must retry on a new
 * connection, as RFC 9112 §9.3.2 expects of a pipelining client whose connection closes.
 *
 * Who calls what: the request handler calls arrive() for each request and runs it when told
 * 'run'; done() when a running request is over, which returns the next to run, if any. Generic
 * over the connection and request types for the unit tests.
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
