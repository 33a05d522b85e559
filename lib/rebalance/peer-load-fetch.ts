/**
 * Reads one peer's `/debug/load` through the bounded peer reader (the one the snapshot
 * divergence check uses): within --peer-check-timeout-ms, at most PEER_LOAD_MAX_BYTES, every
 * failure a value with a bounded reason.
 */
import type { Peer } from '../discovery/peers.ts'
import { createPeerReader } from '../discovery/peer-read.ts'
import { parseLoadReport, type PeerLoadResult } from './load-report.ts'

/** A load report is under a kilobyte; its last-round section lists the peers (a few hundred bytes each). */
export const PEER_LOAD_MAX_BYTES = 1024 * 1024

export interface PeerLoadFetcher {
  fetch (peer: Peer): Promise<PeerLoadResult>
  /** Aborts reads in flight and releases connections; idempotent. */
  close (): Promise<void>
}

export function createPeerLoadFetcher (options: { timeoutMs: number, maxBytes?: number }): PeerLoadFetcher {
  const maxBytes = options.maxBytes ?? PEER_LOAD_MAX_BYTES
  const reader = createPeerReader({ timeoutMs: options.timeoutMs })
  return {
    async fetch (peer: Peer): Promise<PeerLoadResult> {
      const body = await reader.read(peer, '/debug/load', maxBytes)
      return body.ok ? parseLoadReport(body.text) : body
    },
    close: () => reader.close(),
  }
}
