/**
 * A Pylon as it behaves in production, built on the Pylon fixture (test/fixtures/pylon.ts):
 * it watches WatchStargates and keeps exactly one registration stream open per advertised
 * Stargate. When a stream ends (the router ends it with UNAVAILABLE when its pod leaves the
 * ready set or dies), it re-registers after a short delay, but only while that Stargate is
 * still advertised; a Stargate that left the set gets no retries.
 *
 * It records, for the matrix to assert on:
 * - every advertised set with the time it arrived (performance.now()), to measure convergence
 *   and to check the transient sets between two cluster states;
 * - every stream it opened: which pod answered, how many acks, how it ended, whether the
 *   Stargate was still advertised when it ended, and whether the cluster had that pod as a
 *   target (ready endpoint, not terminating) when the stream was opened (`targetAtOpen`, from
 *   the `isTarget` callback).
 */
import type * as grpc from '@grpc/grpc-js'
import type { Pylon, Registration } from '../fixtures/pylon.ts'
import type { StargateInfo, WatchStargatesResponse } from '../fixtures/stargate-proto.ts'

export interface AdvertisedSet {
  readonly at: number
  readonly stargates: readonly StargateInfo[]
  readonly ids: readonly string[]
}

export class StreamAttempt {
  readonly id: string
  readonly openedAt: number
  readonly targetAtOpen: boolean
  /** Whether the pod was serving (Ready) when the stream was opened; null when not asked. */
  readonly servingAtOpen: boolean | null
  readonly registration: Registration
  /** Still advertised when the stream ended (null while open). */
  advertisedAtEnd: boolean | null = null

  constructor (id: string, targetAtOpen: boolean, servingAtOpen: boolean | null, registration: Registration) {
    this.id = id
    this.openedAt = performance.now()
    this.targetAtOpen = targetAtOpen
    this.servingAtOpen = servingAtOpen
    this.registration = registration
  }

  get pod (): string | null {
    return this.registration.pod
  }

  get acks (): number {
    return this.registration.acks.length
  }

  get status (): grpc.StatusObject | null {
    return this.registration.status
  }

  /** Answered by the pod it was opened for, with at least one ack. */
  get succeeded (): boolean {
    return this.pod === this.id && this.acks > 0
  }

  toString (): string {
    const end = this.status === null ? 'open' : `ended ${this.status.code} "${this.status.details}"`
    return `stream to ${this.id}: pod ${String(this.pod)}, ${this.acks} acks, ${end}`
  }
}

export interface ReconcilingPylonOptions {
  /** Whether the cluster has this pod as a target right now (recorded per stream). */
  readonly isTarget: (id: string) => boolean
  /** Whether the cluster has this pod serving (Ready) right now (recorded per stream). */
  readonly isServing?: (id: string) => boolean
  /** Delay before re-registering after a stream ended; default 100 ms. */
  readonly retryDelayMs?: number
}

export class ReconcilingPylon {
  readonly pylon: Pylon
  readonly sets: AdvertisedSet[] = []
  readonly attempts: StreamAttempt[] = []
  readonly #open = new Map<string, StreamAttempt>()
  readonly #retries = new Set<NodeJS.Timeout>()
  readonly #options: ReconcilingPylonOptions
  #closed = false

  constructor (pylon: Pylon, options: ReconcilingPylonOptions) {
    this.pylon = pylon
    this.#options = options
  }

  start (): void {
    this.pylon.watch((set: WatchStargatesResponse) => {
      this.sets.push({ at: performance.now(), stargates: set.stargates, ids: set.stargates.map((s) => s.stargateId) })
      this.#reconcile()
    })
  }

  get latest (): AdvertisedSet | undefined {
    return this.sets[this.sets.length - 1]
  }

  /** Streams open right now, by Stargate id. */
  get open (): ReadonlyMap<string, StreamAttempt> {
    return this.#open
  }

  close (): void {
    this.#closed = true
    for (const timer of this.#retries) clearTimeout(timer)
    this.pylon.close()
  }

  #advertised (id: string): StargateInfo | undefined {
    return this.latest?.stargates.find((s) => s.stargateId === id)
  }

  #reconcile (): void {
    if (this.#closed) return
    for (const stargate of this.latest?.stargates ?? []) {
      if (!this.#open.has(stargate.stargateId)) this.#openStream(stargate)
    }
  }

  #openStream (stargate: StargateInfo): void {
    const registration = this.pylon.register(stargate)
    const attempt = new StreamAttempt(stargate.stargateId, this.#options.isTarget(stargate.stargateId), this.#options.isServing?.(stargate.stargateId) ?? null, registration)
    this.attempts.push(attempt)
    this.#open.set(attempt.id, attempt)
    registration.call.on('status', () => {
      attempt.advertisedAtEnd = this.#advertised(attempt.id) !== undefined
      if (this.#open.get(attempt.id) === attempt) this.#open.delete(attempt.id)
      registration.client.close()
      if (this.#closed || !attempt.advertisedAtEnd) return
      const timer = setTimeout(() => {
        this.#retries.delete(timer)
        this.#reconcile()
      }, this.#options.retryDelayMs ?? 100)
      this.#retries.add(timer)
    })
  }
}
