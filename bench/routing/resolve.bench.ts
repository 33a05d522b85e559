/**
 * Benchmark: route lookup, :authority -> target, on a snapshot of 1,000 targets
 * (lib/routing/resolve.ts resolveAuthority with the default hostname template).
 *
 * Hosts are `stargate-<i>.stargate.external:50071` for every target, shuffled, plus misses:
 * pods that are not in the snapshot (target_unavailable) and foreign hosts
 * (unknown_authority). Each case walks the same host array; results are folded into a sink
 * that is printed, so the optimizer cannot drop the calls.
 *
 * Baselines, same run: the same semantics with a regex built per call (`new RegExp(...)`,
 * what STYLE.md forbids on hot paths) and with one regex built up front.
 */
import { batched, measureEach, Report, random } from '../_util.ts'
import { SnapshotBuilder, UNINITIALIZED_SNAPSHOT } from '../../lib/discovery/snapshot.ts'
import type { PodEndpoint, PodTarget, TargetSnapshot } from '../../lib/discovery/types.ts'
import { compileHostnameTemplate } from '../../lib/routing/hostname-template.ts'
import { resolveAuthority, type AuthorityRoute } from '../../lib/routing/resolve.ts'

const TARGETS = 1000
const NAMESPACE = 'stargate'
const TEMPLATE = '{pod_name}.stargate.external'
const PORT = 50071

const report = new Report('routing/resolve')

function target (i: number, address = `10.64.${i >> 8}.${i & 255}`): PodTarget {
  const identity = `stargate-${i}`
  return { identity, namespace: NAMESPACE, address, host: address, grpcPort: 50071, quicPort: 50072, httpPort: 8080, nodeName: `node-${i % 40}`, zone: `zone-${i % 3}`, serving: true }
}

/**
 * A snapshot as the router holds it after a while: built from a full list, then changed one
 * target at a time OVERLAY_CHANGES times. Up to 2,048 targets each change copies the map;
 * above, byIdentity is a shared base map under an overlay of the changed entries
 * (lib/discovery/snapshot.ts TargetMap), here half full, as it is on average between merges.
 */
const OVERLAY_CHANGES = 64
function buildSnapshot (count: number): TargetSnapshot {
  const builder = new SnapshotBuilder()
  const changes = new Map<string, PodEndpoint>()
  for (let i = 0; i < count; i++) changes.set(`stargate-${i}`, { target: target(i), ready: true })
  let snapshot = builder.next(UNINITIALIZED_SNAPSHOT, changes)
  for (let k = 0; k < OVERLAY_CHANGES && snapshot !== null; k++) {
    const i = (k * 131) % count
    snapshot = builder.next(snapshot, new Map([[`stargate-${i}`, { target: target(i, `10.65.${k}.${i & 255}`), ready: true }]]))
  }
  if (snapshot === null || snapshot.targets.length !== count) throw new Error('snapshot not built')
  return snapshot
}

function shuffle<T> (items: T[], rand: () => number): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1))
    const a = items[i] as T
    items[i] = items[j] as T
    items[j] = a
  }
  return items
}

/** Fresh (non-constant) strings, as header decoding produces them. */
function host (name: string): string {
  return [name, `:${PORT}`].join('')
}

const snapshot = buildSnapshot(TARGETS)
const large = buildSnapshot(10 * TARGETS)
const compiled = compileHostnameTemplate(TEMPLATE, NAMESPACE)
if (!compiled.ok) throw new Error(compiled.message)
const template = compiled.template
const rand = random(2)

const hits = shuffle(Array.from({ length: TARGETS }, (_, i) => host(`stargate-${i}.stargate.external`)), rand)
const unavailable = Array.from({ length: 50 }, (_, i) => host(`stargate-${TARGETS + i}.stargate.external`))
const foreign = Array.from({ length: 50 }, (_, i) => host(`api-${i}.example.com`))
const misses = shuffle([...unavailable, ...foreign], rand)
const mixed = shuffle([...hits, ...misses], rand)
report.info('targets', TARGETS)
report.info('single-target changes applied after the full list', OVERLAY_CHANGES)
report.info('hosts', `${hits.length} hits + ${unavailable.length} target_unavailable + ${foreign.length} unknown_authority`)

/** Folds a route result into a number so its computation is observable. */
function fold (r: AuthorityRoute): number {
  return r.ok ? r.target.grpcPort : r.reason.length
}

// --- Baselines: the template as a regex, per call and prebuilt, with the same semantics
// (optional :port, optional trailing dot, case-insensitive, one DNS label for the pod). ---
function templatePattern (): string {
  const [prefix, suffix] = TEMPLATE.replaceAll('{namespace}', NAMESPACE).split('{pod_name}') as [string, string]
  const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
  return `^${escape(prefix)}([^.:]+)${escape(suffix)}\\.?(?::\\d+)?$`
}
const PATTERN = templatePattern()
const PREBUILT = new RegExp(PATTERN, 'i')

const MISSING = { ok: false, reason: 'missing_authority' } as const
const UNKNOWN = { ok: false, reason: 'unknown_authority' } as const

function resolveWithRegexPerCall (authority: string, s: TargetSnapshot): AuthorityRoute {
  if (authority === '') return MISSING
  const m = new RegExp(PATTERN, 'i').exec(authority)
  if (m === null) return UNKNOWN
  const identity = (m[1] as string).toLowerCase()
  const target = s.byIdentity.get(identity)
  return target === undefined ? { ok: false, reason: 'target_unavailable', identity } : { ok: true, target }
}

function resolveWithPrebuiltRegex (authority: string, s: TargetSnapshot): AuthorityRoute {
  if (authority === '') return MISSING
  const m = PREBUILT.exec(authority)
  if (m === null) return UNKNOWN
  const identity = (m[1] as string).toLowerCase()
  const target = s.byIdentity.get(identity)
  return target === undefined ? { ok: false, reason: 'target_unavailable', identity } : { ok: true, target }
}

// One loop function per case (not one loop taking a callback): a shared call site would
// turn megamorphic and tax whichever case runs last.
function loopRegexPerCall (hosts: readonly string[], n: number): number {
  let acc = 0
  for (let i = 0, j = 0; i < n; i++, j = j + 1 === hosts.length ? 0 : j + 1) acc += fold(resolveWithRegexPerCall(hosts[j] as string, snapshot))
  return acc
}
function loopPrebuiltRegex (hosts: readonly string[], n: number): number {
  let acc = 0
  for (let i = 0, j = 0; i < n; i++, j = j + 1 === hosts.length ? 0 : j + 1) acc += fold(resolveWithPrebuiltRegex(hosts[j] as string, snapshot))
  return acc
}
function loopResolveAuthority (hosts: readonly string[], n: number): number {
  let acc = 0
  for (let i = 0, j = 0; i < n; i++, j = j + 1 === hosts.length ? 0 : j + 1) acc += fold(resolveAuthority(hosts[j] as string, snapshot, template))
  return acc
}
function loopResolveLarge (hosts: readonly string[], n: number): number {
  let acc = 0
  for (let i = 0, j = 0; i < n; i++, j = j + 1 === hosts.length ? 0 : j + 1) acc += fold(resolveAuthority(hosts[j] as string, large, template))
  return acc
}
function loopFloor (hosts: readonly string[], n: number): number {
  let acc = 0
  for (let i = 0, j = 0; i < n; i++, j = j + 1 === hosts.length ? 0 : j + 1) acc += (hosts[j] as string).length
  return acc
}

// The three implementations must agree before their speed means anything.
for (const h of [...mixed, 'STARGATE-7.Stargate.External', 'stargate-7.stargate.external.:443', 'a.stargate-7.stargate.external', '']) {
  const want = JSON.stringify(resolveAuthority(h, snapshot, template))
  for (const got of [resolveWithRegexPerCall(h, snapshot), resolveWithPrebuiltRegex(h, snapshot)]) {
    if (JSON.stringify(got) !== want) throw new Error(`baseline disagrees on '${h}': ${JSON.stringify(got)} vs ${want}`)
  }
}

const sink = { value: 0 }
const REGEX_PER_CALL = 'regex built per call (baseline)'
const PREBUILT_REGEX = 'prebuilt regex (baseline)'
// Interleaved round by round, so a drift in the machine's speed shifts every case alike.
const stats = await measureEach({
  regexPerCall: batched((n) => loopRegexPerCall(mixed, n), sink, { granularity: mixed.length }),
  prebuiltRegex: batched((n) => loopPrebuiltRegex(mixed, n), sink, { granularity: mixed.length }),
  mixed: batched((n) => loopResolveAuthority(mixed, n), sink, { granularity: mixed.length }),
  hits: batched((n) => loopResolveAuthority(hits, n), sink, { granularity: hits.length }),
  misses: batched((n) => loopResolveAuthority(misses, n), sink, { granularity: misses.length }),
  large: batched((n) => loopResolveLarge(mixed, n), sink, { granularity: mixed.length }),
  floor: batched((n) => loopFloor(mixed, n), sink, { granularity: mixed.length }),
}, { samplesPerRound: 20, maxRounds: 30, maxSpread: 0.03, maxTimeMs: 30_000 })

report.add({ name: REGEX_PER_CALL, stats: stats.regexPerCall, unit: 'ns' })
report.add({ name: PREBUILT_REGEX, stats: stats.prebuiltRegex, unit: 'ns' })
report.add({ name: 'resolveAuthority, 1,000 hits + 100 misses', stats: stats.mixed, unit: 'ns', baseline: [REGEX_PER_CALL, PREBUILT_REGEX], target: 150 })
report.add({ name: 'resolveAuthority, hits only', stats: stats.hits, unit: 'ns', target: 150 })
report.add({ name: 'resolveAuthority, misses only', stats: stats.misses, unit: 'ns' })
report.add({
  name: 'resolveAuthority, 10,000-target snapshot (map overlay)',
  stats: stats.large,
  unit: 'ns',
  note: 'same hosts; above 2,048 targets a lookup may take two Map lookups (base and overlay)',
})
report.add({ name: 'loop floor (array walk + fold, no lookup)', stats: stats.floor, unit: 'ns', note: 'included in every figure above' })

report.info('sink', sink.value)
report.finish()
