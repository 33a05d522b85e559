/**
 * The `/debug/load` document (SPEC §10): this replica's identity (as `/debug/peers` shows it),
 * whether it is shutting down, and its Pylon-facing connections by kind. Peers read it every
 * rebalancing interval; with balancing on it also shows this replica's last round.
 *
 *   { "self": { "address": "10.0.0.21", "id": "stargate/stargate-router-0" },
 *     "draining": false,
 *     "connections": { "registration": 12, "raw_quic": 12, "webtransport": 0 },
 *     "rebalance": null | { ...the last round, see rebalancer.ts } }
 *
 * parseLoadReport is what a replica accepts from a peer: every byte of it is hostile, so only
 * whole counts within MAX_REPORTED_CONNECTIONS for every kind pass, and the rest is ignored.
 */
import type { PeerSelf } from '../discovery/peers.ts'
import { peerReadFailure, parseJsonObject, type PeerReadFailure } from '../discovery/peer-read.ts'
import { MAX_REPORTED_CONNECTIONS, PYLON_LOAD_KINDS, type PylonLoad, type PylonLoadKind } from './load.ts'

export interface LoadReport {
  readonly self: PeerSelf
  /** Shutting down: its connections are leaving, so its load says nothing about the band. */
  readonly draining: boolean
  readonly connections: PylonLoad
}

/** What a peer's /debug/load told us. */
export interface PeerLoad {
  readonly draining: boolean
  readonly connections: PylonLoad
}

export type PeerLoadResult = { readonly ok: true, readonly load: PeerLoad } | PeerReadFailure

/** Pure: a peer's /debug/load body to its load, or why it is not one. */
export function parseLoadReport (text: string): PeerLoadResult {
  const parsed = parseJsonObject(text)
  if (!parsed.ok) return parsed
  const { connections, draining } = parsed.doc
  if (typeof connections !== 'object' || connections === null || Array.isArray(connections)) return peerReadFailure('invalid_response', 'body has no connections (an object of counts by kind)')
  const counts = {} as Record<PylonLoadKind, number>
  for (const kind of PYLON_LOAD_KINDS) {
    const count = (connections as Record<string, unknown>)[kind]
    if (typeof count !== 'number' || !Number.isSafeInteger(count) || count < 0 || count > MAX_REPORTED_CONNECTIONS) {
      return peerReadFailure('invalid_response', `connections.${kind} is not a whole number from 0 to ${MAX_REPORTED_CONNECTIONS}`)
    }
    counts[kind] = count
  }
  if (draining !== undefined && typeof draining !== 'boolean') return peerReadFailure('invalid_response', 'draining is not true or false')
  return { ok: true, load: { draining: draining === true, connections: counts } }
}
