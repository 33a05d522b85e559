/** The contract between discovery and everything that routes (SPEC §3). */

import { formatHost } from '../host-port.ts'

export interface PodTarget {
  /** Pod name (from the EndpointSlice Pod targetRef); never derived from an IP. */
  readonly identity: string
  readonly namespace: string
  /** IP address as listed in the EndpointSlice. */
  readonly address: string
  /** The address ready for `host:port` strings: IPv6 is bracketed. */
  readonly host: string
  readonly grpcPort: number
  readonly quicPort: number
  readonly httpPort: number | null
  readonly nodeName: string | null
  readonly zone: string | null
}

/** A target as every source builds it: `host` is always the address made ready for `host:port`. */
export function podTarget (fields: Omit<PodTarget, 'host'>): PodTarget {
  return { ...fields, host: formatHost(fields.address) }
}

export interface TargetSnapshot {
  /** False until the first complete list; routing treats every identity as unavailable. */
  readonly initialized: boolean
  /** Increases by one on every published change; 0 while uninitialized. */
  readonly generation: number
  /** Stable hash of the target set; equal sets have equal digests in every replica. */
  readonly digest: string
  /** Sorted by identity. */
  readonly targets: readonly PodTarget[]
  readonly byIdentity: ReadonlyMap<string, PodTarget>
}

export type SnapshotListener = (snapshot: TargetSnapshot) => void

/**
 * What forwarders and the control plane see of discovery: the current snapshot and its
 * changes. A new subscriber is called at once with the current snapshot, then on every
 * published change, in order.
 */
export interface SnapshotReader {
  current (): TargetSnapshot
  subscribe (listener: SnapshotListener): () => void
}

export interface PortNames {
  readonly grpc: string
  readonly quic: string
  readonly http: string
}

/** Health of a discovery source, for /readyz and metrics. */
export interface DiscoveryStatus {
  /** Milliseconds since the snapshot was last known to be current (0 while in sync). */
  stalenessMs (): number
}
