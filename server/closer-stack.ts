/**
 * The router's lifecycle in one place: each component, once started, pushes how to
 * close it, and a failed start-up and the shutdown unwind the same stack, last started first —
 * the tunnels and listeners before the pools they forward to, the pools before discovery,
 * discovery before the TLS material everything was built on.
 *
 * Unwinding waits for each closer in turn, until a deadline (SPEC §11: the shutdown has a
 * budget). Once it has passed, the closers left are still called, so their sockets and timers
 * go, but not waited for: they are returned by name, and the process exits next anyway. A
 * closer that fails counts as done (shutdown-steps.ts). Unwinding twice returns the first
 * unwinding's promise, as undici's dispatcher-base.js keeps its first close().
 */
import { settleWithin } from './shutdown-steps.ts'

/** Closes one component; remainingMs is what is left of the budget (0 once it is spent). */
export type Closer = (remainingMs: number) => Promise<unknown> | void

interface Entry {
  readonly name: string
  readonly close: Closer
}

export class CloserStack {
  readonly #entries: Entry[] = []
  readonly #now: () => number
  #unwinding: Promise<string[]> | null = null

  constructor (now: () => number = Date.now) {
    this.#now = now
  }

  /** A component has started (or is about to listen): how to close it. Only before unwind(). */
  push (name: string, close: Closer): void {
    if (this.#unwinding !== null) throw new Error(`closer '${name}' pushed after the lifecycle began to unwind`)
    this.#entries.push({ name, close })
  }

  /**
   * Closes every component, last pushed first, each awaited until endBy (a Date.now() time).
   * Resolves with the names of the closers still running at endBy, in unwinding order.
   */
  unwind (endBy: number): Promise<string[]> {
    this.#unwinding ??= this.#unwind(endBy)
    return this.#unwinding
  }

  async #unwind (endBy: number): Promise<string[]> {
    const late: string[] = []
    for (let i = this.#entries.length - 1; i >= 0; i--) {
      const { name, close } = this.#entries[i] as Entry
      let step: Promise<unknown>
      try {
        step = Promise.resolve(close(Math.max(0, endBy - this.#now())))
      } catch (err) {
        step = Promise.reject(err)
      }
      late.push(...await settleWithin({ [name]: step }, endBy - this.#now()))
    }
    return late
  }
}
