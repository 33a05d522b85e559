/**
 * Close after a grace (SPEC §8): a trust change does not cut tunnels at once, it gives each the
 * grace to finish, then closes it with the reason of the change. One timer per tunnel; a
 * tunnel scheduled once is not scheduled again, a tunnel that ended on its own is forgotten,
 * and shutdown clears every timer. Which tunnels a change picks is decided here too, the same
 * for every relay: another trust key for an upstream change, a certificate that no longer
 * verifies for a client-trust change.
 */
import type { X509Certificate } from 'node:crypto'
import { untrustedConnections } from '../tls/trust-policy.ts'
import type { TrustBundle } from '../tls/types.ts'
import { TUNNEL_CLOSE_REASONS } from './errors.ts'

export class GraceCloser<T> {
  readonly #timers = new Map<T, NodeJS.Timeout>()
  readonly #close: (tunnel: T, reason: string) => void

  /** close: the grace ran out (the tunnel is no longer scheduled). */
  constructor (close: (tunnel: T, reason: string) => void) {
    this.#close = close
  }

  /** Whether the tunnel waits out a grace. */
  has (tunnel: T): boolean {
    return this.#timers.has(tunnel)
  }

  /** Closes the tunnel with reason after graceMs; false when it is scheduled already. */
  closeLater (tunnel: T, reason: string, graceMs: number): boolean {
    if (this.#timers.has(tunnel)) return false
    const timer = setTimeout(GraceCloser.#onGrace<T>, graceMs, this, tunnel, reason)
    timer.unref()
    this.#timers.set(tunnel, timer)
    return true
  }

  /** The tunnel ended: its grace, if any, is cancelled. */
  forget (tunnel: T): void {
    const timer = this.#timers.get(tunnel)
    if (timer === undefined) return
    clearTimeout(timer)
    this.#timers.delete(tunnel)
  }

  /** Every grace cancelled (shutdown closes the tunnels itself). */
  clear (): void {
    for (const timer of this.#timers.values()) clearTimeout(timer)
    this.#timers.clear()
  }

  /**
   * Upstream trust changed: of the open tunnels, those whose pod leg was dialled under another
   * trust key (keyOf null: not dialled) close after graceMs. Returns the ones scheduled now.
   */
  closeTrust (open: Iterable<T>, keyOf: (tunnel: T) => string | null, key: string, graceMs: number): T[] {
    const scheduled: T[] = []
    for (const tunnel of open) {
      const dialled = keyOf(tunnel)
      if (dialled === null || dialled === key) continue
      if (this.closeLater(tunnel, TUNNEL_CLOSE_REASONS.trust_replaced, graceMs)) scheduled.push(tunnel)
    }
    return scheduled
  }

  /**
   * Client trust changed: of the open tunnels, those whose Pylon certificate does not verify
   * against the new bundle close after graceMs (a tunnel without one is kept: no mTLS on it).
   * Returns the ones scheduled now.
   */
  closeUntrustedClients (open: Iterable<T>, chainOf: (tunnel: T) => readonly X509Certificate[], bundle: TrustBundle, graceMs: number, now: Date): T[] {
    const waiting = [...open].filter((tunnel) => !this.#timers.has(tunnel))
    const untrusted = untrustedConnections(waiting, chainOf, bundle, now)
    for (const tunnel of untrusted) this.closeLater(tunnel, TUNNEL_CLOSE_REASONS.client_trust_replaced, graceMs)
    return untrusted
  }

  static #onGrace<T> (closer: GraceCloser<T>, tunnel: T, reason: string): void {
    closer.#timers.delete(tunnel)
    closer.#close(tunnel, reason)
  }
}
