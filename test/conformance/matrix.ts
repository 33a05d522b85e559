/**
 * The checks of the workload conformance matrix (SPEC §3), run by the
 * workload-matrix*.test.ts files (rows: matrix-rows.ts) for every phase of every step, for both
 * workload kinds and both Service flavours (readiness-respecting, and publishNotReadyAddresses
 * as upstream's headless Service).
 *
 * The target pods are those whose endpoint is ready and not terminating (SPEC §3 rule 2): the
 * Ready pods behind a readiness-respecting Service, every pod that is not terminating behind a
 * publishNotReadyAddresses one (warming pods included). Serving pods (Ready, not terminating)
 * are the only ones LLM client HTTP may reach.
 *
 * In every phase (an intermediate cluster state, see test/fixtures/cluster/workloads.ts):
 * 1. convergence: the Pylon's WatchStargates set becomes exactly the target pods; the time from
 *    the API write to the message is recorded (only when the set changed). Then a watch fence
 *    (SimulatedCluster.writeFence) makes sure the router has processed the phase's writes, so a
 *    phase that must change nothing (a pod moving between slices) is checked after the router
 *    saw it, not before;
 * 2. transients: every set seen on the way lies between the previous state and this one (never
 *    drops a pod that is ready in both, never lists one ready in neither), no duplicates, no
 *    dashed-IP identity;
 * 3. the router's snapshot holds each target pod's current IP and ports and whether it serves,
 *    and lists the present-but-unready pods apart;
 * 4. each advertised entry is the pod name and its rendered host;
 * 5. route checks (ROUTE_CHECKS in route-checks.ts): every advertised pod is reached at its
 *    current address (LLM HTTP by Host only when it serves: a warming pod is refused with
 *    target_not_serving); every pod that is not a target (not ready, terminating or just gone)
 *    is refused by name; requests that name no pod reach serving pods only;
 * 6. the Pylon: exactly one open, acked stream per advertised pod, held by the pod's current
 *    container; no open stream to a pod that is terminating or gone (the router ends those
 *    within the drain grace), while a stream to a pod that merely turned unready stays open
 *    past the drain grace; every stream it ever opened was answered by its pod, was opened
 *    while that pod was a target, and ended only after its pod left the advertised set (so no
 *    retry loop against a target that is gone).
 */
import type { Test } from 'tap'
import type { KubeRouter } from '../fixtures/kube-router.ts'
import type { ClusterPod, Phase, SimulatedCluster } from '../fixtures/cluster/cluster.ts'
import { dashedIp, isDashedIpv4 } from '../fixtures/cluster/names.ts'
import { sleep, waitFor } from '../fixtures/wait.ts'
import type { RouteChecker } from './route-checks.ts'
import type { AdvertisedSet, ReconcilingPylon } from './reconciling-pylon.ts'

export const PYLON_ID = 'conformance-pylon'

export interface Convergence {
  readonly kind: string
  readonly phase: string
  readonly ms: number
}

export interface MatrixRunOptions {
  readonly cluster: SimulatedCluster
  readonly kube: KubeRouter
  readonly pylon: ReconcilingPylon
  readonly drainGraceMs: number
  /** The route checkers of this matrix row (ROUTE_CHECKS unless the row says otherwise). */
  readonly checks: readonly RouteChecker[]
}

export function percentile (values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number
}

function sameIds (a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((id, i) => id === b[i])
}

export class MatrixRun {
  readonly convergence: Convergence[] = []
  readonly #o: MatrixRunOptions
  /** Index in pylon.sets of the set that matched the last checked phase. */
  #converged = -1
  #expected: string[] = []
  #live: string[] = []
  /** Pods the Pylon held an open stream to when the last stream check passed. */
  #streamed = new Set<string>()

  constructor (options: MatrixRunOptions) {
    this.#o = options
  }

  /** Waits for the first WatchStargates message (the cluster as it is now). */
  async begin (): Promise<void> {
    const { cluster, pylon } = this.#o
    const want = cluster.targetPods().map((p) => p.name)
    this.#converged = await waitFor(() => {
      const i = pylon.sets.findIndex((s) => sameIds(s.ids, want))
      return i >= 0 ? i : null
    }, { timeoutMs: 15_000, message: `the first advertised set [${want.join(', ')}]` })
    this.#expected = want
    this.#live = cluster.pods().map((p) => p.name)
  }

  /** Set when the advertised set failed to converge: later steps would only time out too. */
  failed = false

  /** Resolves once the router has processed every cluster write made so far. */
  async fence (): Promise<void> {
    const { cluster, kube } = this.#o
    const writes = cluster.writeFence()
    // Each fence event is counted once; the first write reached the router by its initial list.
    await waitFor(async () => ((await kube.metric('stargate_k8s_router_endpointslice_skipped_total', { reason: 'no_identity' })) ?? 0) >= writes,
      { timeoutMs: 15_000, intervalMs: 10, message: `the router to process watch fence ${writes}` })
  }

  /** Runs every check of one phase; records failures as one assertion per check group. */
  async checkPhase (t: Test, phase: Phase): Promise<void> {
    const { cluster, kube, pylon } = this.#o
    const label = `[${phase.operation}: ${phase.change}]`
    const ready = cluster.targetPods()
    const want = ready.map((p) => p.name)
    const previous = this.#expected

    // 1. convergence
    const from = this.#converged
    let index: number
    try {
      index = await waitFor(() => {
        for (let i = from; i < pylon.sets.length; i++) if (sameIds((pylon.sets[i] as AdvertisedSet).ids, want)) return i
        return null
      }, { timeoutMs: 15_000, intervalMs: 5, message: `advertised set [${want.join(', ')}]` })
    } catch (err) {
      this.failed = true
      t.fail(`${label} the advertised set never became the target pods: ${(err as Error).message}; cluster: ${cluster.describe()}`)
      throw err
    }
    if (!sameIds(previous, want)) {
      this.#record(`${phase.operation}: ${phase.change}`, Math.max(0, (pylon.sets[index] as AdvertisedSet).at - phase.at))
    }
    // The router has now processed the phase's writes (a phase that changes nothing matched at
    // once, before that); whatever it published since must still be the target pods.
    await this.fence()
    let last = index
    try {
      last = await waitFor(() => {
        const i = pylon.sets.length - 1
        return sameIds((pylon.sets[i] as AdvertisedSet).ids, want) ? i : null
      }, { timeoutMs: 5000, intervalMs: 5, message: `the latest advertised set to be [${want.join(', ')}] after the fence` })
    } catch (err) {
      t.fail(`${label} ${(err as Error).message}`)
    }
    const matched = pylon.sets[last] as AdvertisedSet

    // 2. transients
    const transientProblems: string[] = []
    const allowed = new Set([...previous, ...want])
    const kept = previous.filter((id) => want.includes(id))
    for (let i = from + 1; i < pylon.sets.length; i++) {
      const ids = (pylon.sets[i] as AdvertisedSet).ids
      if (new Set(ids).size !== ids.length) transientProblems.push(`set ${i} lists an identity twice: [${ids.join(', ')}]`)
      for (const id of ids) {
        if (!allowed.has(id)) transientProblems.push(`set ${i} lists ${id}, ready neither before nor after`)
        if (isDashedIpv4(id)) transientProblems.push(`set ${i} lists the dashed-IP identity ${id}`)
      }
      for (const id of kept) if (!ids.includes(id)) transientProblems.push(`set ${i} dropped ${id}, which stayed ready`)
      if (i > index && !sameIds(ids, want)) transientProblems.push(`set ${i} [${ids.join(', ')}] strayed after the set had converged`)
    }
    t.strictSame(transientProblems, [], `${label} every set on the way lies between the two states, and none strays after`)
    this.#converged = pylon.sets.length - 1
    this.#expected = want

    // 3. snapshot holds current addresses
    const snapshot = await kube.snapshot()
    const snapshotProblems: string[] = []
    for (const pod of ready) {
      const target = snapshot.targets.find((x) => x.identity === pod.name)
      if (target === undefined) snapshotProblems.push(`${pod.name} missing from the snapshot`)
      else if (target.address !== pod.ip || target.grpcPort !== pod.ports.grpc || target.quicPort !== pod.ports.quic || target.httpPort !== pod.ports.http) {
        snapshotProblems.push(`${pod.name}: snapshot has ${target.address} grpc ${target.grpcPort} quic ${target.quicPort} http ${String(target.httpPort)}, pod is ${pod.ip} grpc ${pod.ports.grpc} quic ${pod.ports.quic} http ${pod.ports.http}`)
      } else if (target.serving !== (pod.state === 'ready')) {
        snapshotProblems.push(`${pod.name} (${pod.state}): snapshot says serving ${String(target.serving)}`)
      }
    }
    if (snapshot.targets.length !== ready.length) snapshotProblems.push(`snapshot has ${snapshot.targets.length} targets, ${ready.length} pods are targets`)
    const unready = cluster.pods().filter((p) => p.state !== 'terminating' && !cluster.isTarget(p.name)).map((p) => p.name).sort()
    const listedUnready = snapshot.unready.map((x) => x.identity).sort()
    if (listedUnready.join(',') !== unready.join(',')) snapshotProblems.push(`snapshot lists [${listedUnready.join(', ')}] as present but unready, the cluster has [${unready.join(', ')}]`)
    t.strictSame(snapshotProblems, [], `${label} the router's snapshot holds every target pod at its current IP and ports, serving as the pod is Ready, and the unready ones apart`)

    // 4. advertised entries
    const entryProblems: string[] = []
    for (const stargate of matched.stargates) {
      const host = `${cluster.advertisedHost(stargate.stargateId)}:${kube.config.advertisedGrpcPort}`
      if (stargate.advertiseAddr !== host) entryProblems.push(`${stargate.stargateId}: advertise_addr ${stargate.advertiseAddr}, want ${host}`)
      // Empty, as the Rust router sends it; LLM clients name the pod by Host.
      if (stargate.httpAdvertiseAddr !== '') entryProblems.push(`${stargate.stargateId}: http_advertise_addr ${stargate.httpAdvertiseAddr}, want it empty`)
    }
    t.strictSame(entryProblems, [], `${label} one entry per ready pod, identity = Pod name, advertised host rendered from it`)

    // 5. routes
    const routeProblems: string[] = []
    for (const pod of ready) {
      const stargate = matched.stargates.find((s) => s.stargateId === pod.name)
      if (stargate === undefined) continue
      for (const check of this.#o.checks) {
        const problem = await check.reaches({ router: kube, stargate, pod, serving: pod.state === 'ready' })
        if (problem !== null) routeProblems.push(`${check.name} ${pod.name}: ${problem}`)
      }
    }
    const serving = cluster.readyPods()
    for (const check of this.#o.checks) {
      const problem = await check.untargeted?.({ router: kube, serving }) ?? null
      if (problem !== null) routeProblems.push(`${check.name} naming no pod: ${problem}`)
    }
    const live = cluster.pods().map((p) => p.name)
    const refused = [...new Set([...this.#live, ...live])].filter((name) => !want.includes(name))
    for (const name of refused) {
      for (const check of this.#o.checks) {
        const problem = await check.refuses({ router: kube, identity: name, host: cluster.advertisedHost(name), pod: cluster.pod(name) ?? null })
        if (problem !== null) routeProblems.push(`${check.name} refuses ${name}: ${problem}`)
      }
    }
    this.#live = live
    const warming = ready.filter((p) => p.state !== 'ready').map((p) => p.name)
    t.strictSame(routeProblems, [], `${label} ${this.#o.checks.map((c) => c.name).join(' and ')} reach every advertised pod at its current address${warming.length > 0 ? ` (LLM HTTP refused for ${warming.join(', ')}, not serving)` : ''}${refused.length > 0 ? ` and refuse ${refused.join(', ')}` : ''}`)

    // 6. the Pylon's streams
    await this.#checkStreams(t, label)
  }

  /** After an operation: the phase checks held; dashed-IP aliases of the target pods are refused. */
  async checkSettled (t: Test, step: string): Promise<void> {
    const { cluster, kube } = this.#o
    const problems: string[] = []
    for (const pod of cluster.targetPods()) {
      const alias = dashedIp(pod.ip)
      for (const check of this.#o.checks) {
        const problem = await check.refuses({ router: kube, identity: alias, host: cluster.advertisedHost(alias), pod })
        if (problem !== null) problems.push(`${check.name} ${alias}: ${problem}`)
      }
    }
    t.strictSame(problems, [], `[${step} settled] the dashed-IP alias of every target pod is refused (it names no pod)`)
    await this.#checkStreams(t, `[${step} settled]`)
  }

  /** No set after the last phase strayed from it (a late flap would show up here). */
  finish (t: Test): void {
    const { pylon } = this.#o
    const strays: string[] = []
    for (let i = this.#converged + 1; i < pylon.sets.length; i++) {
      const ids = (pylon.sets[i] as AdvertisedSet).ids
      if (!sameIds(ids, this.#expected)) strays.push(`set ${i}: [${ids.join(', ')}], want [${this.#expected.join(', ')}]`)
    }
    t.strictSame(strays, [], 'no advertised set changed after the last step settled')
  }

  #record (phase: string, ms: number): void {
    this.convergence.push({ kind: this.#o.cluster.kind, phase, ms })
  }

  async #checkStreams (t: Test, label: string): Promise<void> {
    const { cluster, pylon, drainGraceMs } = this.#o
    const want = cluster.targetPods()
    const heldBy = (pod: ClusterPod): number => pod.process.stargate.registrations.filter((r) => r.messages[0]?.inferenceServerId === PYLON_ID && !r.ended && !r.cancelled).length
    const state = (): string[] => {
      const problems: string[] = []
      for (const pod of want) {
        const attempt = pylon.open.get(pod.name)
        if (attempt === undefined) { problems.push(`no open stream to ${pod.name}`); continue }
        if (!attempt.succeeded) problems.push(`stream to ${pod.name} not acked by it yet (${attempt.toString()})`)
        const held = heldBy(pod)
        if (held !== 1) problems.push(`${pod.name}'s current container at ${pod.ip} holds ${held} Pylon streams, want 1`)
      }
      for (const id of pylon.open.keys()) {
        if (want.some((p) => p.name === id)) continue
        const pod = cluster.pod(id)
        // A pod that merely turned unready keeps its stream (checked below); others lose theirs.
        if (pod === undefined || pod.state === 'terminating') problems.push(`stream to ${id} still open although the pod is ${pod === undefined ? 'gone' : 'terminating'}`)
      }
      return problems
    }
    let problems: string[] = []
    try {
      await waitFor(() => { problems = state(); return problems.length === 0 }, { timeoutMs: drainGraceMs + 10_000, intervalMs: 10 })
    } catch { /* reported below */ }
    t.strictSame(problems, [], `${label} the Pylon holds one acked stream per advertised pod, on its current container, and none to a terminating or gone pod`)

    // Pods that turned unready since the last check (present, not terminating, no target): the
    // streams they had are kept past the drain grace, as upstream keeps them.
    const unready = cluster.pods().filter((p) => p.state !== 'terminating' && !cluster.isTarget(p.name) && this.#streamed.has(p.name))
    if (unready.length > 0) {
      await sleep(drainGraceMs * 2)
      const kept: string[] = []
      for (const pod of unready) {
        const attempt = pylon.open.get(pod.name)
        if (attempt === undefined || attempt.status !== null) kept.push(`the stream to ${pod.name} ended (${attempt?.toString() ?? 'none open'}) although the pod only turned unready`)
        else if (heldBy(pod) !== 1) kept.push(`${pod.name}'s container holds ${heldBy(pod)} Pylon streams, want its 1`)
      }
      t.strictSame(kept, [], `${label} the streams to ${unready.map((p) => p.name).join(', ')} (unready, not terminating) outlive the drain grace`)
    }
    this.#streamed = new Set(pylon.open.keys())

    const history: string[] = []
    for (const attempt of pylon.attempts) {
      if (!attempt.targetAtOpen) history.push(`${attempt.toString()}: opened while the pod was not a target`)
      if (attempt.status !== null && !attempt.succeeded) history.push(`${attempt.toString()}: failed`)
      if (attempt.status !== null && attempt.advertisedAtEnd === true) history.push(`${attempt.toString()}: ended while still advertised (the Pylon retried)`)
    }
    t.strictSame(history, [], `${label} every stream the Pylon opened (${pylon.attempts.length} so far) succeeded and ended only after its pod left`)
  }
}
