/**
 * SPEC §3 rule 6: immutable target snapshots built incrementally. A change of a few targets
 * copies the previous Map and sorted array and patches them (no full rebuild, no re-sort),
 * and updates the digest by subtracting the old target's hash and adding the new one's.
 *
 * The digest is the sum modulo 2^128 of a SHA-256 prefix of each target's canonical form:
 * it depends only on the set, not on the order changes arrived in, so replicas that see the
 * same targets report the same digest (peer divergence checks compare it).
 */
import { hash } from 'node:crypto'
import type { PodTarget, TargetSnapshot } from './types.ts'

export const UNINITIALIZED_SNAPSHOT: TargetSnapshot = Object.freeze({
  initialized: false,
  generation: 0,
  digest: '',
  targets: Object.freeze([]) as readonly PodTarget[],
  byIdentity: new Map<string, PodTarget>(),
})

const MOD = 1n << 128n

export function targetHash (t: PodTarget): bigint {
  const canonical = `${t.identity}\n${t.namespace}\n${t.address}\n${t.grpcPort}\n${t.quicPort}\n${t.httpPort ?? ''}\n${t.nodeName ?? ''}\n${t.zone ?? ''}`
  const digest = hash('sha256', canonical, 'buffer')
  return (digest.readBigUInt64BE(0) << 64n) | digest.readBigUInt64BE(8)
}

export function sameTarget (a: PodTarget, b: PodTarget): boolean {
  return a.identity === b.identity && a.namespace === b.namespace && a.address === b.address &&
    a.grpcPort === b.grpcPort && a.quicPort === b.quicPort && a.httpPort === b.httpPort &&
    a.nodeName === b.nodeName && a.zone === b.zone
}

function formatDigest (sum: bigint): string {
  return sum.toString(16).padStart(32, '0')
}

function compareIdentity (a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0
}

/** Index of identity in a sorted array, or -(insertion point) - 1. */
function search (targets: readonly PodTarget[], identity: string): number {
  let lo = 0
  let hi = targets.length - 1
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1
    const c = compareIdentity((targets[mid] as PodTarget).identity, identity)
    if (c === 0) return mid
    if (c < 0) lo = mid + 1
    else hi = mid - 1
  }
  return -lo - 1
}

/**
 * Keeps the digest state that goes with the snapshots it builds. Only the snapshot store
 * calls it; snapshots it returns are frozen and never mutated afterwards.
 */
export class SnapshotBuilder {
  #sum = 0n
  readonly #hashes = new Map<string, bigint>()

  /**
   * Applies changes (identity -> new target, or null for removal) to prev. Returns the next
   * snapshot, or null when nothing changed and prev is already initialized.
   */
  next (prev: TargetSnapshot, changes: ReadonlyMap<string, PodTarget | null>): TargetSnapshot | null {
    const real: Array<[string, PodTarget | null]> = []
    for (const [identity, target] of changes) {
      const old = prev.byIdentity.get(identity)
      if (target === null ? old === undefined : old !== undefined && sameTarget(old, target)) continue
      real.push([identity, target])
    }
    if (real.length === 0 && prev.initialized) return null

    const byIdentity = new Map(prev.byIdentity)
    let targets: PodTarget[]
    // Patch the sorted array when few entries change; re-sort when many do (a relist).
    const patch = real.length <= 64
    targets = patch ? prev.targets.slice() : []
    for (const [identity, target] of real) {
      const oldHash = this.#hashes.get(identity)
      if (oldHash !== undefined) this.#sum -= oldHash
      if (target === null) {
        byIdentity.delete(identity)
        this.#hashes.delete(identity)
        if (patch) targets.splice(search(targets, identity), 1)
      } else {
        byIdentity.set(identity, target)
        const h = targetHash(target)
        this.#hashes.set(identity, h)
        this.#sum += h
        if (patch) {
          const at = search(targets, identity)
          if (at >= 0) targets[at] = target
          else targets.splice(-at - 1, 0, target)
        }
      }
    }
    this.#sum = ((this.#sum % MOD) + MOD) % MOD
    if (!patch) {
      targets = Array.from(byIdentity.values())
      targets.sort((a, b) => compareIdentity(a.identity, b.identity))
    }
    return Object.freeze({
      initialized: true,
      generation: prev.generation + 1,
      digest: formatDigest(this.#sum),
      targets: Object.freeze(targets),
      byIdentity,
    })
  }
}
