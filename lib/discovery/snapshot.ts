/**
 * SPEC §3 rule 6: immutable target snapshots built incrementally. A change of a few targets
 * copies the previous sorted array and patches it (no full rebuild, no re-sort), shares the
 * previous snapshot's map under a small overlay of changed entries (TargetMap), and updates
 * the digest by subtracting the old target's hash and adding the new one's.
 *
 * The digest is the sum modulo 2^128 of a SHA-256 prefix of each target's canonical form:
 * it depends only on the set, not on the order changes arrived in, so replicas that see the
 * same targets report the same digest (peer divergence checks compare it).
 */
import { hash } from 'node:crypto'
import type { PodEndpoint, PodTarget, TargetSnapshot } from './types.ts'

/** Changes an overlay may hold before they are merged into a new base map. */
const MAX_OVERLAY = 128
/**
 * Maps up to this size are copied on every change instead: the copy costs ~0.1 ms per 1,000
 * entries, and a lookup then needs one Map.get instead of two (route lookups outnumber
 * snapshot changes by far; bench/routing/resolve.bench.ts).
 */
const COPY_LIMIT = 2048

const NO_CHANGES: ReadonlyMap<string, PodTarget | null> = new Map()

/**
 * The byIdentity map of a snapshot. Copying a Map of 10,000 targets takes 1–2 ms on the
 * reference machine (docs/benchmarks.md), more than the whole 1 ms budget of a one-slice
 * update, so above COPY_LIMIT targets consecutive snapshots share one base Map and each
 * carries an overlay of the entries changed since (null = removed). Neither map is mutated
 * once a TargetMap holds it. When the overlay would pass MAX_OVERLAY entries it is merged
 * into a fresh base, so get() costs at most two Map lookups and a snapshot at most
 * MAX_OVERLAY copied entries (plus one full copy per MAX_OVERLAY changes). Iteration, which
 * only debug output and tests use, merges once per snapshot.
 */
class TargetMap implements ReadonlyMap<string, PodTarget> {
  readonly #base: ReadonlyMap<string, PodTarget>
  readonly #overlay: ReadonlyMap<string, PodTarget | null>
  readonly size: number
  #merged: ReadonlyMap<string, PodTarget> | null

  private constructor (base: ReadonlyMap<string, PodTarget>, overlay: ReadonlyMap<string, PodTarget | null>, size: number) {
    this.#base = base
    this.#overlay = overlay
    this.size = size
    this.#merged = overlay.size === 0 ? base : null
  }

  static readonly EMPTY: TargetMap = new TargetMap(new Map(), NO_CHANGES, 0)

  /** prev with changes applied (null removes); prev is left as it is. */
  static apply (prev: ReadonlyMap<string, PodTarget>, changes: Iterable<readonly [string, PodTarget | null]>): TargetMap {
    const from = prev instanceof TargetMap ? prev : new TargetMap(new Map(prev), NO_CHANGES, prev.size)
    const list = Array.isArray(changes) ? changes as ReadonlyArray<readonly [string, PodTarget | null]> : [...changes]
    if (from.size > COPY_LIMIT && from.#overlay.size + list.length <= MAX_OVERLAY) {
      const base = from.#base
      const overlay = new Map(from.#overlay)
      let size = from.size
      for (const [identity, target] of list) {
        const present = overlay.has(identity) ? overlay.get(identity) !== null : base.has(identity)
        if (target === null) {
          if (present) size--
          if (base.has(identity)) overlay.set(identity, null)
          else overlay.delete(identity)
        } else {
          if (!present) size++
          overlay.set(identity, target)
        }
      }
      return new TargetMap(base, overlay, size)
    }
    const merged = new Map(from.#base)
    for (const [identity, target] of from.#overlay) {
      if (target === null) merged.delete(identity)
      else merged.set(identity, target)
    }
    for (const [identity, target] of list) {
      if (target === null) merged.delete(identity)
      else merged.set(identity, target)
    }
    return new TargetMap(merged, NO_CHANGES, merged.size)
  }

  get (identity: string): PodTarget | undefined {
    const overlay = this.#overlay
    if (overlay.size !== 0) {
      const changed = overlay.get(identity)
      if (changed !== undefined) return changed ?? undefined
    }
    return this.#base.get(identity)
  }

  has (identity: string): boolean {
    return this.get(identity) !== undefined
  }

  forEach (callback: (target: PodTarget, identity: string, map: ReadonlyMap<string, PodTarget>) => void, thisArg?: unknown): void {
    for (const [identity, target] of this.#all()) callback.call(thisArg, target, identity, this)
  }

  entries (): MapIterator<[string, PodTarget]> {
    return this.#all().entries()
  }

  keys (): MapIterator<string> {
    return this.#all().keys()
  }

  values (): MapIterator<PodTarget> {
    return this.#all().values()
  }

  [Symbol.iterator] (): MapIterator<[string, PodTarget]> {
    return this.#all().entries()
  }

  #all (): ReadonlyMap<string, PodTarget> {
    if (this.#merged !== null) return this.#merged
    const merged = new Map(this.#base)
    for (const [identity, target] of this.#overlay) {
      if (target === null) merged.delete(identity)
      else merged.set(identity, target)
    }
    this.#merged = merged
    return merged
  }
}

export const UNINITIALIZED_SNAPSHOT: TargetSnapshot = Object.freeze({
  initialized: false,
  generation: 0,
  digest: '',
  targets: Object.freeze([]) as readonly PodTarget[],
  byIdentity: TargetMap.EMPTY,
  unready: TargetMap.EMPTY,
})

/**
 * The SHA-256 of a target's canonical form as a 'binary' (latin1) string, one char per
 * byte; its first 16 bytes are the target's term of the digest. A string rather than a
 * Buffer: a Buffer per target took twice the time in a 10,000-target relist
 * (bench/discovery/snapshot.bench.ts).
 */
function digestTerm (t: PodTarget): string {
  // A serving target's form is the one it had before targets carried `serving`, so replicas of
  // either version agree on a set without warming pods.
  const canonical = `${t.identity}\n${t.namespace}\n${t.address}\n${t.grpcPort}\n${t.quicPort}\n${t.httpPort ?? ''}\n${t.nodeName ?? ''}\n${t.zone ?? ''}${t.serving ? '' : '\nnot-serving'}`
  return hash('sha256', canonical, 'binary')
}

/** The big-endian 32-bit word at byte offset at of a digest term. */
function word (term: string, at: number): number {
  return term.charCodeAt(at) * 0x1000000 + ((term.charCodeAt(at + 1) << 16) | (term.charCodeAt(at + 2) << 8) | term.charCodeAt(at + 3))
}

/** A target's term of the digest sum: the first 128 bits of its SHA-256, big-endian. */
export function targetHash (t: PodTarget): bigint {
  const term = digestTerm(t)
  return (BigInt(word(term, 0)) << 96n) | (BigInt(word(term, 4)) << 64n) | (BigInt(word(term, 8)) << 32n) | BigInt(word(term, 12))
}

export function sameTarget (a: PodTarget, b: PodTarget): boolean {
  return a.identity === b.identity && a.namespace === b.namespace && a.address === b.address &&
    a.grpcPort === b.grpcPort && a.quicPort === b.quicPort && a.httpPort === b.httpPort &&
    a.nodeName === b.nodeName && a.zone === b.zone && a.serving === b.serving
}

const LIMB = 2 ** 32

/**
 * The digest sum modulo 2^128 as four 32-bit limbs, most significant first, kept in doubles:
 * adding a term is four additions instead of BigInt arithmetic, which took a third of the
 * digest's cost in a full relist (bench/discovery/snapshot.bench.ts). Limbs may leave
 * [0, 2^32) until normalize(), which next() calls once per snapshot; a double holds them
 * exactly for 2^21 terms, far more than one snapshot adds.
 */
class DigestSum {
  readonly #limbs = [0, 0, 0, 0]

  add (term: string, sign: 1 | -1): void {
    const l = this.#limbs
    l[0] = (l[0] as number) + sign * word(term, 0)
    l[1] = (l[1] as number) + sign * word(term, 4)
    l[2] = (l[2] as number) + sign * word(term, 8)
    l[3] = (l[3] as number) + sign * word(term, 12)
  }

  /** Propagates carries so every limb is in [0, 2^32); the carry out of the top is mod 2^128. */
  normalize (): void {
    const l = this.#limbs
    let carry = 0
    for (let k = 3; k >= 0; k--) {
      const v = (l[k] as number) + carry
      carry = Math.floor(v / LIMB)
      l[k] = v - carry * LIMB
    }
  }

  /** 32 hex digits; call after normalize(). */
  format (): string {
    return this.#limbs.map((v) => v.toString(16).padStart(8, '0')).join('')
  }
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
  readonly #sum = new DigestSum()
  /** identity -> the digest term of its current target. */
  readonly #hashes = new Map<string, string>()

  /**
   * Applies changes (identity -> its endpoint, or null when it is gone or terminating) to prev.
   * A ready endpoint goes into the targets, an unready one into `unready`, never both. Returns
   * the next snapshot, or null when nothing changed and prev is already initialized.
   */
  next (prev: TargetSnapshot, changes: ReadonlyMap<string, PodEndpoint | null>): TargetSnapshot | null {
    const real: Array<[string, PodTarget | null]> = []
    const unreadyChanges: Array<[string, PodTarget | null]> = []
    for (const [identity, change] of changes) {
      const ready = change !== null && change.ready ? change.target : null
      const unready = change !== null && !change.ready ? change.target : null
      if (differs(prev.byIdentity.get(identity), ready)) real.push([identity, ready])
      if (differs(prev.unready.get(identity), unready)) unreadyChanges.push([identity, unready])
    }
    if (real.length === 0 && unreadyChanges.length === 0 && prev.initialized) return null
    const unready = unreadyChanges.length === 0 ? prev.unready : TargetMap.apply(prev.unready, unreadyChanges)
    if (real.length === 0 && prev.initialized) {
      // Only the unready pods changed: the targets and the digest stay as they are.
      return Object.freeze({ initialized: true, generation: prev.generation + 1, digest: prev.digest, targets: prev.targets, byIdentity: prev.byIdentity, unready })
    }

    const byIdentity = TargetMap.apply(prev.byIdentity, real)
    let targets: PodTarget[]
    // Patch the sorted array when few entries change; re-sort when many do (a relist).
    const patch = real.length <= 64
    // Spread, not slice(): prev.targets is frozen, and V8 copies frozen arrays in slice() on
    // a slow path (0.4–1 ms for 10,000 targets vs ~10 µs; bench/discovery/snapshot.bench.ts).
    targets = patch ? [...prev.targets] : []
    for (const [identity, target] of real) {
      const oldHash = this.#hashes.get(identity)
      if (oldHash !== undefined) this.#sum.add(oldHash, -1)
      if (target === null) {
        this.#hashes.delete(identity)
        if (patch) targets.splice(search(targets, identity), 1)
      } else {
        const h = digestTerm(target)
        this.#hashes.set(identity, h)
        this.#sum.add(h, 1)
        if (patch) {
          const at = search(targets, identity)
          if (at >= 0) targets[at] = target
          else targets.splice(-at - 1, 0, target)
        }
      }
    }
    this.#sum.normalize()
    if (!patch) {
      targets = Array.from(byIdentity.values())
      targets.sort((a, b) => compareIdentity(a.identity, b.identity))
    }
    return Object.freeze({
      initialized: true,
      generation: prev.generation + 1,
      digest: this.#sum.format(),
      targets: Object.freeze(targets),
      byIdentity,
      unready,
    })
  }
}

function differs (old: PodTarget | undefined, next: PodTarget | null): boolean {
  return next === null ? old !== undefined : old === undefined || !sameTarget(old, next)
}
