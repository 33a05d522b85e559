/**
 * The decision every drainable connection makes (SPEC §11: "stop new work, let open work
 * finish, then close"), apart from its I/O: a count of open work (streams, requests) and
 * whether a drain has begun. Each connection kind feeds it what it sees and acts on the
 * answers: admit() false means refuse the new work, a true from begin() or release() means
 * close the connection now. Once true has been answered, it is never answered again (the
 * connection closes once).
 *
 *   open ──begin(reason)──▶ draining ──last release()──▶ done
 *     │                         (admit() is false from begin on)
 *     └──begin with nothing open──▶ done
 */
import type { DrainReason } from './drain-reasons.ts'

export class DrainGate {
  #open = 0
  #reason: DrainReason | null = null
  #done = false

  /** Work open now. */
  get open (): number {
    return this.#open
  }

  get draining (): boolean {
    return this.#reason !== null
  }

  /** Why the drain began (the first reason given), or null. */
  get reason (): DrainReason | null {
    return this.#reason
  }

  /** The connection was told to close (begin or release answered true). */
  get done (): boolean {
    return this.#done
  }

  /** New work wants to start: counted and true before a drain, false (refuse it) once draining. */
  admit (): boolean {
    if (this.#reason !== null) return false
    this.#open++
    return true
  }

  /** Work that began before the drain and shows up only now (counted whatever the state). */
  adopt (): void {
    this.#open++
  }

  /** Admitted work ended: true when the connection should close now. */
  release (): boolean {
    if (this.#open > 0) this.#open--
    return this.#settle()
  }

  /** The drain begins (only the first reason counts): true when nothing is open, close now. */
  begin (reason: DrainReason): boolean {
    this.#reason ??= reason
    return this.#settle()
  }

  #settle (): boolean {
    if (this.#reason === null || this.#done || this.#open > 0) return false
    this.#done = true
    return true
  }
}
