/**
 * Reads one peer's `/debug/load` through the bounded peer reader (the one the snapshot
 * divergence check uses): within --peer-check-timeout-ms, at most PEER_LOAD_MAX_BYTES, every
 * failure a value with a bounded reason.
 */
import { createPeerDocumentFetcher, type PeerDocumentFetcher } from '../discovery/peer-read.ts'
import { parseLoadReport, type PeerLoadResult } from './load-report.ts'

/** A load report is under a kilobyte; its last-round section lists the peers (a few hundred bytes each). */
export const PEER_LOAD_MAX_BYTES = 1024 * 1024

export type PeerLoadFetcher = PeerDocumentFetcher<PeerLoadResult>

export function createPeerLoadFetcher (options: { timeoutMs: number, maxBytes?: number }): PeerLoadFetcher {
  return createPeerDocumentFetcher(options, '/debug/load', options.maxBytes ?? PEER_LOAD_MAX_BYTES, parseLoadReport)
}
