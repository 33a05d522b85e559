/**
 * The pods LLM client requests can go to, with their connections each (SPEC §6,
 * pod-connections.ts). Rebuilt from every snapshot: a pod keeps its connections while its
 * address, port and upstream trust stay the same; a pod that left, moved, or was dialled under
 * a replaced trust bundle has them closed (requests holding or waiting for one finish; new
 * ones go to the new set). Only serving pods with an http port are candidates: a warming
 * Stargate (`serving=false`) is a target for registrations and tunnels, never for LLM traffic
 * (SPEC §6).
 */
import type { PodTarget, SnapshotReader, TargetSnapshot } from '../discovery/types.ts'
import type { UpstreamTls } from '../control-plane/upstream-pool.ts'
import { PodConnections } from './pod-connections.ts'

export interface HttpPod {
  /** Replaced in place when only node/zone details of the same pod change. */
  target: PodTarget
  readonly httpPort: number
  readonly connections: PodConnections
  /** The upstream trust key its connections were made under ('cleartext' without TLS). */
  readonly trustKey: string
  /** Requests holding or waiting for one of its connections: the load the balancer compares. */
  inflight: number
  /** The same by client (client-address.ts), for the per-client share; entries at 0 are deleted. */
  readonly clients: Map<string, number>
  /** Its connections are closing (it left the snapshot or was replaced): take no new request. */
  retired: boolean
}

export interface HttpPodsOptions {
  readonly snapshot: SnapshotReader
  readonly connectTimeoutMs: number
  readonly keepAliveTimeoutMs?: number
  /** Upstream TLS for --upstream-tls, null for cleartext. */
  readonly tls: (() => UpstreamTls) | null
  readonly serverName: (target: PodTarget) => string
  /** Grace for requests still running on a closed pool before it is destroyed. */
  readonly closeGraceMs: number
  /** Connections per pod (requests beyond them wait in its FIFO; the forwarder bounds that). */
  readonly maxConnectionsPerPod: number
  readonly random?: () => number
}

/** Why a target named by Host has no HttpPod: not serving yet, or no http port at all. */
export function refusalFor (target: PodTarget): 'target_unavailable' | 'target_not_serving' {
  return target.httpPort !== null && !target.serving ? 'target_not_serving' : 'target_unavailable'
}

export class HttpPods {
  readonly #options: HttpPodsOptions
  readonly #random: () => number
  #byIdentity = new Map<string, HttpPod>()
  #candidates: HttpPod[] = []
  readonly #unsubscribe: () => void
  #closing: Promise<void> | null = null

  constructor (options: HttpPodsOptions) {
    this.#options = options
    this.#random = options.random ?? Math.random
    this.#unsubscribe = options.snapshot.subscribe((snapshot) => { this.#rebuild(snapshot) })
  }

  /** The pod with this identity, when it is ready, serving and has an http port. */
  get (identity: string): HttpPod | undefined {
    return this.#byIdentity.get(identity)
  }

  get size (): number {
    return this.#candidates.length
  }

  /** Power of two choices on in-flight requests (SPEC §6), never `exclude`. */
  pick (exclude: HttpPod | null): HttpPod | null {
    const candidates = this.#candidates
    const n = candidates.length
    if (n === 0) return null
    if (n === 1) return candidates[0] === exclude ? null : candidates[0] as HttpPod
    let a = Math.floor(this.#random() * n)
    let b = Math.floor(this.#random() * (n - 1))
    if (b >= a) b++
    if (candidates[a] === exclude) a = b
    else if (candidates[b] === exclude) b = a
    const first = candidates[a] as HttpPod
    const second = candidates[b] as HttpPod
    return second.inflight < first.inflight ? second : first
  }

  /**
   * Upstream trust changed: every pool made under another trust key is replaced; its
   * requests in flight get graceMs before their connections are destroyed.
   */
  refreshTrust (graceMs: number): void {
    this.#rebuild(this.#options.snapshot.current(), graceMs)
  }

  /**
   * Closes every pool: requests in flight may finish for graceMs (by default closeGraceMs), then
   * their connections are destroyed. Shutdown passes what is left of its budget. Idempotent: a
   * second call waits for the first (and its grace is the first's).
   */
  close (graceMs: number = this.#options.closeGraceMs): Promise<void> {
    this.#closing ??= this.#close(graceMs)
    return this.#closing
  }

  async #close (graceMs: number): Promise<void> {
    this.#unsubscribe()
    const pods = [...this.#byIdentity.values()]
    this.#byIdentity = new Map()
    this.#candidates = []
    await Promise.all(pods.map(async (pod) => { await this.#retire(pod, graceMs) }))
  }

  #rebuild (snapshot: TargetSnapshot, graceMs: number = this.#options.closeGraceMs): void {
    const trustKey = this.#options.tls?.().key ?? 'cleartext'
    const next = new Map<string, HttpPod>()
    for (const target of snapshot.targets) {
      if (target.httpPort === null || !target.serving) continue
      const old = this.#byIdentity.get(target.identity)
      if (old !== undefined && old.target.address === target.address && old.httpPort === target.httpPort && old.trustKey === trustKey) {
        old.target = target
        next.set(target.identity, old)
        continue
      }
      next.set(target.identity, this.#create(target, target.httpPort, trustKey))
    }
    for (const [identity, pod] of this.#byIdentity) {
      if (next.get(identity) !== pod) void this.#retire(pod, graceMs)
    }
    this.#byIdentity = next
    this.#candidates = [...next.values()]
  }

  #create (target: PodTarget, httpPort: number, trustKey: string): HttpPod {
    const tls = this.#options.tls?.() ?? null
    const origin = `${tls === null ? 'http' : 'https'}://${target.host}:${httpPort}`
    const connections = new PodConnections({
      origin,
      connections: this.#options.maxConnectionsPerPod,
      keepAliveTimeoutMs: this.#options.keepAliveTimeoutMs ?? 30_000,
      connect: tls === null
        ? { timeout: this.#options.connectTimeoutMs }
        : { timeout: this.#options.connectTimeoutMs, secureContext: tls.secureContext, servername: this.#options.serverName(target) },
    })
    return { target, httpPort, connections, trustKey, inflight: 0, clients: new Map(), retired: false }
  }

  async #retire (pod: HttpPod, graceMs: number = this.#options.closeGraceMs): Promise<void> {
    pod.retired = true
    const timer = setTimeout(destroyConnections, graceMs, pod)
    timer.unref()
    try {
      await pod.connections.close()
    } finally {
      clearTimeout(timer)
    }
  }
}

function destroyConnections (pod: HttpPod): void {
  void pod.connections.destroy()
}
