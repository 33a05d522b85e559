/**
 * Reads one peer's `/debug/snapshot` (SPEC §9: `{ initialized, generation, digest, ... }`)
 * from its health port through the bounded peer reader (peer-read.ts). Every failure is a
 * value with a bounded reason, never a throw: the divergence checker counts them and they are
 * not divergence.
 */
import type { PeerCheckErrorReason } from './peer-metrics.ts'
import { createPeerDocumentFetcher, parseJsonObject, peerReadFailure, type PeerDocumentFetcher } from './peer-read.ts'

/** About 20,000 targets of /debug/snapshot JSON. */
const PEER_SNAPSHOT_MAX_BYTES = 4 * 1024 * 1024

export interface PeerSnapshot {
  readonly initialized: boolean
  readonly generation: number
  readonly digest: string
}

export type PeerSnapshotResult =
  | { readonly ok: true, readonly snapshot: PeerSnapshot }
  | { readonly ok: false, readonly reason: PeerCheckErrorReason, readonly message: string }

export type PeerSnapshotFetcher = PeerDocumentFetcher<PeerSnapshotResult>

/** Pure: the parsed body of /debug/snapshot to what the checker compares. */
export function parsePeerSnapshot (text: string): PeerSnapshotResult {
  const parsed = parseJsonObject(text)
  if (!parsed.ok) return parsed
  const { generation, digest, initialized } = parsed.doc
  if (typeof generation !== 'number' || !Number.isSafeInteger(generation) || generation < 0) return peerReadFailure('invalid_response', 'body has no generation (a whole number)')
  if (typeof digest !== 'string' || digest.length > 256) return peerReadFailure('invalid_response', 'body has no digest (a string)')
  return { ok: true, snapshot: { initialized: initialized === true, generation, digest } }
}

export function createPeerSnapshotFetcher (options: { timeoutMs: number, maxBytes?: number }): PeerSnapshotFetcher {
  return createPeerDocumentFetcher(options, '/debug/snapshot', options.maxBytes ?? PEER_SNAPSHOT_MAX_BYTES, parsePeerSnapshot)
}
