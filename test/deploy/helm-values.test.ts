// Every router flag (lib/config/flags.ts) is reachable from the chart values and what the chart
// renders is accepted by the router's own parser; the router watches upstream's headless Stargate
// Service by default whatever the workload kind, without changing the Pylon contract; peer
// discovery adds its flags, env and RBAC only when enabled; the front door is cleartext unless
// tls.frontDoor is on, --grpc-pylon-dial-addr defaults to the chart's Service, the Service keeps a
// Pylon on one replica (ClientIP) unless replica balancing is on, and the termination grace period
// follows the drain timeout as upstream's chart renders it.
import t from 'tap'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { parse as parseYaml } from 'yaml'
import { FLAGS } from '../../lib/config/flags.ts'
import type { Config } from '../../lib/config/config.ts'
import { CHART, createRenderer, FULLNAME, NAMESPACE } from './render.ts'
import type { KubeObject } from './k8s-validate.ts'
import {
  argsOf, assertMinimalRbac, endpointSliceRulesIn, envNames, fieldRefOf, flagValue, ofKind, podSpecOf,
  routerConfigOf, routerContainer, servicePorts, theOne, type Container,
} from './manifest-facts.ts'

/** Flags the chart derives from other values (so they agree with ports, mounts and Services). */
const CHART_MANAGED: Readonly<Record<string, string>> = {
  'listen-addr': 'listenHost + ports.frontDoor',
  'reverse-tunnel-listen-addr': 'listenHost + ports.tunnel',
  'health-listen-addr': 'listenHost + ports.health',
  'target-namespace': 'stargate.namespace (else POD_NAMESPACE)',
  'target-service-name': 'stargate.serviceName (default upstream\'s llm-request-router-headless)',
  'tls-cert-path': 'tls.serverIdentity',
  'tls-key-path': 'tls.serverIdentity',
  'front-door-tls': 'tls.frontDoor.enabled',
  'client-ca-path': 'tls.clientCa',
  'upstream-tls-cert-path': 'tls.upstreamTrust',
  'enable-peer-discovery': 'peerDiscovery.enabled',
  'peer-service': 'peerDiscovery.enabled (the chart\'s own Service)',
  rebalance: 'rebalance.enabled (with peerDiscovery.enabled; the Service then has no ClientIP affinity)',
}

/** A valid, non-default value for every flag under `config`. */
const SAMPLES: Readonly<Record<string, string | number | boolean | readonly string[]>> = {
  discovery: 'file',
  'targets-file': '/etc/stargate-router/targets/targets.yaml',
  'grpc-port-name': 'sg-grpc',
  'quic-port-name': 'sg-quic',
  'http-port-name': 'sg-http',
  'max-snapshot-staleness-ms': 120000,
  'advertised-hostname-template': '{pod_name}.{namespace}.stargate.example.com',
  'advertised-grpc-port': 443,
  'grpc-pylon-dial-addr': 'https://stargate.example.com:443',
  'remote-stargate-url': ['http://router.east.example.com:50071', 'https://router.west.example.com:50071'],
  'allow-insecure-remote-watch-http': true,
  'watch-heartbeat-ms': 2500,
  'connect-timeout-ms': 2000,
  'grpc-max-message-bytes': 8388608,
  'drain-grace-ms': 45000,
  'relay-idle-timeout-ms': 600000,
  'relay-keep-alive-ms': 15000,
  'tunnel-protocol': 'webtransport',
  'quic-retry': true,
  'quic-max-connections': 20000,
  // Tunnel port defences
  'quic-retry-threshold': 250,
  'quic-max-handshakes-per-address': 16,
  'http-max-body-bytes': 67108864,
  'http-headers-timeout-ms': 20000,
  'http-idle-timeout-ms': 120000,
  'http-request-timeout-ms': 900000,
  'http2-max-concurrent-streams': 500,
  'http2-max-header-list-bytes': 32768,
  'shutdown-drain-timeout-ms': 20000,
  'upstream-tls': true,
  'quic-insecure': true,
  'tls-poll-interval-ms': 60000,
  'tls-debounce-ms': 500,
  'peers-file': '/etc/stargate-router/peers/peers.yaml',
  'peer-health-port-name': 'router-health',
  'peer-health-port': 9090,
  'peer-check-interval-ms': 5000,
  'peer-check-timeout-ms': 1000,
  'peer-divergence-grace-ms': 60000,
  'rebalance-tolerance': 0.3,
  'rebalance-interval-ms': 10000,
  'rebalance-max-moves-per-interval': 4,
  'webtransport-max-sessions-per-connection': 2,
  'webtransport-max-sessions': 5000,
  'log-level': 'debug',
  'log-format': 'pretty',
  // Limits and timeouts
  'http-upstream-max-connections': 256,
  'http-upstream-max-queue': 64,
  'upstream-tls-system-ca': true,
  'front-door-max-connections': 20000,
  'http-keep-alive-timeout-ms': 120000,
  'http2-session-idle-timeout-ms': 600000,
  'tls-handshake-timeout-ms': 5000,
  'native-heap-trim-threshold-bytes': 33554432,
  'native-heap-check-interval-ms': 2000,
  'trusted-proxy-cidrs': ['10.0.0.0/8', 'fd00::/8'],
  // Slow clients (SPEC §12)
  'http-body-buffer-bytes': 131072,
  'http-body-min-bytes-per-second': 512,
  'http-body-rate-window-ms': 30000,
  'http-body-deadline-ms': 600000,
  'http-response-stall-timeout-ms': 30000,
  'http-upstream-max-client-share-percent': 50,
}

/** Config field of a flag: camelCase of its name, except where the field is a plural. */
function configFieldOf (flag: string): keyof Config {
  if (flag === 'remote-stargate-url') return 'remoteStargateUrls'
  return flag.replace(/-([a-z0-9])/g, (_, c: string) => c.toUpperCase()) as keyof Config
}

const renderer = await createRenderer(t)
// ~30 helm renders, each a child process: more than tap's default 30 s on a loaded machine.
t.setTimeout(180_000)

t.test('every router flag is settable in the values: under config by name, or by the chart value that owns it', async (t) => {
  const values = parseYaml(await readFile(join(CHART, 'values.yaml'), 'utf8')) as { config: Record<string, unknown> }
  const schema = JSON.parse(await readFile(join(CHART, 'values.schema.json'), 'utf8')) as { properties: { config: { properties: Record<string, { type: string[], enum?: unknown[], description?: string }>, additionalProperties: boolean } } }
  const configKeys = Object.keys(values.config).sort()
  const managed = Object.keys(CHART_MANAGED).sort()
  t.same([...configKeys, ...managed].sort(), FLAGS.map((f) => f.name).sort(), 'config keys + chart-managed flags = every flag, each once')
  t.same(Object.keys(SAMPLES).sort(), configKeys, 'this test has a sample for every config key')
  t.same(Object.keys(schema.properties.config.properties).sort(), configKeys, 'values.schema.json knows exactly the config keys')
  t.equal(schema.properties.config.additionalProperties, false, 'an unknown config key is a schema error')
  const valuesText = await readFile(join(CHART, 'values.yaml'), 'utf8')
  for (const flag of FLAGS) {
    if (flag.name in CHART_MANAGED) continue
    const def = flag.default === undefined ? 'unset' : flag.default === '' ? 'empty' : flag.default
    const choices = flag.choices === undefined ? '' : ` [${flag.choices.join('|')}]`
    t.ok(valuesText.split('\n').includes(`  # --${flag.name}${choices}: ${flag.help} (router default: ${def})`), `values.yaml documents --${flag.name} with its help text and its default ${def}`)
    t.equal(schema.properties.config.properties[flag.name]?.description, `--${flag.name}: ${flag.help}`, `the schema describes --${flag.name} with its help text`)
    const types = schema.properties.config.properties[flag.name]?.type ?? []
    const expected = { bool: 'boolean', int: 'integer', number: 'number', string: 'string', list: 'array' }[flag.kind]
    t.ok(types.includes(expected) && types.includes('null'), `the schema types --${flag.name} as ${expected} or null`)
    if (flag.choices !== undefined) t.same(schema.properties.config.properties[flag.name]?.enum, [...flag.choices, null], `the schema lists the choices of --${flag.name}`)
  }
})

if (renderer !== null) {
  t.test('every config value reaches the router argv, and the router parses it into the value that was set', async (t) => {
    const objects = await renderer.helmTemplate({ config: SAMPLES })
    const args = argsOf(objects)
    const config = routerConfigOf(objects, NAMESPACE)
    for (const [flag, sample] of Object.entries(SAMPLES)) {
      if (Array.isArray(sample)) t.same(args.filter((a) => a.startsWith(`--${flag}=`)), sample.map((v) => `--${flag}=${v}`), `--${flag} is repeated once per value`)
      else t.equal(flagValue(args, flag), sample === true ? true : String(sample), `--${flag} is passed as given`)
      t.same(config[configFieldOf(flag)], sample, `the router reads --${flag} as ${JSON.stringify(sample)}`)
    }
  })

  t.test('config values left null, empty or false are not passed, so the router defaults apply', async (t) => {
    const objects = await renderer.helmTemplate({ config: { 'grpc-pylon-dial-addr': '', 'quic-retry': false, 'log-level': null, 'remote-stargate-url': [] } })
    t.same(argsOf(objects).map((a) => a.split('=')[0]), ['--listen-addr', '--reverse-tunnel-listen-addr', '--health-listen-addr', '--target-service-name', '--grpc-pylon-dial-addr'])
    const config = routerConfigOf(objects, NAMESPACE)
    t.equal(config.logLevel, 'info')
    t.equal(config.quicRetry, false)
    t.equal(config.grpcPylonDialAddr, `http://${FULLNAME}.${NAMESPACE}.svc:50071`, 'the required dial URI defaults to the chart\'s Service')
    t.equal(config.frontDoorTls, false, 'the front door is cleartext (a Gateway terminates TLS)')
  })

  t.test('the flags the chart manages parse into listeners, mounts and Services that agree with the manifests', async (t) => {
    const objects = await renderer.helmTemplate({
      listenHost: '[::]',
      ports: { frontDoor: 50171, tunnel: 50172, health: 9090 },
      stargate: { namespace: 'llm', serviceName: 'stargate-pods' },
      tls: { serverIdentity: { secretName: 'router-tls' }, frontDoor: { enabled: true }, upstreamTrust: { secretName: 'stargate-ca', key: 'bundle.pem' }, clientCa: { configMapName: 'pylon-ca' } },
      peerDiscovery: { enabled: true },
      rebalance: { enabled: true },
    })
    const args = argsOf(objects)
    for (const flag of Object.keys(CHART_MANAGED)) t.not(flagValue(args, flag), undefined, `--${flag} is rendered from ${CHART_MANAGED[flag]}`)
    const config = routerConfigOf(objects, NAMESPACE)
    t.same(config.listenAddr, { host: '::', port: 50171 })
    t.same(config.reverseTunnelListenAddr, { host: '::', port: 50172 })
    t.same(config.healthListenAddr, { host: '::', port: 9090 })
    t.equal(config.targetNamespace, 'llm')
    t.equal(config.targetServiceName, 'stargate-pods')
    t.equal(config.tlsCertPath, '/etc/stargate-router/tls/server/tls.crt')
    t.equal(config.tlsKeyPath, '/etc/stargate-router/tls/server/tls.key')
    t.equal(config.upstreamTlsCertPath, '/etc/stargate-router/tls/upstream-trust/bundle.pem')
    t.equal(config.clientCaPath, '/etc/stargate-router/tls/client-ca/ca.crt')
    t.equal(config.frontDoorTls, true)
    t.equal(config.grpcPylonDialAddr, `https://${FULLNAME}.${NAMESPACE}.svc:50171`, 'with front-door TLS the default dial URI is https, on the front door port')
    t.equal(config.enablePeerDiscovery, true)
    t.equal(config.peerService, FULLNAME)
    t.equal(config.rebalance, true)
    t.same(servicePorts(theOne(objects, 'Service')), ['grpc TCP 50171->grpc', 'health TCP 9090->health', 'quic UDP 50172->quic'])
  })

  t.test('a config key the chart owns, one the router does not know, or a combination the router refuses is refused at render time', async (t) => {
    t.match(await renderer.helmTemplateError({ config: { 'listen-addr': '0.0.0.0:1' } }), /config.*listen-addr/)
    t.match(await renderer.helmTemplateError({ config: { 'target-service-name': 'x' } }), /config.*target-service-name/)
    t.match(await renderer.helmTemplateError({ config: { 'listen-adress': '0.0.0.0:1' } }), /listen-adress/)
    t.match(await renderer.helmTemplateError({ config: { 'tunnel-protocol': 'quic' } }), /tunnel-protocol/)
    t.match(await renderer.helmTemplateError({ tls: { clientCa: { secretName: 'pylon-ca' } } }), /tls.clientCa needs tls.serverIdentity/)
    t.match(await renderer.helmTemplateError({ config: { 'upstream-tls': true } }), /config.upstream-tls needs a trust bundle/, 'no silent fallback to the system CA store')
    t.match(await renderer.helmTemplateError({ peerDiscovery: { enabled: true }, config: { 'peers-file': '/etc/peers.yaml' } }), /config.peers-file is for runs without Kubernetes/)
    t.match(await renderer.helmTemplateError({ rebalance: { enabled: true } }), /rebalance.enabled needs peerDiscovery.enabled/, 'the router would refuse --rebalance without peer discovery')
    t.match(await renderer.helmTemplateError({ config: { rebalance: true } }), /config.*rebalance/)
    t.match(await renderer.helmTemplateError({ config: { 'rebalance-tolerance': 1.5 } }), /rebalance-tolerance/, 'the schema bounds the tolerance')
    t.match(await renderer.helmTemplateError({ tls: { frontDoor: { enabled: true } } }), /tls.frontDoor.enabled needs tls.serverIdentity.secretName/)
    t.match(await renderer.helmTemplateError({ config: { 'front-door-tls': true } }), /config.*front-door-tls/)
    t.match(await renderer.helmTemplateError({ config: { 'grpc-pylon-dial-addr': 'stargate.example.com:443' } }), /grpc-pylon-dial-addr/)
    t.match(await renderer.helmTemplateError({ terminationGracePeriodSeconds: 20 }), /terminationGracePeriodSeconds 20 is shorter than preStopSleepSeconds \+ the drain timeout \(30 s\)/)
    t.match(await renderer.helmTemplateError({ config: { 'grpc-pylon-dial-addr': 'https://stargate.example.com:443/pylon' } }), /grpc-pylon-dial-addr/, 'a path: upstream\'s shared URI parser refuses it')
    t.match(await renderer.helmTemplateError({ config: { 'remote-stargate-url': ['https://b.example.com?region=b'] } }), /remote-stargate-url/, 'a query')
  })

  t.test('the front door is cleartext by default, and TLS with tls.frontDoor.enabled on the server identity', async (t) => {
    const plain = routerConfigOf(await renderer.helmTemplate({ tls: { serverIdentity: { secretName: 'router-tls' } } }), NAMESPACE)
    t.equal(plain.frontDoorTls, false, 'a server identity alone is the tunnels\' identity, as in the Rust router')
    t.equal(plain.tlsCertPath, '/etc/stargate-router/tls/server/tls.crt')
    const tls = routerConfigOf(await renderer.helmTemplate({ tls: { serverIdentity: { secretName: 'router-tls' }, frontDoor: { enabled: true } } }), NAMESPACE)
    t.equal(tls.frontDoorTls, true)
    t.equal(tls.grpcPylonDialAddr, `https://${FULLNAME}.${NAMESPACE}.svc:50071`)
  })

  t.test('config.grpc-pylon-dial-addr, when set, is what Pylons are told to dial', async (t) => {
    const config = routerConfigOf(await renderer.helmTemplate({ config: { 'grpc-pylon-dial-addr': 'https://stargate.example.com' } }), NAMESPACE)
    t.equal(config.grpcPylonDialAddr, 'https://stargate.example.com')
    const port = routerConfigOf(await renderer.helmTemplate({ service: { ports: { frontDoor: 443 } } }), NAMESPACE)
    t.equal(port.grpcPylonDialAddr, `http://${FULLNAME}.${NAMESPACE}.svc:443`, 'the default follows the Service port')
  })

  t.test('the Service keeps a client on one replica (sessionAffinity ClientIP, as upstream), unless turned off', async (t) => {
    const services = ofKind(await renderer.helmTemplate({ service: { separateUdpService: true } }), 'Service').filter((s) => s.metadata.name.startsWith(FULLNAME))
    t.same(services.map((s) => [s.metadata.name, (s.spec as { sessionAffinity?: string }).sessionAffinity]), [[FULLNAME, 'ClientIP'], [`${FULLNAME}-quic`, 'ClientIP']])
    const off = theOne(await renderer.helmTemplate({ service: { sessionAffinity: '' } }), 'Service')
    t.equal((off.spec as { sessionAffinity?: string }).sessionAffinity, undefined)
  })

  t.test('with replica balancing on, the Services have no ClientIP affinity (it would pin a NAT address to one replica)', async (t) => {
    const objects = await renderer.helmTemplate({ peerDiscovery: { enabled: true }, rebalance: { enabled: true }, service: { separateUdpService: true, sessionAffinity: 'ClientIP' } })
    const services = ofKind(objects, 'Service').filter((s) => s.metadata.name.startsWith(FULLNAME))
    t.same(services.map((s) => [s.metadata.name, (s.spec as { sessionAffinity?: string }).sessionAffinity]), [[FULLNAME, 'None'], [`${FULLNAME}-quic`, 'None']], 'None even where service.sessionAffinity says ClientIP')
    t.equal(flagValue(argsOf(objects), 'rebalance'), true)
    const off = await renderer.helmTemplate({ peerDiscovery: { enabled: true } })
    t.equal(flagValue(argsOf(off), 'rebalance'), undefined, 'off by default')
    t.equal((theOne(off, 'Service').spec as { sessionAffinity?: string }).sessionAffinity, 'ClientIP', 'and the affinity stays as configured')
  })

  // Upstream's chart renders ceil(drainTimeoutMs / 1000) + 5 and no preStop hook.
  t.test('terminationGracePeriodSeconds follows the drain timeout as upstream: preStop (0) + drain + 5 s, or an explicit value that covers both', async (t) => {
    const grace = async (values: object): Promise<number | undefined> =>
      (podSpecOf(theOne(await renderer.helmTemplate(values), 'Deployment')) as { terminationGracePeriodSeconds?: number }).terminationGracePeriodSeconds
    t.equal(await grace({}), 30 + 5, 'defaults: 30 s drain + 5 s, as upstream\'s 35 s')
    t.equal(await grace({ config: { 'shutdown-drain-timeout-ms': 60500 } }), 61 + 5, 'a longer drain, rounded up to seconds')
    t.equal(await grace({ preStopSleepSeconds: 5, config: { 'shutdown-drain-timeout-ms': 1000 } }), 5 + 1 + 5, 'a preStop sleep adds to it')
    t.equal(await grace({ terminationGracePeriodSeconds: 120 }), 120, 'an explicit value that covers the drain wins')
    t.equal(routerContainer(await renderer.helmTemplate({})).lifecycle, undefined, 'no preStop hook by default, as upstream')
  })

  t.test('probes have upstream\'s timings: readiness every 2 s, liveness every 5 s, 1 s timeout, 3 failures, no startup probe', async (t) => {
    const probes = async (values: object): Promise<Container> => routerContainer(await renderer.helmTemplate(values))
    const c = await probes({})
    t.same(c.readinessProbe, { httpGet: { path: '/readyz', port: 'health' }, initialDelaySeconds: 0, periodSeconds: 2, timeoutSeconds: 1, failureThreshold: 3 })
    t.same(c.livenessProbe, { httpGet: { path: '/livez', port: 'health' }, initialDelaySeconds: 0, periodSeconds: 5, timeoutSeconds: 1, failureThreshold: 3 })
    t.equal(c.startupProbe, undefined)
    const withStartup = await probes({ probes: { startup: { periodSeconds: 2, failureThreshold: 30 } } })
    t.same(withStartup.startupProbe, { httpGet: { path: '/livez', port: 'health' }, periodSeconds: 2, failureThreshold: 30 }, 'a startup probe on request')
  })

  t.test('the grpc Service port carries appProtocol kubernetes.io/h2c while the front door is cleartext (Gateways pick h2c by it)', async (t) => {
    type Port = { name: string, appProtocol?: string }
    const ports = async (values: object): Promise<Port[]> => (theOne(await renderer.helmTemplate(values), 'Service').spec as { ports: Port[] }).ports
    t.same((await ports({})).map((p) => [p.name, p.appProtocol]), [['grpc', 'kubernetes.io/h2c'], ['quic', undefined], ['health', undefined]])
    const tls = await ports({ tls: { serverIdentity: { secretName: 'router-tls' }, frontDoor: { enabled: true } } })
    t.equal(tls.find((p) => p.name === 'grpc')?.appProtocol, undefined, 'not with TLS on the front door')
  })

  const KIND_CASES: ReadonlyArray<{ why: string, values: object, service: string, kind: string }> = [
    { why: 'Deployment is the default, behind upstream\'s headless Service', values: {}, service: 'llm-request-router-headless', kind: 'Deployment' },
    { why: 'a StatefulSet watches the same headless Service (its governing one upstream)', values: { stargate: { workloadKind: 'StatefulSet' } }, service: 'llm-request-router-headless', kind: 'StatefulSet' },
    { why: 'an explicit serviceName wins for a Deployment', values: { stargate: { serviceName: 'sg' } }, service: 'sg', kind: 'Deployment' },
    { why: 'an explicit serviceName wins for a StatefulSet', values: { stargate: { workloadKind: 'StatefulSet', serviceName: 'sg-governing' } }, service: 'sg-governing', kind: 'StatefulSet' },
    { why: 'an empty serviceName falls back to upstream\'s headless Service', values: { stargate: { serviceName: null } }, service: 'llm-request-router-headless', kind: 'Deployment' },
  ]

  t.test('the router watches upstream\'s headless Stargate Service unless stargate.serviceName names another', async (t) => {
    for (const c of KIND_CASES) {
      const objects = await renderer.helmTemplate(c.values)
      const deployment = theOne(objects, 'Deployment')
      t.equal(routerConfigOf(objects, NAMESPACE).targetServiceName, c.service, `${c.why}: watches ${c.service}`)
      t.equal(deployment.metadata.annotations?.['stargate.io/fronted-workload-kind'], c.kind, `${c.why}: annotated ${c.kind}`)
      t.equal(deployment.metadata.annotations?.['stargate.io/fronted-service'], `${NAMESPACE}/${c.service}`, `${c.why}: annotated with the watched Service`)
    }
    t.match(await renderer.helmTemplateError({ stargate: { workloadKind: 'DaemonSet' } }), /workloadKind/)
  })

  t.test('the Pylon registration contract is the same for both workload kinds', async (t) => {
    const withoutService = (args: readonly string[]): string[] => args.filter((a) => !a.startsWith('--target-service-name='))
    const deployment = await renderer.helmTemplate({ stargate: { workloadKind: 'Deployment' }, config: { 'advertised-hostname-template': '{pod_name}.sg.example.com' } })
    const statefulSet = await renderer.helmTemplate({ stargate: { workloadKind: 'StatefulSet' }, config: { 'advertised-hostname-template': '{pod_name}.sg.example.com' } })
    t.same(withoutService(argsOf(statefulSet)), withoutService(argsOf(deployment)), 'nothing but (at most) the watched Service differs')
    const a = routerConfigOf(deployment, NAMESPACE)
    const b = routerConfigOf(statefulSet, NAMESPACE)
    t.same([b.advertisedHostnameTemplate, b.advertisedGrpcPort, b.grpcPortName, b.quicPortName, b.httpPortName], [a.advertisedHostnameTemplate, a.advertisedGrpcPort, a.grpcPortName, a.quicPortName, a.httpPortName], 'same template, advertised port and port names')
    t.same(servicePorts(theOne(statefulSet, 'Service')), servicePorts(theOne(deployment, 'Service')), 'same router Service')
  })

  t.test('stargate.service.create renders a headless Service publishing not-ready addresses, as upstream\'s, with the port names the router looks up', async (t) => {
    for (const kind of ['Deployment', 'StatefulSet']) {
      const objects = await renderer.helmTemplate({ stargate: { workloadKind: kind, namespace: 'llm', service: { create: true } } })
      const watched = routerConfigOf(objects, NAMESPACE).targetServiceName
      const service = ofKind(objects, 'Service').find((s) => s.metadata.name === watched)
      t.ok(service, `${kind}: the watched Service ${watched} is rendered`)
      if (service === undefined) continue
      const spec = service.spec as { clusterIP: string, publishNotReadyAddresses: boolean, selector: Record<string, string> }
      t.equal(service.metadata.namespace, 'llm', `${kind}: in the Stargate namespace`)
      t.equal(spec.clusterIP, 'None', `${kind}: headless`)
      t.equal(spec.publishNotReadyAddresses, true, `${kind}: lists warming pods, as upstream's headless Service`)
      t.same(spec.selector, { 'app.kubernetes.io/name': 'stargate' }, `${kind}: selects the Stargate pods`)
      t.same(servicePorts(service), ['grpc TCP 50051->50051', 'http TCP 8000->8000', 'quic UDP 50052->50052'], `${kind}: grpc/TCP, quic/UDP, http/TCP`)
      t.not(service.metadata.labels?.['app.kubernetes.io/name'], 'stargate-router', `${kind}: not labelled as the router, so router selectors miss it`)
    }
    const readiness = ofKind(await renderer.helmTemplate({ stargate: { service: { create: true, publishNotReadyAddresses: false } } }), 'Service').find((s) => s.metadata.name === 'llm-request-router-headless')
    t.equal((readiness?.spec as { publishNotReadyAddresses?: boolean } | undefined)?.publishNotReadyAddresses, false, 'or a readiness-respecting one on request')
  })

  t.test('peer discovery is off by default: no flags, no POD_IP or POD_NAME, no extra RBAC', async (t) => {
    const objects = await renderer.helmTemplate({})
    const args = argsOf(objects)
    t.equal(flagValue(args, 'enable-peer-discovery'), undefined)
    t.equal(flagValue(args, 'peer-service'), undefined)
    t.same(envNames(objects), ['POD_NAMESPACE'])
    t.equal(endpointSliceRulesIn(objects, NAMESPACE), 1, 'one rule: Stargate discovery')
    t.same(ofKind(objects, 'Role').map((r) => r.metadata.name), [FULLNAME])
  })

  t.test('peer discovery, enabled, adds the flags for the chart\'s own Service, the downward-API env and its RBAC rule', async (t) => {
    const objects = await renderer.helmTemplate({ peerDiscovery: { enabled: true } })
    const args = argsOf(objects)
    t.equal(flagValue(args, 'enable-peer-discovery'), true)
    t.equal(flagValue(args, 'peer-service'), FULLNAME)
    t.ok(ofKind(objects, 'Service').some((s) => s.metadata.name === FULLNAME && servicePorts(s).includes('health TCP 8080->health')), 'that Service exists and names its health port `health`')
    t.equal(fieldRefOf(objects, 'POD_IP'), 'status.podIP')
    t.equal(fieldRefOf(objects, 'POD_NAME'), 'metadata.name')
    t.equal(endpointSliceRulesIn(objects, NAMESPACE), 2, 'a second endpointslices rule in the release namespace (same verbs: a Role cannot narrow by label)')
    assertMinimalRbac(t, objects, NAMESPACE)
    const config = routerConfigOf(objects, NAMESPACE)
    t.equal(config.enablePeerDiscovery, true, 'the router accepts it (POD_IP/POD_NAME are set)')
  })

  t.test('peer discovery with Stargate in another namespace gets a Role of its own in the release namespace', async (t) => {
    const objects: KubeObject[] = await renderer.helmTemplate({ stargate: { namespace: 'llm' }, peerDiscovery: { enabled: true } })
    t.same(ofKind(objects, 'Role').map((r) => `${r.metadata.namespace}/${r.metadata.name}`).sort(), [`llm/${FULLNAME}`, `${NAMESPACE}/${FULLNAME}-peers`])
    t.equal(endpointSliceRulesIn(objects, 'llm'), 1, 'Stargate discovery in llm')
    t.equal(endpointSliceRulesIn(objects, NAMESPACE), 1, 'peer discovery in the release namespace')
    assertMinimalRbac(t, objects, NAMESPACE)
    const without = await renderer.helmTemplate({ stargate: { namespace: 'llm' } })
    t.same(ofKind(without, 'Role').map((r) => `${r.metadata.namespace}/${r.metadata.name}`), [`llm/${FULLNAME}`], 'and none while disabled')
  })
}
