/**
 * The kinds of connection the router drains and counts (SPEC §10, §11), and the one interface
 * every kind implements: "stop new work on this connection, let open work finish, then close".
 *
 *   registration     a front-door HTTP/2 connection carrying a RegisterInferenceServer stream
 *   raw_quic         a raw QUIC tunnel (the Pylon's connection and the router's to the pod)
 *   webtransport_h3  a WebTransport session over HTTP/3 (its Pylon connection and pod connection)
 *   webtransport_h2  a WebTransport session over HTTP/2 (its CONNECT streams; the Pylon's
 *                    HTTP/2 connection gets GOAWAY)
 *   http             any other front-door connection (LLM clients, HTTP/1.1 or HTTP/2; Watch-only)
 *
 * The first four face Pylons: those are what replica balancing moves.
 */
import type { DrainReason } from './drain-reasons.ts'

export const CONNECTION_KINDS = ['registration', 'raw_quic', 'webtransport_h3', 'webtransport_h2', 'http'] as const
export type ConnectionKind = typeof CONNECTION_KINDS[number]

export const PYLON_CONNECTION_KINDS = ['registration', 'raw_quic', 'webtransport_h3', 'webtransport_h2'] as const satisfies readonly ConnectionKind[]

export interface DrainableConnection {
  /** What it carries now (a front-door connection is `registration` while a RegisterInferenceServer stream is open on it). */
  readonly kind: ConnectionKind
  /** When it opened, on the registry's clock (ms). */
  readonly openedAt: number
  /**
   * Stops new work (new streams are refused, HTTP/2 and HTTP/3 get GOAWAY, Watch and
   * registration streams end with UNAVAILABLE), lets open work finish, then closes with the
   * reason's wire text. Resolves once the connection is closed, however that came about.
   * Idempotent: later calls return the first call's promise.
   */
  drain (reason: DrainReason): Promise<void>
  /** Closes now whatever is open (a drain ran out of time). Safe on a connection already gone. */
  abort (reason: DrainReason): void
}
