/**
 * The front door's connection timeouts (SPEC §6, §12), enforced by one coarse tick.
 *
 * Node arms an http.Server's header and request timers when the server starts listening; the
 * front door's inner servers never listen (they are fed sockets by emit('connection')), so
 * none of those timers ever ran: a request head without its blank line stayed open for good,
 * and so did an h2c connection that sent its preface and nothing else. Each connection is
 * therefore tracked here in one of these phases, and a shared tick closes the ones past their
 * deadline:
 *
 *   classify ──h1──▶ h1_head ──'request'──▶ h1_active ──last response done──▶ h1_idle
 *       │              ▲  (headers timeout)                                    │ (keep-alive timeout)
 *       │              └────────────── bytes arrived after the response ───────┘
 *       └──h2──▶ h2 (idle timeout counts while no stream is open: then GOAWAY)
 *
 * classify and h1_head share the headers timeout. h1_active has no deadline here: a request
 * in flight is bounded by the forwarder's own timeouts. The tick is coarse (a quarter of the
 * shortest timeout, at most a second), so a deadline fires up to one tick late; one interval
 * timer serves every connection, none is created or refreshed per request (STYLE "long
 * timeouts share one coarse tick").
 */
import type { Socket } from 'node:net'
import type { ServerResponse } from 'node:http'
import type { ServerHttp2Session, ServerHttp2Stream } from 'node:http2'
import type { DrainReason } from '../drain/drain-reasons.ts'

export type ConnectionPhase = 'classify' | 'h1_head' | 'h1_active' | 'h1_idle' | 'h2'

export interface ConnectionTimeouts {
  /** Time from a connection's first byte (or the end of its last response) to a full request head. */
  readonly headersTimeoutMs: number
  /** Silence allowed on an HTTP/1.1 connection between requests. */
  readonly keepAliveTimeoutMs: number
  /** Time an HTTP/2 session may stay open without any stream. */
  readonly http2IdleTimeoutMs: number
}

export type DeadlineReason = 'headers_timeout' | 'keep_alive_timeout' | 'http2_idle_timeout'

export class TrackedConnection {
  readonly socket: Socket
  phase: ConnectionPhase = 'classify'
  since: number
  /** socket.bytesRead when the connection went idle: more means a new request has begun. */
  bytesAtIdle = 0
  /** HTTP/1.1 requests received and not yet answered (pipelining may queue several). */
  requests = 0
  /** HTTP/2 streams open on the session. */
  streams = 0
  session: ServerHttp2Session | null = null
  /** Open WatchStargates and RegisterInferenceServer streams (ended first when it drains); null until one opens. */
  controlStreams: Set<ServerHttp2Stream> | null = null
  /** Of those, RegisterInferenceServer streams: the connection is a Pylon's registration connection while above 0. */
  registrations = 0
  /** The latest HTTP/1.1 response not finished (a drain makes it the last: `connection: close`). */
  response: ServerResponse | null = null
  /** Told to drain, and why (connection-drain.ts): no keep-alive, GOAWAY, closed once its work ended. */
  drainReason: DrainReason | null = null

  constructor (socket: Socket, now: number) {
    this.socket = socket
    this.since = now
  }
}

export interface ConnectionDeadlinesOptions {
  readonly timeouts: ConnectionTimeouts
  /** Closes one connection whose deadline passed; the caller decides how (408, GOAWAY, destroy). */
  readonly onExpired: (connection: TrackedConnection, reason: DeadlineReason) => void
  readonly now?: () => number
}

export class ConnectionDeadlines {
  readonly #connections = new Set<TrackedConnection>()
  readonly #options: ConnectionDeadlinesOptions
  readonly #now: () => number
  readonly tickMs: number
  #timer: NodeJS.Timeout | null = null

  constructor (options: ConnectionDeadlinesOptions) {
    this.#options = options
    this.#now = options.now ?? (() => performance.now())
    const { headersTimeoutMs, keepAliveTimeoutMs, http2IdleTimeoutMs } = options.timeouts
    this.tickMs = Math.max(25, Math.min(1000, Math.floor(Math.min(headersTimeoutMs, keepAliveTimeoutMs, http2IdleTimeoutMs) / 4)))
  }

  get size (): number {
    return this.#connections.size
  }

  connections (): IterableIterator<TrackedConnection> {
    return this.#connections.values()
  }

  track (socket: Socket): TrackedConnection {
    const connection = new TrackedConnection(socket, this.#now())
    this.#connections.add(connection)
    if (this.#timer === null) {
      this.#timer = setInterval(tick, this.tickMs, this)
      this.#timer.unref()
    }
    return connection
  }

  untrack (connection: TrackedConnection): void {
    this.#connections.delete(connection)
    if (this.#connections.size === 0 && this.#timer !== null) {
      clearInterval(this.#timer)
      this.#timer = null
    }
  }

  /** The protocol is known: HTTP/1.1 now waits for its first request head, HTTP/2 for streams. */
  classified (connection: TrackedConnection, protocol: 'h1' | 'h2'): void {
    connection.phase = protocol === 'h1' ? 'h1_head' : 'h2'
    connection.since = this.#now()
  }

  requestStarted (connection: TrackedConnection): void {
    connection.requests++
    connection.phase = 'h1_active'
  }

  requestFinished (connection: TrackedConnection): void {
    if (connection.requests > 0) connection.requests--
    if (connection.requests > 0 || connection.phase !== 'h1_active') return
    connection.phase = 'h1_idle'
    connection.since = this.#now()
    connection.bytesAtIdle = connection.socket.bytesRead
  }

  streamOpened (connection: TrackedConnection): void {
    connection.streams++
  }

  streamClosed (connection: TrackedConnection): void {
    if (connection.streams > 0) connection.streams--
    if (connection.streams === 0) connection.since = this.#now()
  }

  /** One pass over every connection (the interval calls it; tests may too). */
  check (): void {
    const now = this.#now()
    const { headersTimeoutMs, keepAliveTimeoutMs, http2IdleTimeoutMs } = this.#options.timeouts
    for (const connection of this.#connections) {
      switch (connection.phase) {
        case 'classify':
        case 'h1_head':
          if (now - connection.since >= headersTimeoutMs) this.#expire(connection, 'headers_timeout')
          break
        case 'h1_idle':
          if (connection.socket.bytesRead !== connection.bytesAtIdle) {
            // A new request head has begun arriving: it gets the headers timeout from here.
            connection.phase = 'h1_head'
            connection.since = now
          } else if (now - connection.since >= keepAliveTimeoutMs) {
            this.#expire(connection, 'keep_alive_timeout')
          }
          break
        case 'h2':
          if (connection.streams === 0 && now - connection.since >= http2IdleTimeoutMs) this.#expire(connection, 'http2_idle_timeout')
          break
        case 'h1_active':
          break
        default: {
          const never: never = connection.phase
          throw new Error(`unknown connection phase ${String(never)}`)
        }
      }
    }
  }

  stop (): void {
    if (this.#timer !== null) clearInterval(this.#timer)
    this.#timer = null
  }

  #expire (connection: TrackedConnection, reason: DeadlineReason): void {
    // Once: the connection is on its way out; its 'close' untracks it.
    this.#connections.delete(connection)
    this.#options.onExpired(connection, reason)
  }
}

function tick (deadlines: ConnectionDeadlines): void {
  deadlines.check()
}
