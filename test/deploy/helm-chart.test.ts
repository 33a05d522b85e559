// The Helm chart deploy/helm/stargate-router renders, lints and validates, and holds the
// facts an operator relies on: minimal namespaced RBAC (SPEC §3), TLS mounted as directories
// (SPEC §8), probes on /livez and /readyz (SPEC §9), hardened containers, the ports of SPEC §2,
// and a NetworkPolicy that keeps the health port to the kubelet, the router's
// replicas and Prometheus, with the other ports open to all.
import t from 'tap'
import { createRenderer, FULLNAME, NAMESPACE } from './render.ts'
import { validateObject, type KubeObject } from './k8s-validate.ts'
import {
  assertDirectoryMounts, assertHardenedPod, assertHealthPortPolicy, assertMinimalRbac, assertProbes, argsOf, fieldRefOf,
  ingressAllowed, ofKind, podSpecOf, policySources, servicePorts, theOne,
} from './manifest-facts.ts'

const renderer = await createRenderer(t)

/** Value sets that together switch every template branch on. */
const VALUE_SETS: ReadonlyArray<{ readonly name: string, readonly values: object }> = [
  { name: 'defaults', values: {} },
  {
    name: 'everything on',
    values: {
      stargate: { workloadKind: 'StatefulSet', service: { create: true } },
      peerDiscovery: { enabled: true },
      tls: { serverIdentity: { secretName: 'router-tls' }, frontDoor: { enabled: true }, upstreamTrust: { configMapName: 'stargate-ca' }, clientCa: { secretName: 'pylon-ca' } },
      config: { 'tunnel-protocol': 'webtransport', 'remote-stargate-url': ['https://router.other.example:50071'] },
      service: { type: 'LoadBalancer', separateUdpService: true, externalTrafficPolicy: 'Local', loadBalancerSourceRanges: ['192.0.2.0/24'] },
      serviceMonitor: { enabled: true, labels: { release: 'prometheus' } },
      podAntiAffinity: { type: 'hard' },
      podDisruptionBudget: { maxUnavailable: null, minAvailable: 1 },
      preStopSleepSeconds: 5,
      probes: { startup: { periodSeconds: 2, timeoutSeconds: 1, failureThreshold: 30 } },
      image: { digest: 'sha256:0000000000000000000000000000000000000000000000000000000000000000' },
      extraVolumes: [{ name: 'targets', configMap: { name: 'stargate-targets' } }],
      extraVolumeMounts: [{ name: 'targets', mountPath: '/etc/stargate-router/targets', readOnly: true }],
    },
  },
  {
    name: 'Stargate in another namespace, with peer discovery',
    values: { stargate: { namespace: 'llm' }, peerDiscovery: { enabled: true } },
  },
  {
    name: 'no anti-affinity, no PDB, health port not on the Service',
    values: { podAntiAffinity: { type: 'none' }, podDisruptionBudget: { enabled: false }, service: { health: { enabled: false } } },
  },
]

if (renderer !== null) {
  const rendered = new Map<string, KubeObject[]>()
  const objects = await Promise.all(VALUE_SETS.map((set) => renderer.helmTemplate(set.values)))
  VALUE_SETS.forEach((set, i) => { rendered.set(set.name, objects[i] ?? []) })
  const render = (name: string): KubeObject[] => rendered.get(name) ?? []

  t.test('helm lint --strict passes with the default values and with every feature on', async (t) => {
    for (const set of VALUE_SETS) {
      const lint = await renderer.helmLint(set.values)
      t.ok(lint.ok, `${set.name}: ${lint.output.trim()}`)
    }
  })

  t.test('every rendered object validates against the Kubernetes schemas, with no unknown fields', async (t) => {
    for (const set of VALUE_SETS) {
      const problems = (await Promise.all(render(set.name).map(validateObject))).flat()
      t.same(problems, [], `${set.name}: ${render(set.name).length} objects`)
    }
  })

  t.test('the validator itself rejects a misspelt field and a wrong type', async (t) => {
    const deployment = structuredClone(theOne(render('defaults'), 'Deployment')) as KubeObject & { spec: { template: { spec: { containers: Array<Record<string, unknown>> } } } }
    const container = deployment.spec.template.spec.containers[0] as Record<string, unknown>
    container.readinesProbe = container.readinessProbe
    container.securityContext = { ...(container.securityContext as object), readOnlyRootFileSystem: true }
    container.ports = [{ name: 'grpc', containerPort: 'fifty' }]
    const problems = await validateObject(deployment)
    for (const expected of [/containerPort must be integer/, /unknown field \.spec\.template\.spec\.containers\[0\]\.readinesProbe$/, /unknown field .*securityContext\.readOnlyRootFileSystem$/]) {
      t.ok(problems.some((p) => expected.test(p)), `reported: ${expected.source}`)
    }
    t.equal(problems.length, 3, 'and nothing else')
  })

  t.test('RBAC is a namespaced Role with get/list/watch on endpointslices only, bound to the router', async (t) => {
    for (const set of VALUE_SETS) t.test(set.name, async (t) => { assertMinimalRbac(t, render(set.name), NAMESPACE) })
  })

  t.test('TLS material is mounted as directories, never with subPath, and the TLS flags point inside them', async (t) => {
    for (const set of VALUE_SETS) t.test(set.name, async (t) => { assertDirectoryMounts(t, render(set.name)) })
    const args = argsOf(render('everything on'))
    t.ok(args.includes('--tls-cert-path=/etc/stargate-router/tls/server/tls.crt'), 'server certificate from the server identity directory')
    t.ok(args.includes('--tls-key-path=/etc/stargate-router/tls/server/tls.key'), 'server key from the same directory')
    t.ok(args.includes('--upstream-tls-cert-path=/etc/stargate-router/tls/upstream-trust/ca.crt'), 'upstream trust from its own directory')
    t.ok(args.includes('--client-ca-path=/etc/stargate-router/tls/client-ca/ca.crt'), 'client CA from its own directory')
    t.ok(args.includes('--front-door-tls'), 'front-door TLS when tls.frontDoor.enabled')
    t.notOk(argsOf(render('defaults')).some((a) => a.startsWith('--tls-') || a.startsWith('--front-door-tls') || a.startsWith('--client-ca') || a.startsWith('--upstream-tls-cert')), 'no TLS flags without TLS values: a cleartext front door')
  })

  t.test('liveness probes /livez and readiness probes /readyz on the health port 8080', async (t) => {
    for (const set of VALUE_SETS) t.test(set.name, async (t) => { assertProbes(t, render(set.name), 8080) })
    const moved = await renderer.helmTemplate({ ports: { health: 9090 } })
    assertProbes(t, moved, 9090)
  })

  t.test('every container runs as non-root with a read-only root filesystem, no privilege escalation and no capabilities', async (t) => {
    for (const set of VALUE_SETS) t.test(set.name, async (t) => { assertHardenedPod(t, render(set.name)) })
  })

  t.test('the router is a Deployment with replicas, a PodDisruptionBudget and soft pod anti-affinity by default', async (t) => {
    const objects = render('defaults')
    const deployment = theOne(objects, 'Deployment')
    const spec = deployment.spec as { replicas: number, selector: { matchLabels: Record<string, string> } }
    t.equal(deployment.metadata.name, FULLNAME)
    t.equal(spec.replicas, 2, 'two replicas')
    const pdb = theOne(objects, 'PodDisruptionBudget').spec as { maxUnavailable: number, selector: unknown }
    t.equal(pdb.maxUnavailable, 1, 'at most one replica disrupted at a time')
    t.same(pdb.selector, spec.selector, 'the PDB selects the router pods')
    const affinity = podSpecOf(deployment).affinity as { podAntiAffinity: Record<string, Array<{ weight: number, podAffinityTerm: { topologyKey: string, labelSelector: unknown } }>> }
    t.same(Object.keys(affinity.podAntiAffinity), ['preferredDuringSchedulingIgnoredDuringExecution'], 'anti-affinity is a preference, not a requirement')
    const term = affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution?.[0]
    t.equal(term?.podAffinityTerm.topologyKey, 'kubernetes.io/hostname', 'spread across nodes')
    t.same(term?.podAffinityTerm.labelSelector, { matchLabels: spec.selector.matchLabels }, 'against its own replicas')
    const hard = podSpecOf(theOne(render('everything on'), 'Deployment')).affinity as { podAntiAffinity: Record<string, unknown> }
    t.same(Object.keys(hard.podAntiAffinity), ['requiredDuringSchedulingIgnoredDuringExecution'], 'podAntiAffinity.type=hard requires it')
    t.same(ofKind(render('no anti-affinity, no PDB, health port not on the Service'), 'PodDisruptionBudget'), [], 'the PDB can be turned off')
  })

  t.test('the Service exposes the front door on TCP 50071, the tunnel on UDP 50072 and health on 8080', async (t) => {
    t.same(servicePorts(theOne(render('defaults'), 'Service')), ['grpc TCP 50071->grpc', 'health TCP 8080->health', 'quic UDP 50072->quic'])
    const container = podSpecOf(theOne(render('defaults'), 'Deployment')).containers[0]
    t.same(container?.ports, [
      { name: 'grpc', containerPort: 50071, protocol: 'TCP' },
      { name: 'quic', containerPort: 50072, protocol: 'UDP' },
      { name: 'health', containerPort: 8080, protocol: 'TCP' },
    ], 'container ports carry the names the Service targets')
  })

  t.test('with WebTransport the tunnel port is also served on TCP 50072', async (t) => {
    const objects = await renderer.helmTemplate({ config: { 'tunnel-protocol': 'webtransport' } })
    t.same(servicePorts(theOne(objects, 'Service')), ['grpc TCP 50071->grpc', 'health TCP 8080->health', 'quic UDP 50072->quic', 'webtransport TCP 50072->webtransport'])
    t.ok(podSpecOf(theOne(objects, 'Deployment')).containers[0]?.ports?.some((p) => p.name === 'webtransport' && p.containerPort === 50072 && p.protocol === 'TCP'), 'the container declares TCP 50072')
  })

  t.test('separateUdpService moves the QUIC port to a Service of its own for load balancers without mixed protocols', async (t) => {
    const services = ofKind(render('everything on'), 'Service').filter((s) => s.metadata.name.startsWith(FULLNAME))
    t.same(services.map((s) => [s.metadata.name, (s.spec as { type: string }).type, servicePorts(s)]), [
      [FULLNAME, 'LoadBalancer', ['grpc TCP 50071->grpc', 'health TCP 8080->health', 'webtransport TCP 50072->webtransport']],
      [`${FULLNAME}-quic`, 'LoadBalancer', ['quic UDP 50072->quic']],
    ])
  })

  t.test('the health port can be kept off the Service', async (t) => {
    t.same(servicePorts(theOne(render('no anti-affinity, no PDB, health port not on the Service'), 'Service')), ['grpc TCP 50071->grpc', 'quic UDP 50072->quic'])
    t.match(await renderer.helmTemplateError({ service: { health: { enabled: false } }, serviceMonitor: { enabled: true } }), /serviceMonitor.enabled needs service.health.enabled/)
  })

  t.test('the ServiceMonitor is rendered only when enabled and scrapes /metrics on the health port', async (t) => {
    t.same(ofKind(render('defaults'), 'ServiceMonitor'), [], 'none by default')
    const monitor = theOne(render('everything on'), 'ServiceMonitor')
    const spec = monitor.spec as { endpoints: Array<{ port: string, path: string }>, selector: unknown }
    t.same(spec.endpoints.map((e) => [e.port, e.path]), [['health', '/metrics']])
    t.same(spec.selector, (theOne(render('everything on'), 'Deployment').spec as { selector: unknown }).selector, 'it selects the router Service by the router labels')
    t.equal(monitor.metadata.labels?.release, 'prometheus', 'serviceMonitor.labels reach the object')
  })

  t.test('the NetworkPolicy keeps the health port to the router replicas and Prometheus, and every other port open', async (t) => {
    for (const set of VALUE_SETS) t.test(set.name, async (t) => { assertHealthPortPolicy(t, render(set.name), NAMESPACE) })
    t.test('with the health port moved', async (t) => { assertHealthPortPolicy(t, await renderer.helmTemplate({ ports: { health: 9090 } }), NAMESPACE) })
  })

  t.test('the NetworkPolicy is opt-out, and its health sources are values', async (t) => {
    t.same(ofKind(await renderer.helmTemplate({ networkPolicy: { enabled: false } }), 'NetworkPolicy'), [], 'networkPolicy.enabled false ships none')
    const objects = await renderer.helmTemplate({
      networkPolicy: {
        health: {
          scrapers: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'observability' } }, podSelector: { matchLabels: { 'app.kubernetes.io/name': 'prometheus' } } }],
          extraFrom: [{ ipBlock: { cidr: '203.0.113.0/24' } }],
        },
      },
    })
    t.same((await Promise.all(objects.map(validateObject))).flat(), [], 'valid')
    const labels = (theOne(objects, 'Deployment').spec as { template: { metadata: { labels: Record<string, string> } } }).template.metadata.labels
    const sources = policySources(NAMESPACE, labels)
    const health = (source: keyof typeof sources): boolean => ingressAllowed(objects, NAMESPACE, labels, sources[source], 8080, 'TCP')
    t.notOk(health('prometheus'), 'scrapers narrowed to another namespace: Prometheus in monitoring is refused')
    t.ok(ingressAllowed(objects, NAMESPACE, labels, { ...sources.prometheus, namespace: 'observability', namespaceLabels: { 'kubernetes.io/metadata.name': 'observability' } }, 8080, 'TCP'), 'and allowed from observability')
    t.ok(health('outside'), 'an extraFrom ipBlock is allowed')
    t.ok(health('peer'), 'the replicas always are')
    t.notOk(health('neighbour'), 'others still are not')
    t.match(await renderer.helmTemplateError({ networkPolicy: { health: { extraFrom: [{}] } } }), /extraFrom.0: Must have at least 1 properties/, 'an empty peer (which would match everything) is refused by the schema')
    t.match(await renderer.helmTemplateError({ networkPolicy: { health: { scrapers: [{ podSelector: { app: 'x' } }] } } }), /additional property app/i, 'a selector without matchLabels is refused by the schema')
  })

  t.test('POD_NAMESPACE comes from the downward API', async (t) => {
    t.equal(fieldRefOf(render('defaults'), 'POD_NAMESPACE'), 'metadata.namespace')
  })

  t.test('the termination grace period outlasts the drain', async (t) => {
    const pod = podSpecOf(theOne(render('defaults'), 'Deployment')) as { terminationGracePeriodSeconds?: number }
    t.ok((pod.terminationGracePeriodSeconds ?? 30) > 30 + 1, `terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} > --shutdown-drain-timeout-ms 30 s + the router's 1 s watchdog`)
  })
}
