/**
 * A front-door connection as the connection registry sees it (lib/drain, SPEC §11): what
 * "stop new work, let open work finish, then close" means for each protocol the front door
 * speaks.
 *
 *   HTTP/2    its WatchStargates and RegisterInferenceServer streams end at once with
 *             UNAVAILABLE and the reason's message (so the Pylon registers again through
 *             another replica), then GOAWAY: other streams (LLM requests, SSE) finish, a gRPC
 *             stream that still arrives is refused with the same status (listener.ts), and the
 *             session closes once its last stream ended
 *   HTTP/1.1  a response not yet started goes out with `connection: close`; the connection
 *             ends after its last response (listener.ts h1RequestFinished); an idle one, or one
 *             with a partial request head, closes now
 *   unknown   (protocol not yet known) closes now
 *
 * Its kind is `registration` while a RegisterInferenceServer stream is open on it (what a
 * Pylon's registration connection is), `http` otherwise.
 */
import type { ServerHttp2Session, ServerHttp2Stream } from 'node:http2'
import type { TrackedConnection } from './connection-deadlines.ts'
import type { ConnectionKind, DrainableConnection } from '../drain/connection-kinds.ts'
import { DRAIN_REASONS, type DrainReason } from '../drain/drain-reasons.ts'
import type { GrpcErrorCode } from '../control-plane/errors.ts'

/** Ends one open control-plane stream with the status of code (its owner cancels what it forwards). */
export type EndGrpcStream = (stream: ServerHttp2Stream, code: GrpcErrorCode) => void

function destroyQuietly (connection: TrackedConnection): void {
  const session = connection.session
  if (session !== null && !session.destroyed) session.destroy()
  if (!connection.socket.destroyed) connection.socket.destroy()
}

/**
 * The longest a GOAWAY waits for the statuses of the streams just ended: a status sent as
 * trailers goes out on the stream's 'wantTrailers', a turn or two later, and nghttp2 would
 * otherwise send the GOAWAY first; a Pylon reading GOAWAY before its stream's status sees the
 * stream fail instead of UNAVAILABLE `router is shutting down`.
 */
const STATUS_WAIT_MS = 200

/** GOAWAY once every ended stream's status was handed to nghttp2 (or closed), STATUS_WAIT_MS at most. */
function goAwayAfterStatuses (session: ServerHttp2Session, streams: readonly ServerHttp2Stream[]): void {
  let left = 0
  let timer: NodeJS.Timeout | null = null
  const goAway = (): void => {
    if (timer !== null) clearTimeout(timer)
    timer = null
    // GOAWAY: no new streams; Node closes the session once the open ones ended.
    if (!session.closed && !session.destroyed) session.close()
  }
  for (const stream of streams) {
    if (stream.closed || stream.destroyed || stream.sentTrailers !== undefined) continue
    left++
    let settled = false
    // Listening after the stream's owner, whose trailers are submitted in its listener; nghttp2
    // would still write a GOAWAY submitted in the same turn first, so it goes one turn later.
    const one = (): void => {
      if (settled) return
      settled = true
      if (--left === 0) setImmediate(goAway)
    }
    stream.once('wantTrailers', one)
    stream.once('close', one)
  }
  if (left === 0) {
    goAway()
    return
  }
  timer = setTimeout(goAway, STATUS_WAIT_MS)
  timer.unref()
}

export class FrontDoorConnection implements DrainableConnection {
  readonly openedAt: number
  readonly connection: TrackedConnection
  readonly #endStream: EndGrpcStream
  #done: Promise<void> | null = null
  #resolve: (() => void) | null = null
  #closed = false

  constructor (connection: TrackedConnection, openedAt: number, endStream: EndGrpcStream) {
    this.connection = connection
    this.openedAt = openedAt
    this.#endStream = endStream
  }

  get kind (): ConnectionKind {
    return this.connection.registrations > 0 ? 'registration' : 'http'
  }

  drain (reason: DrainReason): Promise<void> {
    if (this.#done !== null) return this.#done
    if (this.#closed) {
      this.#done = Promise.resolve()
      return this.#done
    }
    this.#done = new Promise((resolve) => { this.#resolve = resolve })
    this.#begin(reason)
    return this.#done
  }

  abort (): void {
    destroyQuietly(this.connection)
  }

  /** The socket closed (listener.ts): the drain, if any, is over. */
  closed (): void {
    this.#closed = true
    this.#resolve?.()
    this.#resolve = null
  }

  #begin (reason: DrainReason): void {
    const connection = this.connection
    if (connection.drainReason !== null) return
    connection.drainReason = reason
    if (connection.socket.destroyed) return
    switch (connection.phase) {
      case 'h2': {
        const session = connection.session
        if (session === null || session.destroyed) {
          connection.socket.destroy()
          return
        }
        const streams = connection.controlStreams === null ? [] : [...connection.controlStreams]
        const code = DRAIN_REASONS[reason].grpc
        for (const stream of streams) this.#endStream(stream, code)
        goAwayAfterStatuses(session, streams)
        return
      }
      case 'h1_active': {
        const response = connection.response
        if (response !== null && !response.headersSent) response.shouldKeepAlive = false
        return
      }
      case 'classify':
      case 'h1_head':
      case 'h1_idle':
        connection.socket.destroy()
        return
      default: {
        const never: never = connection.phase
        throw new Error(`unknown connection phase ${String(never)}`)
      }
    }
  }
}
