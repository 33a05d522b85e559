/**
 * /readyz (SPEC §9): ready iff the snapshot is initialized with at least one ready target,
 * discovery is fresh enough (when a bound is set), the server identity is valid, and the
 * process is not draining. Each check returns the one-line reason it fails, or null.
 */
import type { DiscoveryStatus, SnapshotReader } from '../discovery/types.ts'

export type ReadinessCheck = () => string | null

export function snapshotReadiness (snapshot: SnapshotReader, explain: () => string | null = () => null): ReadinessCheck {
  return () => {
    const current = snapshot.current()
    if (!current.initialized) return `target snapshot not initialized yet${suffix(explain())}`
    if (current.targets.length === 0) return 'no ready stargate targets'
    return null
  }
}

export function stalenessReadiness (status: DiscoveryStatus, maxStalenessMs: number): ReadinessCheck | null {
  if (maxStalenessMs <= 0) return null
  return () => {
    const staleness = status.stalenessMs()
    return staleness > maxStalenessMs ? `target snapshot stale for ${Math.round(staleness / 1000)}s (limit ${maxStalenessMs / 1000}s)` : null
  }
}

export class Readiness {
  readonly #checks: ReadinessCheck[] = []
  #draining = false

  add (check: ReadinessCheck | null): void {
    if (check !== null) this.#checks.push(check)
  }

  startDraining (): void {
    this.#draining = true
  }

  get draining (): boolean {
    return this.#draining
  }

  /** The first failing reason, or null when ready. */
  check (): string | null {
    if (this.#draining) return 'draining: shutting down'
    for (const check of this.#checks) {
      const reason = check()
      if (reason !== null) return reason
    }
    return null
  }
}

function suffix (detail: string | null): string {
  return detail === null ? '' : `: ${detail}`
}
