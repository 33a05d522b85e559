/**
 * Per-peer state that follows the peer set (SPEC §10): a peer that joins starts from the
 * initial state, one that leaves takes its state with it, and one that moves to a new address
 * keeps it (same replica, same Pod). The divergence checker and the balancing loop each keep
 * what they learnt of every peer here. Changes arrive through the peer set's one notifier, in
 * order; onChange runs after the state map has followed each one.
 */
import type { PeerChange, PeerSet } from './peers.ts'

export class PeerStates<S> {
  readonly #states = new Map<string, S>()
  readonly #initial: S
  readonly #unsubscribe: () => void

  constructor (peers: PeerSet, initial: S, onChange: (change: PeerChange) => void = () => {}) {
    this.#initial = initial
    this.#unsubscribe = peers.subscribe((change) => {
      switch (change.type) {
        case 'add':
          this.#states.set(change.peer.id, initial)
          break
        case 'update':
          break
        case 'delete':
          this.#states.delete(change.peer.id)
          break
        default: {
          const never: never = change
          throw new Error(`unknown peer change ${String(never)}`)
        }
      }
      onChange(change)
    })
  }

  /** The state of a peer in the set (the initial one when nothing was recorded). */
  get (id: string): S {
    return this.#states.get(id) ?? this.#initial
  }

  /** Records a peer's state; only for a peer still in the set. */
  set (id: string, state: S): void {
    if (this.#states.has(id)) this.#states.set(id, state)
  }

  values (): IterableIterator<S> {
    return this.#states.values()
  }

  /** Stops following the set; idempotent. */
  close (): void {
    this.#unsubscribe()
  }
}
