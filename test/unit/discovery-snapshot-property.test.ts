// SPEC §3 rule 6, property test: the incremental path (few changes: patch the sorted array)
// and the bulk path (more than 64 changes: re-sort) must give exactly the snapshot a
// from-scratch build of the same set gives, for random sequences of changes. Seeded, so a
// failure names a seed that reproduces it.
import t from 'tap'
import { isDeepStrictEqual } from 'node:util'
import { SnapshotStore } from '../../lib/discovery/snapshot-store.ts'
import { SnapshotBuilder, UNINITIALIZED_SNAPSHOT, sameTarget } from '../../lib/discovery/snapshot.ts'
import type { PodTarget, TargetSnapshot } from '../../lib/discovery/types.ts'

/** mulberry32: small, fast, good enough to spread test inputs. */
function prng (seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6D2B79F5) >>> 0
    let x = a
    x = Math.imul(x ^ (x >>> 15), x | 1)
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61)
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

const POOL = Array.from({ length: 400 }, (_, i) => i % 3 === 0 ? `stargate-${i}` : i % 3 === 1 ? `sg-7d9f8b6c4-${i.toString(36)}` : `${i}`)

function randomTarget (rand: () => number, identity: string): PodTarget {
  const pick = <T>(values: readonly T[]): T => values[Math.floor(rand() * values.length)] as T
  const address = pick(['10.0.0.1', '10.0.0.2', 'fd00::1', '10.1.2.3'])
  return {
    identity,
    namespace: pick(['stargate', 'other']),
    address,
    host: address.includes(':') ? `[${address}]` : address,
    grpcPort: pick([50051, 50061]),
    quicPort: pick([50052, 50062]),
    httpPort: pick([null, 8000]),
    nodeName: pick([null, 'node-a']),
    zone: pick([null, 'zone-1']),
    serving: pick([true, false]),
  }
}

function fromScratch (model: ReadonlyMap<string, PodTarget>): TargetSnapshot {
  const built = new SnapshotBuilder().next(UNINITIALIZED_SNAPSHOT, new Map([...model].map(([identity, target]) => [identity, { target, ready: true }])))
  if (built === null) throw new Error('a from-scratch build always publishes')
  return built
}

/** The first way got differs from a from-scratch build of model, or null. */
function difference (got: TargetSnapshot, want: TargetSnapshot, model: ReadonlyMap<string, PodTarget>): string | null {
  const sorted = [...model.keys()].sort((a, b) => a < b ? -1 : a > b ? 1 : 0)
  if (!isDeepStrictEqual(got.targets.map((x) => x.identity), sorted)) return 'identities are not the sorted model'
  if (!isDeepStrictEqual(got.targets, want.targets)) return 'targets differ'
  if (!isDeepStrictEqual(new Map(got.byIdentity), new Map(want.byIdentity))) return 'maps differ'
  if (got.digest !== want.digest) return `digest ${got.digest} != ${want.digest}`
  if (!got.targets.every((x) => got.byIdentity.get(x.identity) === x)) return 'array and map hold different objects'
  if (got.byIdentity.size !== model.size) return `map size ${got.byIdentity.size} != ${model.size}`
  for (const identity of POOL) {
    if (got.byIdentity.has(identity) !== model.has(identity)) return `map has(${identity}) is wrong`
    if (!model.has(identity) && got.byIdentity.get(identity) !== undefined) return `map get(${identity}) returns a removed target`
  }
  return null
}

t.test('incremental and bulk updates give the same snapshot as a from-scratch build', async (t) => {
  let patched = 0
  let bulk = 0
  for (const seed of [1, 2, 3, 42, 2026]) {
    const rand = prng(seed)
    const store = new SnapshotStore()
    store.markInitialized()
    store.flush()
    const model = new Map<string, PodTarget>()
    for (let batch = 0; batch < 120; batch++) {
      // Batch sizes around both sides of the 64-change threshold, and small ones.
      const size = [1, 2, 5, 40, 64, 65, 66, 150, 400][Math.floor(rand() * 9)] as number
      const before = new Map(model)
      for (let i = 0; i < size; i++) {
        const identity = POOL[Math.floor(rand() * POOL.length)] as string
        if (rand() < 0.35) {
          store.stage(identity, null)
          model.delete(identity)
        } else {
          // Half the time restage the current value: a no-op the store must not count.
          const current = model.get(identity)
          const next = current !== undefined && rand() < 0.5 ? { ...current } : randomTarget(rand, identity)
          store.stage(identity, next)
          model.set(identity, next)
        }
      }
      let changed = 0
      for (const identity of new Set([...before.keys(), ...model.keys()])) {
        const a = before.get(identity)
        const b = model.get(identity)
        if (a === undefined ? b !== undefined : b === undefined || !sameTarget(a, b)) changed++
      }
      const generation = store.current().generation
      const published = store.flush()
      if (changed > 64) bulk++
      else if (changed > 0) patched++
      const got = store.current()
      const want = fromScratch(model)
      const problem = published !== changed > 0
        ? `published=${published} after ${changed} changes`
        : got.generation !== generation + (changed > 0 ? 1 : 0)
          ? `generation ${got.generation} after ${generation}`
          : difference(got, want, model)
      if (problem !== null) {
        t.fail(`seed ${seed} batch ${batch} (${changed} changes): ${problem}`)
        t.strictSame(got.targets, want.targets, 'targets')
        return
      }
    }
    t.pass(`seed ${seed}: every batch matches a from-scratch build`)
  }
  t.ok(patched > 50, `the incremental path ran (${patched} publishes)`)
  t.ok(bulk > 50, `the bulk path ran (${bulk} publishes)`)
})
