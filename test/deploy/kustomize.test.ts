// The kustomize overlays (deployment, statefulset, peer-discovery, rebalance,
// front-door-tls) render with `kubectl kustomize`, validate, and hold the same facts as the Helm
// chart (the NetworkPolicy of the health port too); the overlay picks the Stargate
// workload kind, only peer-discovery and rebalance add the peer flags, env and RBAC rule, only
// rebalance adds --rebalance and drops ClientIP affinity, and only front-door-tls makes the
// front door TLS.
import t from 'tap'
import { createRenderer } from './render.ts'
import { validateObject, type KubeObject } from './k8s-validate.ts'
import {
  argsOf, assertDirectoryMounts, assertHardenedPod, assertHealthPortPolicy, assertMinimalRbac, assertProbes,
  endpointSliceRulesIn, envNames, fieldRefOf, flagValue, ofKind, podSpecOf, routerConfigOf, routerContainer, servicePorts, theOne,
} from './manifest-facts.ts'

const NAMESPACE = 'stargate'
const OVERLAYS = ['overlays/deployment', 'overlays/statefulset', 'overlays/peer-discovery', 'overlays/rebalance', 'overlays/front-door-tls'] as const

const renderer = await createRenderer(t)

if (renderer !== null) {
  const rendered = new Map<string, KubeObject[]>()
  const objects = await Promise.all(OVERLAYS.map((overlay) => renderer.kustomize(overlay)))
  OVERLAYS.forEach((overlay, i) => { rendered.set(overlay, objects[i] ?? []) })
  const render = (overlay: string): KubeObject[] => rendered.get(overlay) ?? []

  t.test('every overlay renders with kubectl kustomize and every object validates, with no unknown fields', async (t) => {
    for (const overlay of OVERLAYS) {
      const objects = render(overlay)
      t.same(objects.map((o) => o.kind).sort(), ['Deployment', 'NetworkPolicy', 'PodDisruptionBudget', 'Role', 'RoleBinding', 'Service', 'ServiceAccount'], `${overlay}: the router's objects`)
      t.ok(objects.every((o) => o.metadata.namespace === NAMESPACE), `${overlay}: all in namespace ${NAMESPACE}`)
      t.same((await Promise.all(objects.map(validateObject))).flat(), [], `${overlay}: valid`)
    }
  })

  t.test('RBAC is a namespaced Role with get/list/watch on endpointslices only, bound to the router', async (t) => {
    for (const overlay of OVERLAYS) t.test(overlay, async (t) => { assertMinimalRbac(t, render(overlay), NAMESPACE) })
  })

  t.test('TLS is mounted as a directory, never with subPath', async (t) => {
    for (const overlay of OVERLAYS) t.test(overlay, async (t) => { assertDirectoryMounts(t, render(overlay)) })
  })

  t.test('liveness probes /livez and readiness probes /readyz on the health port 8080', async (t) => {
    for (const overlay of OVERLAYS) t.test(overlay, async (t) => { assertProbes(t, render(overlay), 8080) })
  })

  t.test('every container runs as non-root with a read-only root filesystem, no privilege escalation and no capabilities', async (t) => {
    for (const overlay of OVERLAYS) t.test(overlay, async (t) => { assertHardenedPod(t, render(overlay)) })
  })

  t.test('the NetworkPolicy keeps the health port to the router replicas and Prometheus, and every other port open', async (t) => {
    for (const overlay of OVERLAYS) t.test(overlay, async (t) => { assertHealthPortPolicy(t, render(overlay), NAMESPACE) })
  })

  t.test('the Service exposes the front door, both tunnel transports and health', async (t) => {
    t.same(servicePorts(theOne(render('overlays/deployment'), 'Service')), ['grpc TCP 50071->grpc', 'health TCP 8080->health', 'quic UDP 50072->quic', 'webtransport TCP 50072->webtransport'])
  })

  t.test('every overlay watches upstream\'s headless Stargate Service, llm-request-router-headless, for either workload kind', async (t) => {
    const service = 'llm-request-router-headless'
    const cases = [
      { overlay: 'overlays/deployment', kind: 'Deployment', service },
      { overlay: 'overlays/statefulset', kind: 'StatefulSet', service },
      { overlay: 'overlays/peer-discovery', kind: 'Deployment', service },
      { overlay: 'overlays/rebalance', kind: 'Deployment', service },
      { overlay: 'overlays/front-door-tls', kind: 'Deployment', service },
    ]
    for (const c of cases) {
      const objects = render(c.overlay)
      const config = routerConfigOf(objects, NAMESPACE)
      t.equal(config.targetServiceName, c.service, `${c.overlay}: watches ${c.service}`)
      t.equal(config.targetNamespace, NAMESPACE, `${c.overlay}: in the pod's namespace (POD_NAMESPACE)`)
      t.equal(theOne(objects, 'Deployment').metadata.annotations?.['stargate.io/fronted-workload-kind'], c.kind, `${c.overlay}: annotated ${c.kind}`)
    }
    const withoutService = (args: readonly string[]): string[] => args.filter((a) => !a.startsWith('--target-service-name='))
    t.same(withoutService(argsOf(render('overlays/statefulset'))), withoutService(argsOf(render('overlays/deployment'))), 'the Pylon contract is the same')
  })

  // Upstream's chart: appProtocol h2c on the grpc port, readiness every 2 s, liveness
  // every 5 s (1 s timeout, 3 failures), no startup probe, no preStop, grace = drain + 5 s.
  t.test('the grpc port is h2c (not with front-door TLS), and probes and termination grace are upstream\'s', async (t) => {
    type Port = { name: string, appProtocol?: string }
    const grpcPort = (overlay: string): Port | undefined => (theOne(render(overlay), 'Service').spec as { ports: Port[] }).ports.find((p) => p.name === 'grpc')
    t.equal(grpcPort('overlays/deployment')?.appProtocol, 'kubernetes.io/h2c')
    t.equal(grpcPort('overlays/front-door-tls')?.appProtocol, undefined, 'the front-door-tls component removes it')
    t.equal(podSpecOf(theOne(render('overlays/deployment'), 'Deployment')).terminationGracePeriodSeconds, 35)
    const c = routerContainer(render('overlays/deployment'))
    t.same(c.readinessProbe, { httpGet: { path: '/readyz', port: 'health' }, periodSeconds: 2, timeoutSeconds: 1, failureThreshold: 3 })
    t.same(c.livenessProbe, { httpGet: { path: '/livez', port: 'health' }, periodSeconds: 5, timeoutSeconds: 1, failureThreshold: 3 })
    t.equal(c.startupProbe, undefined)
    t.equal(c.lifecycle, undefined)
  })

  t.test('the overlays run the router with the tunnels\' TLS identity from the mounted Secret, and the router accepts their args', async (t) => {
    for (const overlay of OVERLAYS) {
      const config = routerConfigOf(render(overlay), NAMESPACE)
      t.equal(config.tlsCertPath, '/etc/stargate-router/tls/server/tls.crt', `${overlay}: certificate`)
      t.equal(config.tlsKeyPath, '/etc/stargate-router/tls/server/tls.key', `${overlay}: key`)
      t.same([config.listenAddr.port, config.reverseTunnelListenAddr.port, config.healthListenAddr.port], [50071, 50072, 8080], `${overlay}: SPEC §2 ports`)
    }
  })

  t.test('the front door is cleartext behind a Gateway, except in the front-door-tls overlay', async (t) => {
    for (const overlay of ['overlays/deployment', 'overlays/statefulset', 'overlays/peer-discovery', 'overlays/rebalance']) {
      const config = routerConfigOf(render(overlay), NAMESPACE)
      t.equal(config.frontDoorTls, false, `${overlay}: cleartext front door`)
      t.equal(config.grpcPylonDialAddr, 'http://stargate-router.stargate.svc:50071', `${overlay}: Pylons dial the Service`)
    }
    const tls = routerConfigOf(render('overlays/front-door-tls'), NAMESPACE)
    t.equal(tls.frontDoorTls, true, 'front-door-tls: TLS on the front door')
    t.equal(tls.grpcPylonDialAddr, 'https://stargate-router.stargate.svc:50071', 'front-door-tls: Pylons are told https')
  })

  const affinityOf = (overlay: string): string | undefined => (theOne(render(overlay), 'Service').spec as { sessionAffinity?: string }).sessionAffinity

  t.test('the Service keeps a client on one replica (sessionAffinity ClientIP, as upstream), except with rebalancing', async (t) => {
    for (const overlay of OVERLAYS.filter((o) => o !== 'overlays/rebalance')) t.equal(affinityOf(overlay), 'ClientIP', overlay)
    t.equal(affinityOf('overlays/rebalance'), 'None', 'rebalance: no affinity, which would send every Pylon behind one NAT address back to the replica it was moved off')
  })

  t.test('only the rebalance overlay adds --rebalance, with peer discovery, and the router accepts it', async (t) => {
    for (const overlay of OVERLAYS.filter((o) => o !== 'overlays/rebalance')) t.equal(flagValue(argsOf(render(overlay)), 'rebalance'), undefined, `${overlay}: no --rebalance`)
    const objects = render('overlays/rebalance')
    t.equal(flagValue(argsOf(objects), 'rebalance'), true)
    const config = routerConfigOf(objects, NAMESPACE)
    t.equal(config.rebalance, true, 'the router accepts --rebalance (it requires --enable-peer-discovery)')
    t.equal(config.enablePeerDiscovery, true)
    const peerOnly = argsOf(render('overlays/peer-discovery'))
    t.same(argsOf(objects).filter((a) => a !== '--rebalance'), peerOnly, 'otherwise the peer-discovery overlay\'s args')
  })

  t.test('only the peer-discovery and rebalance overlays add the peer flags, POD_IP/POD_NAME and the RBAC rule for their own Service', async (t) => {
    for (const overlay of ['overlays/deployment', 'overlays/statefulset', 'overlays/front-door-tls']) {
      const objects = render(overlay)
      t.equal(flagValue(argsOf(objects), 'enable-peer-discovery'), undefined, `${overlay}: no --enable-peer-discovery`)
      t.same(envNames(objects), ['POD_NAMESPACE'], `${overlay}: no POD_IP/POD_NAME`)
      t.equal(endpointSliceRulesIn(objects, NAMESPACE), 1, `${overlay}: one rule, Stargate discovery`)
    }
    for (const overlay of ['overlays/peer-discovery', 'overlays/rebalance']) {
      const objects = render(overlay)
      const args = argsOf(objects)
      const service = theOne(objects, 'Service')
      t.equal(flagValue(args, 'enable-peer-discovery'), true, overlay)
      t.equal(flagValue(args, 'peer-service'), service.metadata.name, `${overlay}: --peer-service names the router's own Service`)
      t.ok(servicePorts(service).includes('health TCP 8080->health'), `${overlay}: whose health port is named health`)
      t.equal(fieldRefOf(objects, 'POD_IP'), 'status.podIP', overlay)
      t.equal(fieldRefOf(objects, 'POD_NAME'), 'metadata.name', overlay)
      t.equal(endpointSliceRulesIn(objects, NAMESPACE), 2, `${overlay}: a second endpointslices rule (a Role cannot narrow by label)`)
      t.equal(routerConfigOf(objects, NAMESPACE).enablePeerDiscovery, true, `${overlay}: the router accepts it`)
      t.equal(ofKind(objects, 'Role').length, 1, `${overlay}: merged into the one Role of the namespace`)
    }
  })
}
