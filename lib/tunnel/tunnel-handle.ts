/**
 * A tunnel as the connection registry sees it (lib/drain, SPEC §10, §11): every relay of the
 * family registers each tunnel it relays through one of these, so drain() and abort() mean
 * the same for all three. drain() starts the tunnel's own drain (it refuses new streams, lets
 * the open ones end, then closes with the reason's wire text) and resolves once the tunnel is
 * gone, however that came about; abort() closes it now. The relay calls gone() when the tunnel
 * ended: it leaves the registry.
 */
import type { ConnectionRegistry, Release } from '../drain/connection-registry.ts'
import type { DrainableConnection } from '../drain/connection-kinds.ts'
import type { DrainReason } from '../drain/drain-reasons.ts'
import type { TunnelKind } from './relay.ts'

/** What a relay does for one of its tunnels when the registry asks. */
export interface TunnelDrain {
  /** Stop new work, let the open work end, then close (the handle resolves at gone()). */
  drain (reason: DrainReason): void
  /** Close now, whatever is open (the drain ran out of time). */
  abort (reason: DrainReason): void
}

export class TunnelHandle implements DrainableConnection {
  readonly kind: TunnelKind
  readonly openedAt: number
  readonly #tunnel: TunnelDrain
  #reason: DrainReason | null = null
  #done: Promise<void> | null = null
  #resolve: (() => void) | null = null
  #release: Release | null = null
  #gone = false

  constructor (kind: TunnelKind, openedAt: number, tunnel: TunnelDrain) {
    this.kind = kind
    this.openedAt = openedAt
    this.#tunnel = tunnel
  }

  /**
   * Adds the tunnel to the registry (drained at once while the registry drains everything):
   * whatever the tunnel's drain looks the handle up through must be set before.
   */
  register (registry: ConnectionRegistry): this {
    const release = registry.add(this)
    // A tunnel that ended in its drain at registration leaves at once.
    if (this.#gone) release()
    else this.#release = release
    return this
  }

  /** Why the tunnel drains, once it does. */
  get reason (): DrainReason | null {
    return this.#reason
  }

  drain (reason: DrainReason): Promise<void> {
    if (this.#done !== null) return this.#done
    if (this.#gone) return (this.#done = Promise.resolve())
    this.#reason = reason
    this.#done = new Promise((resolve) => { this.#resolve = resolve })
    this.#tunnel.drain(reason)
    return this.#done
  }

  abort (reason: DrainReason): void {
    if (!this.#gone) this.#tunnel.abort(reason)
  }

  /** The tunnel ended (drained or not). Idempotent. */
  gone (): void {
    if (this.#gone) return
    this.#gone = true
    this.#release?.()
    this.#resolve?.()
  }
}
