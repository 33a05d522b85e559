/**
 * The peer set of router replicas (SPEC §10): the pure rules that turn one EndpointSlice of
 * the router's own Service into peers, and the PeerSet that holds the current set and
 * publishes its changes.
 *
 *   slice events ──▶ parsePeerSlice ──▶ SliceIndex<Peer> ──▶ PeerSet.apply ──▶ one queue ──▶ listeners
 *   (peers-kubernetes.ts)               (rule 5: newest wins)    (diff, self out)   (in order)
 *   peers file ───▶ parseWatchedList ───────────────────────▶ PeerSet.replace
 *
 * Invariants:
 * - A peer is `{ id, address, port }`; id is `namespace/name` of the endpoint's Pod
 *   targetRef, else `namespace/<address>` (an endpoint without a Pod is still a replica).
 * - Only ready endpoints are peers, by the same rule as Stargate targets (§3 rule 2: `ready`,
 *   absent meaning ready, and not terminating, whatever `serving` says).
 * - This replica is never its own peer: an endpoint whose address is POD_IP, or whose Pod is
 *   POD_NAME, is left out (either suffices; the config requires at least one with a Service).
 * - The health port is the slice's port named --peer-health-port-name; a slice without it
 *   (briefly, while a Service is edited) uses --peer-health-port rather than dropping peers.
 * - Every change goes through one queue and reaches every listener in the order it was
 *   applied: an add followed by a delete of the same peer is delivered as add, then delete.
 */
import { isReady } from './endpoint-slice.ts'
import { podAddressFamily } from './pod-address.ts'
import type { SliceObservation } from './slice-index.ts'

export interface Peer {
  /** `namespace/pod-name`, or `namespace/<address>` for an endpoint without a Pod targetRef. */
  readonly id: string
  /** IP address as listed in the EndpointSlice (or the peers file). */
  readonly address: string
  /** The peer's health port, where /debug/snapshot is served. */
  readonly port: number
}

export type PeerChange =
  | { readonly type: 'add', readonly peer: Peer }
  | { readonly type: 'update', readonly peer: Peer, readonly previous: Peer }
  | { readonly type: 'delete', readonly peer: Peer }

export type PeerListener = (change: PeerChange) => void

/** How this replica recognises itself among the endpoints. */
export interface PeerSelf {
  /** POD_IP. */
  readonly address: string | null
  /** `namespace/POD_NAME`. */
  readonly id: string | null
}

export const PEER_SKIP_REASONS = ['malformed_slice', 'unsupported_address_type', 'no_address'] as const
export type PeerSkipReason = typeof PEER_SKIP_REASONS[number]

export interface ParsedPeerSlice {
  readonly observations: readonly SliceObservation<Peer>[]
  readonly skipped: readonly PeerSkipReason[]
  /** The slice lacks a valid --peer-health-port-name port; its peers use the fallback port. */
  readonly usedFallbackPort: boolean
}

export interface PeerPortOptions {
  /** --peer-health-port-name */
  readonly name: string
  /** --peer-health-port */
  readonly fallback: number
}

type Json = Record<string, unknown>

function asObject (value: unknown): Json | null {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? value as Json : null
}

function asString (value: unknown): string | null {
  return typeof value === 'string' && value !== '' ? value : null
}

/** The named TCP port of the slice, or null when it is absent or not a valid port number. */
function healthPort (ports: readonly unknown[], name: string): number | null {
  for (const entry of ports) {
    const port = asObject(entry)
    if (port === null || port.name !== name) continue
    const protocol = port.protocol === undefined || port.protocol === null ? 'TCP' : port.protocol
    if (protocol !== 'TCP') continue
    const value = port.port
    return typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= 65535 ? value : null
  }
  return null
}

/** The Pod name of the endpoint's targetRef (kind Pod or empty, as SPEC §3 rule 1), or null. */
function podNameOf (endpoint: Json): string | null {
  const ref = asObject(endpoint.targetRef)
  if (ref === null) return null
  if (ref.kind !== undefined && ref.kind !== null && ref.kind !== '' && ref.kind !== 'Pod') return null
  return asString(ref.name)
}

/** Pure: one EndpointSlice of the router's own Service (as the API server sends it) to peers. */
export function parsePeerSlice (raw: unknown, port: PeerPortOptions): ParsedPeerSlice {
  const slice = asObject(raw)
  const metadata = slice === null ? null : asObject(slice.metadata)
  if (slice === null || metadata === null) return { observations: [], skipped: ['malformed_slice'], usedFallbackPort: false }
  const addressType = slice.addressType
  if (addressType !== 'IPv4' && addressType !== 'IPv6') return { observations: [], skipped: ['unsupported_address_type'], usedFallbackPort: false }
  const ipVersion = addressType === 'IPv4' ? 4 : 6
  const endpoints = Array.isArray(slice.endpoints) ? slice.endpoints : []
  const named = healthPort(Array.isArray(slice.ports) ? slice.ports : [], port.name)
  const peerPort = named ?? port.fallback
  const namespace = asString(metadata.namespace) ?? 'default'
  const observations: SliceObservation<Peer>[] = []
  const skipped: PeerSkipReason[] = []
  for (const entry of endpoints) {
    const endpoint = asObject(entry)
    if (endpoint === null) { skipped.push('malformed_slice'); continue }
    const address = Array.isArray(endpoint.addresses) ? endpoint.addresses[0] : undefined
    if (typeof address !== 'string' || podAddressFamily(address) !== ipVersion) { skipped.push('no_address'); continue }
    const id = `${namespace}/${podNameOf(endpoint) ?? address}`
    observations.push({ identity: id, target: isReady(endpoint) ? { id, address, port: peerPort } : null })
  }
  return { observations, skipped, usedFallbackPort: named === null && observations.length > 0 }
}

function isSelf (peer: Peer, self: PeerSelf): boolean {
  return (self.address !== null && peer.address === self.address) || (self.id !== null && peer.id === self.id)
}

function samePeer (a: Peer, b: Peer): boolean {
  return a.address === b.address && a.port === b.port
}

function byId (a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0
}

/** Pure: the changes that turn `previous` into `next`, in id order. */
export function diffPeers (previous: ReadonlyMap<string, Peer>, next: ReadonlyMap<string, Peer>): PeerChange[] {
  const ids = new Set([...previous.keys(), ...next.keys()])
  const changes: PeerChange[] = []
  for (const id of [...ids].sort(byId)) {
    const before = previous.get(id)
    const after = next.get(id)
    if (before === undefined && after !== undefined) changes.push({ type: 'add', peer: after })
    else if (before !== undefined && after === undefined) changes.push({ type: 'delete', peer: before })
    else if (before !== undefined && after !== undefined && !samePeer(before, after)) changes.push({ type: 'update', peer: after, previous: before })
  }
  return changes
}

interface QueuedChange {
  readonly seq: number
  readonly change: PeerChange
}

/**
 * The current peer set and the one notifier of its changes. Only peer sources call apply
 * and replace; everyone else reads peers() or subscribes. The map is replaced, never
 * mutated, so a peers() array a caller holds stays valid.
 */
export class PeerSet {
  readonly #self: PeerSelf
  readonly #onListenerError: (err: unknown) => void
  #current: ReadonlyMap<string, Peer> = new Map()
  #sorted: readonly Peer[] | null = []
  /** Listener -> the first change sequence it has not seen in its initial state. */
  readonly #listeners = new Map<PeerListener, number>()
  #queue: QueuedChange[] = []
  #head = 0
  #seq = 0
  #delivering = false

  constructor (options: { self: PeerSelf, onListenerError?: (err: unknown) => void }) {
    this.#self = options.self
    this.#onListenerError = options.onListenerError ?? ((err) => { queueMicrotask(() => { throw err }) })
  }

  get size (): number {
    return this.#current.size
  }

  /** The current peers, sorted by id. */
  peers (): readonly Peer[] {
    this.#sorted ??= [...this.#current.values()].sort((a, b) => byId(a.id, b.id))
    return this.#sorted
  }

  get (id: string): Peer | undefined {
    return this.#current.get(id)
  }

  /** Calls listener at once with an add per current peer, then with every change, in order. */
  subscribe (listener: PeerListener): () => void {
    // Changes already queued are part of #current: the new listener starts after them.
    this.#listeners.set(listener, this.#seq + 1)
    for (const peer of this.peers()) this.#call(listener, { type: 'add', peer })
    return () => { this.#listeners.delete(listener) }
  }

  /** Sets the winner of each id (null: no ready endpoint), in the order given. */
  apply (winners: Iterable<readonly [string, Peer | null]>): void {
    let next: Map<string, Peer> | null = null
    for (const [id, candidate] of winners) {
      const peer = candidate !== null && isSelf(candidate, this.#self) ? null : candidate
      const map: ReadonlyMap<string, Peer> = next ?? this.#current
      const before = map.get(id)
      if (peer === null) {
        if (before === undefined) continue
        next ??= new Map(this.#current)
        next.delete(id)
        this.#enqueue({ type: 'delete', peer: before })
      } else if (before === undefined) {
        next ??= new Map(this.#current)
        next.set(id, peer)
        this.#enqueue({ type: 'add', peer })
      } else if (!samePeer(before, peer)) {
        next ??= new Map(this.#current)
        next.set(id, peer)
        this.#enqueue({ type: 'update', peer, previous: before })
      }
    }
    if (next !== null) this.#publish(next)
  }

  /** Makes the set exactly `peers` (a complete list: a relist or a file). */
  replace (peers: Iterable<Peer>): void {
    const next = new Map<string, Peer>()
    for (const peer of peers) if (!isSelf(peer, this.#self)) next.set(peer.id, peer)
    const changes = diffPeers(this.#current, next)
    if (changes.length === 0) return
    for (const change of changes) this.#enqueue(change)
    this.#publish(next)
  }

  #enqueue (change: PeerChange): void {
    this.#queue.push({ seq: ++this.#seq, change })
  }

  #publish (next: ReadonlyMap<string, Peer>): void {
    this.#current = next
    this.#sorted = null
    if (this.#delivering) return // the outer delivery loop reaches the new changes
    this.#delivering = true
    try {
      // Walk by index; a listener that applies more changes appends to the same queue.
      while (this.#head < this.#queue.length) {
        const item = this.#queue[this.#head++] as QueuedChange
        for (const [listener, from] of this.#listeners) {
          if (item.seq >= from) this.#call(listener, item.change)
        }
      }
    } finally {
      this.#queue = []
      this.#head = 0
      this.#delivering = false
    }
  }

  #call (listener: PeerListener, change: PeerChange): void {
    try {
      listener(change)
    } catch (err) {
      this.#onListenerError(err)
    }
  }
}
