// The simulated cluster (test/fixtures/cluster) must behave like a real one, or the
// conformance matrix proves nothing. These tests hold it to what the Deployment, StatefulSet and
// EndpointSlice controllers do (names, hostnames, IPs, slice sizes, conditions, churn), reading
// the slices back from the fake API server the router watches. No router here.
import t from 'tap'
import type { Json } from '../fixtures/endpoint-slices.ts'
import { SimulatedCluster } from '../fixtures/cluster/cluster.ts'
import { DEPLOYMENT_POD_NAME, KUBE_ALPHABET } from '../fixtures/cluster/names.ts'

interface ServedEndpoint {
  readonly slice: string
  readonly pod: string
  readonly ip: string
  readonly hostname: string | undefined
  readonly conditions: { ready: boolean, serving: boolean, terminating: boolean }
}

/** The slices as the fake API server serves them (what the router's informer reads). */
function served (cluster: SimulatedCluster): { slices: Json[], endpoints: ServedEndpoint[] } {
  const slices: Json[] = []
  const endpoints: ServedEndpoint[] = []
  for (const written of cluster.slices.slices()) {
    const name = String((written.metadata as Json).name)
    const slice = cluster.fake.get(cluster.namespace, name)
    if (slice === undefined) throw new Error(`slice ${name} is not in the fake API server`)
    slices.push(slice)
    for (const e of (slice.endpoints as Json[] | undefined) ?? []) {
      endpoints.push({
        slice: name,
        pod: String((e.targetRef as Json).name),
        ip: (e.addresses as string[])[0] as string,
        hostname: e.hostname as string | undefined,
        conditions: e.conditions as ServedEndpoint['conditions'],
      })
    }
  }
  return { slices, endpoints }
}

function endpointOf (cluster: SimulatedCluster, pod: string): ServedEndpoint[] {
  return served(cluster).endpoints.filter((e) => e.pod === pod)
}

t.test('Deployment pods have generated names, no hostname, and a new name and IP when replaced', async (t) => {
  const cluster = await SimulatedCluster.start(t, { kind: 'Deployment', subnet: '127.0.215' })
  await cluster.settle(cluster.install(2))
  const before = cluster.readyPods()
  for (const pod of before) {
    t.match(pod.name, DEPLOYMENT_POD_NAME, `${pod.name} looks like a ReplicaSet pod name`)
    t.equal(pod.hostname, null)
    t.strictSame(endpointOf(cluster, pod.name).map((e) => e.hostname), [undefined], 'its endpoint has no hostname')
  }
  const hashOf = (name: string): string => name.split('-').slice(-2, -1)[0] as string
  t.equal(new Set(before.map((p) => hashOf(p.name))).size, 1, 'one pod-template-hash per revision')
  await cluster.settle(cluster.rollingUpdate())
  const after = cluster.readyPods()
  t.equal(after.length, 2)
  t.notOk(after.some((p) => before.some((b) => b.name === p.name || b.ip === p.ip)), 'every replacement has a new name and a new IP')
  t.not(hashOf(after[0]?.name ?? ''), hashOf(before[0]?.name ?? ''), 'the new revision has a new pod-template-hash')
  t.ok(before.every((p) => !p.process.alive), 'the replaced pods are dead')
})

t.test('StatefulSet pods are <name>-<ordinal> with hostname and subdomain, and keep their name at a new IP when replaced', async (t) => {
  const cluster = await SimulatedCluster.start(t, { kind: 'StatefulSet', subnet: '127.0.215' })
  await cluster.settle(cluster.install(3))
  const before = cluster.readyPods()
  t.strictSame(before.map((p) => p.name), ['stargate-0', 'stargate-1', 'stargate-2'])
  for (const pod of before) {
    t.equal(pod.subdomain, cluster.service, `${pod.name}: subdomain = the headless Service`)
    t.strictSame(endpointOf(cluster, pod.name).map((e) => e.hostname), [pod.name], `${pod.name}: endpoint hostname = pod name`)
  }
  const phases = await cluster.settle(cluster.rollingUpdate())
  t.strictSame(phases.filter((p) => p.change.endsWith('terminating')).map((p) => p.change), ['stargate-2 terminating', 'stargate-1 terminating', 'stargate-0 terminating'], 'highest ordinal first')
  const after = cluster.readyPods()
  t.strictSame(after.map((p) => p.name), ['stargate-0', 'stargate-1', 'stargate-2'], 'same names')
  t.ok(after.every((p, i) => p.ip !== before[i]?.ip), 'new IPs')
  t.ok(after.every((p, i) => p.uid !== before[i]?.uid), 'new pod UIDs')
})

t.test('a StatefulSet scales one ordinal at a time, each ready before the next is created', async (t) => {
  const cluster = await SimulatedCluster.start(t, { kind: 'StatefulSet', subnet: '127.0.215' })
  const up = await cluster.settle(cluster.install(3))
  t.strictSame(up.map((p) => p.change.replace(/ at [\d.]+/, '')), [
    'stargate-0 created (not ready)', 'stargate-0 ready',
    'stargate-1 created (not ready)', 'stargate-1 ready',
    'stargate-2 created (not ready)', 'stargate-2 ready',
  ])
  const down = await cluster.settle(cluster.scale(1))
  t.strictSame(down.map((p) => p.change), ['stargate-2 terminating', 'stargate-2 gone', 'stargate-1 terminating', 'stargate-1 gone'])
})

t.test('slices hold at most maxEndpointsPerSlice endpoints and have generated names', async (t) => {
  const cluster = await SimulatedCluster.start(t, { kind: 'Deployment', subnet: '127.0.216', maxEndpointsPerSlice: 2 })
  await cluster.settle(cluster.install(5))
  const { slices, endpoints } = served(cluster)
  t.equal(slices.length, 3, 'five pods need three slices of two')
  for (const slice of slices) {
    const name = String((slice.metadata as Json).name)
    t.match(name, new RegExp(`^${cluster.service}-[${KUBE_ALPHABET}]{5}$`), `${name}: <service>-<5 random>`)
    t.ok(((slice.endpoints as Json[]).length) <= 2, `${name}: at most 2 endpoints`)
    t.strictSame((slice.metadata as Json).labels, { 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io', 'kubernetes.io/service-name': cluster.service })
  }
  t.equal(new Set(endpoints.map((e) => e.pod)).size, 5, 'each pod once')
})

t.test('every pod of a workload listens on the same ports, each on its own IP', async (t) => {
  const cluster = await SimulatedCluster.start(t, { kind: 'Deployment', subnet: '127.0.216' })
  await cluster.settle(cluster.install(3))
  const pods = cluster.readyPods()
  t.equal(new Set(pods.map((p) => p.ip)).size, 3, 'three IPs')
  t.ok(pods.every((p) => p.ports.grpc === cluster.ports?.grpc && p.ports.http === cluster.ports.http && p.ports.quic === cluster.ports.quic), 'one set of port numbers')
  t.ok(pods.every((p) => p.process.stargate.port === p.ports.grpc && p.process.stargate.options.ip === p.ip), 'each stub Stargate bound to its pod\'s IP')
  const ports = served(cluster).slices.map((s) => s.ports)
  t.strictSame(ports[0], [{ name: 'grpc', protocol: 'TCP', port: cluster.ports?.grpc }, { name: 'quic', protocol: 'UDP', port: cluster.ports?.quic }, { name: 'http', protocol: 'TCP', port: cluster.ports?.http }], 'named ports with protocols')
})

t.test('a terminating pod is serving but not ready until it is gone; a failed probe clears ready and serving', async (t) => {
  const cluster = await SimulatedCluster.start(t, { kind: 'Deployment', subnet: '127.0.216' })
  await cluster.settle(cluster.install(2))
  const [first, second] = cluster.readyPods().map((p) => p.name) as [string, string]
  t.strictSame(endpointOf(cluster, first).map((e) => e.conditions), [{ ready: true, serving: true, terminating: false }], 'ready pod')

  const failing = cluster.failReadiness(first)
  await failing.next()
  t.strictSame(endpointOf(cluster, first).map((e) => e.conditions), [{ ready: false, serving: false, terminating: false }], 'failed readiness probe')
  await cluster.settle(cluster.recoverReadiness(first))

  const down = cluster.scale(1)
  const terminating = await down.next()
  const victim = terminating.done === true ? '' : terminating.value.change.replace(' terminating', '')
  t.ok(victim === first || victim === second, `${victim} terminates`)
  t.strictSame(endpointOf(cluster, victim).map((e) => e.conditions), [{ ready: false, serving: true, terminating: true }], 'terminating pod: serving, terminating, not ready')
  t.ok(cluster.pod(victim)?.process.alive, 'still running while it terminates')
  await down.next()
  t.strictSame(endpointOf(cluster, victim), [], 'gone from every slice')
  t.equal(cluster.pod(victim), undefined)
})

// Upstream points the router at its headless publishNotReadyAddresses Service. The
// simulated controller must then write what kubernetes podToEndpoint writes: ready whatever the
// pod's readiness (terminating included), serving = the pod's Ready condition.
t.test('behind a publishNotReadyAddresses Service every endpoint is ready; serving and terminating tell warming, failing and leaving pods apart', async (t) => {
  const cluster = await SimulatedCluster.start(t, { kind: 'StatefulSet', subnet: '127.0.216', publishNotReadyAddresses: true })
  const up = cluster.install(1)
  const created = await up.next()
  t.equal(created.done, false)
  t.strictSame(endpointOf(cluster, 'stargate-0').map((e) => e.conditions), [{ ready: true, serving: false, terminating: false }], 'a warming pod (running, not Ready yet)')
  t.strictSame(cluster.targetPods().map((p) => p.name), ['stargate-0'], 'a target for the router')
  t.strictSame(cluster.readyPods(), [], 'but not serving')
  await up.next()
  t.strictSame(endpointOf(cluster, 'stargate-0').map((e) => e.conditions), [{ ready: true, serving: true, terminating: false }], 'ready')

  await cluster.settle(cluster.failReadiness('stargate-0'))
  t.strictSame(endpointOf(cluster, 'stargate-0').map((e) => e.conditions), [{ ready: true, serving: false, terminating: false }], 'a failed readiness probe clears serving only')
  t.equal(cluster.isTarget('stargate-0'), true)
  await cluster.settle(cluster.recoverReadiness('stargate-0'))

  const down = cluster.scale(0)
  await down.next()
  t.strictSame(endpointOf(cluster, 'stargate-0').map((e) => e.conditions), [{ ready: true, serving: true, terminating: true }], 'terminating: still ready, as publishNotReadyAddresses keeps it')
  t.strictSame(cluster.targetPods(), [], 'not a target while it terminates')
  await down.next()
  t.strictSame(endpointOf(cluster, 'stargate-0'), [], 'gone')
})

t.test('slice churn puts a pod in two slices for a moment, then in one', async (t) => {
  const cluster = await SimulatedCluster.start(t, { kind: 'StatefulSet', subnet: '127.0.216', maxEndpointsPerSlice: 2 })
  await cluster.settle(cluster.install(3))
  const churn = cluster.churnSlices()
  const counts: number[][] = []
  for await (const _phase of churn) {
    const { endpoints } = served(cluster)
    counts.push(cluster.readyPods().map((p) => endpoints.filter((e) => e.pod === p.name).length))
  }
  t.equal(counts.length, 4, 'move started, move done, repack written, old slices deleted')
  t.equal(counts[0]?.filter((n) => n === 2).length, 1, 'while one pod moves it is in two slices')
  t.strictSame(counts[1], [1, 1, 1], 'then in one')
  t.strictSame(counts[2], [2, 2, 2], 'while every slice is rewritten every pod is in two')
  t.strictSame(counts[3], [1, 1, 1], 'then each in one again')
})

t.test('with no pods the Service keeps one placeholder slice without ports', async (t) => {
  const cluster = await SimulatedCluster.start(t, { kind: 'Deployment', subnet: '127.0.216' })
  const check = (when: string): void => {
    const { slices } = served(cluster)
    t.equal(slices.length, 1, `${when}: one slice`)
    t.strictSame(slices[0]?.endpoints, [], `${when}: no endpoints`)
    t.notOk('ports' in (slices[0] ?? {}), `${when}: no ports field`)
  }
  check('before the install')
  await cluster.settle(cluster.install(1))
  t.equal(served(cluster).endpoints.length, 1)
  await cluster.settle(cluster.scale(0))
  check('after scaling to zero')
})
