/**
 * A replica's Pylon-facing load (SPEC §10, replica balancing): the long-lived connections
 * Pylons hold on it, counted by kind. These are what an L4 load balancer places once and never
 * again, so these are what replicas even out between themselves.
 *
 * - `registration`: front-door HTTP/2 connections carrying at least one RegisterInferenceServer
 *   stream (moving one ends its streams and sends GOAWAY: the Pylon re-dials the Service);
 * - `raw_quic`: raw QUIC tunnels;
 * - `webtransport`: WebTransport sessions, over HTTP/3 and HTTP/2 together (one kind: a router
 *   serves one tunnel protocol, a Pylon holds one session, and either transport moves the
 *   same way, "no new streams, let open ones finish, then close").
 *
 * Counts exclude connections already being moved (draining): they are leaving, and counting
 * them would make the replica move more than its excess.
 */

export const PYLON_LOAD_KINDS = ['registration', 'raw_quic', 'webtransport'] as const
export type PylonLoadKind = typeof PYLON_LOAD_KINDS[number]

/** Connections by kind; whole numbers >= 0. */
export type PylonLoad = { readonly [K in PylonLoadKind]: number }

/** Where a replica reads its own load; read-only, called once per rebalancing interval and per /debug/load. */
export interface PylonLoadSource {
  load (): PylonLoad
}

export const ZERO_LOAD: PylonLoad = { registration: 0, raw_quic: 0, webtransport: 0 }

/** Largest count a peer may report per kind (the router caps connections far below it). */
export const MAX_REPORTED_CONNECTIONS = 10_000_000
