/**
 * A runtime object that follows the TLS material through reloads (SPEC §8): built from the
 * state by a TlsConsumer of the manager, committed with every other consumer of the change,
 * and owned here from then on. The follower hands the current one to whoever asks, releases
 * the one it replaced (open connections keep theirs: engine credentials are freed when their
 * last connection ends), and on release() stops following and releases the current one.
 *
 * Whatever reads TLS material at run time goes through a follower (the tunnels' engine
 * credentials and listener contexts, the upstream legs' trust: upstream-trust-consumer.ts),
 * so a stopped component leaves no consumer in the manager and no credential in the engine.
 */
import type { TlsMaterialManager } from './manager.ts'
import type { MaterialType, TlsState } from './types.ts'

export interface TlsFollowerOptions<R> {
  readonly name: string
  readonly dependsOn: readonly MaterialType[]
  /** The object for a state; return current to keep it; throw when the state cannot serve (the reload is rejected). */
  readonly build: (state: TlsState, current: R | null) => R
  /** Frees an object no longer handed out (engine credentials); default: nothing to free. */
  readonly release?: (runtime: R) => void
  /** A new object was committed (the first one included); must not throw. */
  readonly onCommit?: (runtime: R, previous: R | null) => void
}

export interface TlsFollower<R> {
  /** What new connections or dials get now (after release(), the last one, released: a dial with it fails). */
  current (): R
  /** Stops following (the manager's consumer is removed) and releases the current object. Idempotent. */
  release (): void
}

/** The part of the manager a follower uses. */
export type TlsSource = Pick<TlsMaterialManager, 'addConsumer' | 'onChange'>

export function followTls<R> (manager: TlsSource, options: TlsFollowerOptions<R>): TlsFollower<R> {
  let current: R | null = null
  let built = false
  let released = false
  const remove = manager.addConsumer<R>({
    name: options.name,
    dependsOn: options.dependsOn,
    build: (state) => options.build(state, built ? current : null),
    commit: (candidate) => {
      if (built && candidate === current) return
      const previous = built ? current : null
      current = candidate
      built = true
      if (previous !== null) options.release?.(previous)
      options.onCommit?.(candidate, previous)
    },
  })
  return {
    current: () => {
      if (!built) throw new Error(`tls follower ${options.name} has never built`)
      return current as R
    },
    release: () => {
      if (released) return
      released = true
      remove()
      if (built && current !== null) options.release?.(current)
    },
  }
}
