/**
 * Calls on a connection that may already be closing or gone.
 *
 * Event handlers and timers run after the fact: when a stream's 'close', a session's 'goaway'
 * or a grace timer runs, its connection may have been destroyed by the peer (FIN, RST, GOAWAY,
 * a connection error) or by nghttp2. Node throws synchronously from some calls on a destroyed
 * object, and a throw from an event handler or a timer ends the process (the
 * rapid-reset guard's GOAWAY on a destroyed session, exit 1 on every connection that closed
 * with 200 streams open). Those calls go through here, from wherever a handler or timer makes
 * them:
 *
 *   Http2Session.goaway / ping   ERR_HTTP2_INVALID_SESSION once destroyed
 *   Http2Stream.respond          ERR_HTTP2_INVALID_STREAM once destroyed or closed,
 *                                ERR_HTTP2_HEADERS_SENT, and Node's checks of the fields
 *                                (a pod's :status 600 passes nghttp2 but not respond())
 *
 * The rest of what handlers call holds on a closed object without help (Node 24): destroy() of
 * a session, stream or socket and Http2Session.close() return when already done,
 * Http2Stream.close() when closed, write()/end() on a finished stream report through 'error'
 * (every stream the router holds has a listener), and the QUIC objects (lib/quic) ignore
 * connection and stream ids the addon has forgotten. docs/reliability.md lists the handlers.
 */
import type { Http2Session, OutgoingHttpHeaders, ServerHttp2Stream, ServerStreamResponseOptions } from 'node:http2'

/** GOAWAY with code unless the session is destroyed (then there is no one left to tell). */
export function goawayIfOpen (session: Http2Session, code: number): boolean {
  if (session.destroyed) return false
  session.goaway(code)
  return true
}

/**
 * PING unless the session is closing or gone; false when not sent (also when Node refuses it,
 * e.g. too many unanswered: the caller's idle timeout acts on a peer that does not answer).
 */
export function pingIfOpen (session: Http2Session, callback: (err: Error | null) => void): boolean {
  if (session.closed || session.destroyed) return false
  try {
    return session.ping(callback)
  } catch {
    return false
  }
}

/** destroy() unless already destroyed; takes the object as an argument, so a timer can call it without a closure. */
export function destroyIfOpen (target: { readonly destroyed: boolean, destroy (): unknown }): void {
  if (!target.destroyed) target.destroy()
}

export type RespondOutcome =
  | { readonly ok: true }
  /** The stream was closed, destroyed or had answered: nothing was sent, nothing is owed. */
  | { readonly ok: false, readonly reason: 'stream_gone' }
  /** Node refused the fields (e.g. a status it does not send, :status 600): the caller answers otherwise. */
  | { readonly ok: false, readonly reason: 'invalid_headers', readonly err: Error & { code?: string } }

const SENT: RespondOutcome = Object.freeze({ ok: true })
const GONE: RespondOutcome = Object.freeze({ ok: false, reason: 'stream_gone' })

/** stream.respond() for fields that may come from a peer, on a stream that may be gone. */
export function respondIfOpen (stream: ServerHttp2Stream, headers: OutgoingHttpHeaders | readonly string[], options?: ServerStreamResponseOptions): RespondOutcome {
  if (stream.destroyed || stream.closed || stream.headersSent) return GONE
  try {
    stream.respond(headers as OutgoingHttpHeaders, options)
  } catch (err) {
    return { ok: false, reason: 'invalid_headers', err: err as Error }
  }
  return SENT
}
