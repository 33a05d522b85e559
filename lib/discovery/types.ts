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
  /**
   * The endpoint's `serving` condition (absent: same as ready). False for a warming Stargate
   * behind a `publishNotReadyAddresses` Service: a target for registrations and tunnels, never
   * for LLM client HTTP (SPEC §3 rule 2, §6).
   */
  readonly serving: boolean
}

/** A target as every source builds it: `host` is always the address made ready for `host:port`. */
export function podTarget (fields: Omit<PodTarget, 'host'>): PodTarget {
  return { ...fields, host: formatHost(fields.address) }
}

/**
 * What one EndpointSlice says about a pod that is not terminating (SPEC §3 rule 2): ready, it
 * is a target; not ready, it is only present: never advertised or routed to, but what the
 * router already relays to it stays (only a terminating or gone pod is drained).
 */
export interface PodEndpoint {
  readonly target: PodTarget
  readonly ready: boolean
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
  /**
   * Pods listed not ready and not terminating, by identity: not targets (nothing advertises or
   * routes to them), but registrations and tunnels already relayed to them are kept, as
   * upstream keeps them. Not part of the digest: it changes nothing a peer or a Pylon sees.
   */
  readonly unready: ReadonlyMap<string, PodTarget>
}

/**
 * The pod under this identity while it is present and not terminating (a target, or unready),
 * else undefined. What drains read: a registration or tunnel is drained once this is gone.
 */
export function presentTarget (snapshot: TargetSnapshot, identity: string): PodTarget | undefined {
  return snapshot.byIdentity.get(identity) ?? snapshot.unready.get(identity)
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
