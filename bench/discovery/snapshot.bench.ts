/**
 * Benchmark: the target snapshot of 10,000 endpoints in 100 EndpointSlices.
 *
 * Every case goes through the code the router runs: parseEndpointSlice -> SliceIndex ->
 * SnapshotStore.stage -> flush at the end of the tick (lib/discovery/slice-targets.ts,
 * the consumer KubernetesTargetSource uses). A sample starts when the slice object is
 * handed to the consumer and ends inside a snapshot subscriber, i.e. when the new snapshot is
 * published. Slices are freshly parsed JSON for every sample (untimed), as the watch delivers.
 *
 * Baseline, same run: a naive full rebuild on every slice update (parse all 100 slices, build
 * the Map, sort, hash every target), which is what an implementation without the slice index
 * and incremental snapshot builder would do.
 */
import { setImmediate as nextMacrotask } from 'node:timers/promises'
import { ClusterModel, NAMESPACE, PORTS, type SliceModel } from './_cluster.ts'
import { SliceTargets } from '../../lib/discovery/slice-targets.ts'
import { collectGarbage, measure, measureEach, now, Report } from '../_util.ts'
import { parseEndpointSlice } from '../../lib/discovery/endpoint-slice.ts'
import { targetHash } from '../../lib/discovery/snapshot.ts'
import { SnapshotStore } from '../../lib/discovery/snapshot-store.ts'
import type { PodTarget, TargetSnapshot } from '../../lib/discovery/types.ts'
import { encodeStargates } from '../../lib/control-plane/watch-stargates.ts'
import { compileHostnameTemplate } from '../../lib/routing/hostname-template.ts'

const SLICES = 100
const ENDPOINTS_PER_SLICE = 100

const NAIVE = 'naive rebuild per update (baseline)'
const RELIST = 'relist into empty index+store → published'

const report = new Report('discovery/snapshot')
const cluster = new ClusterModel(SLICES, ENDPOINTS_PER_SLICE)
report.info('endpoints', cluster.endpointCount)
report.info('slices', SLICES)

/** A store with a source feeding it, and a way to wait for its next published snapshot. */
class Pipeline {
  readonly store = new SnapshotStore({ onListenerError: (err) => { throw err } })
  readonly source = new SliceTargets({ store: this.store, ports: PORTS })
  publishedAt = 0
  #resolve: (() => void) | null = null

  constructor () {
    this.store.subscribe(() => {
      this.publishedAt = now()
      const resolve = this.#resolve
      this.#resolve = null
      resolve?.()
    })
  }

  /** Call before the timed part; awaiting it after the event resolves when a snapshot is published. */
  nextPublish (): Promise<void> {
    const published = new Promise<void>((resolve) => { this.#resolve = resolve })
    const fail = nextMacrotask().then(() => { throw new Error('no snapshot was published by the end of the tick') })
    return Promise.race([published, fail])
  }
}

function pick (slices: readonly SliceModel[], i: number): { slice: SliceModel, endpoint: number } {
  const slice = slices[i % slices.length] as SliceModel
  return { slice, endpoint: Math.floor(i / slices.length) * 37 % slice.endpoints.length }
}

/** Gives a ready endpoint a new IP (a not-ready one has no target, so nothing would publish). */
function changeIp (model: ClusterModel, i: number): SliceModel {
  const { slice, endpoint } = pick(model.slices, i)
  let e = slice.endpoints[endpoint] as SliceModel['endpoints'][number]
  for (let k = 1; !e.ready; k++) e = slice.endpoints[(endpoint + k) % slice.endpoints.length] as SliceModel['endpoints'][number]
  e.ip = model.freshIp()
  model.touch(slice)
  return slice
}

let flipped: { slice: SliceModel, endpoint: number } | null = null
/** One sample makes an endpoint not ready; the next makes it ready again. */
function flipReadiness (i: number): SliceModel {
  const at = flipped ?? pick(cluster.slices, i)
  const e = at.slice.endpoints[at.endpoint] as SliceModel['endpoints'][number]
  e.ready = !e.ready
  flipped = e.ready ? null : at
  cluster.touch(at.slice)
  return at.slice
}

function fresh (model: ClusterModel, slice: SliceModel): unknown {
  return (JSON.parse(model.watchEventLine(slice)) as { object: unknown }).object
}

// --- Baseline: rebuild everything from the raw slices on every update. ---
const MOD = 1n << 128n
function naiveRebuild (raw: ReadonlyMap<string, unknown>, generation: number): TargetSnapshot {
  const byIdentity = new Map<string, PodTarget>()
  for (const slice of raw.values()) {
    for (const o of parseEndpointSlice(slice, PORTS).observations) {
      if (o.target === null || !o.target.ready) byIdentity.delete(o.identity)
      else byIdentity.set(o.identity, o.target.target)
    }
  }
  const targets = [...byIdentity.values()].sort((a, b) => a.identity < b.identity ? -1 : a.identity > b.identity ? 1 : 0)
  let sum = 0n
  for (const t of targets) sum = (sum + targetHash(t)) % MOD
  return Object.freeze({ initialized: true, generation, digest: sum.toString(16).padStart(32, '0'), targets: Object.freeze(targets), byIdentity, unready: new Map() })
}

// The baseline gets its own copy of the cluster (same seed), so its updates and the
// router's do not pile up in each other's slices.
const naiveCluster = new ClusterModel(SLICES, ENDPOINTS_PER_SLICE)
// Slices in observation order: an updated slice moves to the end, so the later one wins.
const naiveRaw = new Map<string, unknown>()
for (const s of naiveCluster.slices) naiveRaw.set(s.name, fresh(naiveCluster, s))
let naiveGeneration = 0
let naiveLast: TargetSnapshot | null = null
let naiveI = 0
function naiveSample (): number {
  const slice = changeIp(naiveCluster, naiveI++)
  const obj = fresh(naiveCluster, slice)
  const t0 = now()
  naiveRaw.delete(slice.name)
  naiveRaw.set(slice.name, obj)
  naiveLast = naiveRebuild(naiveRaw, ++naiveGeneration)
  return now() - t0
}

// --- The router's path. ---
const live = new Pipeline()
{
  const published = live.nextPublish()
  live.source.onList(cluster.listItems())
  await published
  if (live.store.current().targets.length !== cluster.endpointCount) throw new Error('initial list lost targets')
}

async function updateSample (obj: unknown): Promise<number> {
  const published = live.nextPublish()
  const t0 = now()
  live.source.onUpsert(obj)
  await published
  return live.publishedAt - t0
}

let ipI = 0
let flipI = 0
let parseI = 0
const before = live.store.current().generation
const updates = await measureEach({
  naive: { sample: naiveSample, options: { samplesPerRound: 10 } },
  ip: () => updateSample(fresh(cluster, changeIp(cluster, ipI++))),
  readiness: () => updateSample(fresh(cluster, flipReadiness(flipI++))),
  // What the watch does per event before the consumer sees it: JSON.parse of the event line.
  withParse: async () => {
    const line = cluster.watchEventLine(changeIp(cluster, parseI++))
    const published = live.nextPublish()
    const t0 = now()
    live.source.onUpsert((JSON.parse(line) as { object: unknown }).object)
    await published
    return live.publishedAt - t0
  },
}, { samplesPerRound: 100, maxRounds: 30, warmupMs: 500, maxTimeMs: 60_000 })
if (flipped !== null) await updateSample(fresh(cluster, flipReadiness(flipI++)))
{
  const snapshot = live.store.current()
  if (snapshot.generation - before !== ipI + flipI + parseI || snapshot.targets.length !== cluster.endpointCount) {
    throw new Error('a slice update did not publish exactly one snapshot')
  }
  if ((naiveLast as TargetSnapshot | null)?.targets.length !== naiveCluster.endpointCount) throw new Error('naive rebuild lost targets')
}
report.add({ name: NAIVE, stats: updates.naive, unit: 'ms' })
report.add({ name: 'slice update (an endpoint IP changes) → published', stats: updates.ip, unit: 'ms', baseline: NAIVE, target: 1 })
report.add({ name: 'slice update (an endpoint readiness flips) → published', stats: updates.readiness, unit: 'ms', baseline: NAIVE, target: 1 })
report.add({ name: 'slice update incl. JSON.parse of the watch line → published', stats: updates.withParse, unit: 'ms', note: 'the client library parses each watch line; shown for context' })

const listItems = cluster.listItems()
let lastRelist: Pipeline | null = null
let unexpected = 0
const relists = await measureEach({
  fromEmpty: async () => {
    // A relist is rare; start each from a collected heap rather than from the garbage of
    // the previous sample's 10,000-entry index and store.
    lastRelist = null
    collectGarbage()
    const p = new Pipeline()
    const published = p.nextPublish()
    const t0 = now()
    p.source.onList(listItems)
    await published
    lastRelist = p
    return p.publishedAt - t0
  },
  unchanged: async () => {
    const items = cluster.listItems()
    const generation = live.store.current().generation
    const t0 = now()
    live.source.onList(items)
    const t1 = now()
    await nextMacrotask()
    if (live.store.current().generation !== generation) unexpected++
    return t1 - t0
  },
}, { samplesPerRound: 20, maxRounds: 20, warmupMs: 1000, maxTimeMs: 60_000 })
if ((lastRelist as Pipeline | null)?.store.current().targets.length !== cluster.endpointCount) throw new Error('relist lost targets')
if (unexpected > 0) throw new Error(`an unchanged relist published ${unexpected} snapshots`)
report.add({ name: RELIST, stats: relists.fromEmpty, unit: 'ms', target: 50 })
report.add({ name: 'relist, nothing changed (same resourceVersions)', stats: relists.unchanged, unit: 'µs', baseline: RELIST, note: 'publishes nothing; should be near zero next to a full relist' })

collectGarbage()
{
  // Subscriber side: the WatchStargates hub encodes one frame per published generation,
  // synchronously in the store's publish loop.
  const compiled = compileHostnameTemplate('{pod_name}.stargate.external', NAMESPACE)
  if (!compiled.ok) throw new Error(compiled.message)
  const options = { template: compiled.template, advertisedGrpcPort: 443, grpcPylonDialAddr: 'https://stargate-router.example.com:443', remoteStargateUrls: [] }
  const snapshot = live.store.current()
  let bytes = 0
  const stats = await measure(() => {
    const t0 = now()
    bytes = encodeStargates(snapshot, options).length
    return now() - t0
  }, { samplesPerRound: 20 })
  report.info('watchStargatesFrameBytes', bytes)
  report.add({ name: 'subscriber: WatchStargates frame encode, 10,000 targets', stats, unit: 'ms', note: 'runs in the publish loop once per generation' })
}

report.finish()
