// SPEC §2: flag defaults (the Rust router's names and defaults plus our own flags),
// the environment variables every flag reads, and which source wins.
import t from 'tap'
import { parseConfig, ConfigError, type Config } from '../../lib/config/config.ts'
import { FLAGS } from '../../lib/config/flags.ts'

function configOf (argv: readonly string[], env: NodeJS.ProcessEnv): Config {
  const result = parseConfig(argv, env)
  if (result.kind !== 'config') throw new Error(`expected a config, got ${result.kind}`)
  return result.config
}

/** The two settings without a default: the namespace and the URI Pylons dial. */
const DIAL = 'https://stargate-router.example.com:443'
const REQUIRED = { POD_NAMESPACE: 'stargate', STARGATE_GRPC_PYLON_DIAL_ADDR: DIAL }

const DEFAULTS: Config = {
  listenAddr: { host: '0.0.0.0', port: 50071 },
  reverseTunnelListenAddr: { host: '0.0.0.0', port: 50072 },
  healthListenAddr: { host: '0.0.0.0', port: 8080 },
  discovery: 'kubernetes',
  targetNamespace: 'stargate',
  targetServiceName: 'stargate-headless',
  targetsFile: null,
  grpcPortName: 'grpc',
  quicPortName: 'quic',
  httpPortName: 'http',
  maxSnapshotStalenessMs: 0,
  advertisedHostnameTemplate: '{pod_name}.stargate.external',
  advertisedGrpcPort: 50071,
  grpcPylonDialAddr: DIAL,
  remoteStargateUrls: [],
  allowInsecureRemoteWatchHttp: false,
  watchHeartbeatMs: 5000,
  connectTimeoutMs: 5000,
  drainGraceMs: 30000,
  grpcMaxMessageBytes: 4194304,
  quicRetry: false,
  quicMaxConnections: 10000,
  webtransportMaxSessionsPerConnection: 1,
  webtransportMaxSessions: 10000,
  httpMaxBodyBytes: 33554432,
  httpHeadersTimeoutMs: 30000,
  httpIdleTimeoutMs: 300000,
  httpRequestTimeoutMs: 0,
  http2MaxConcurrentStreams: 1000,
  http2MaxHeaderListBytes: 16384,
  peersFile: null,
  peerHealthPortName: 'health',
  peerHealthPort: 8080,
  peerCheckIntervalMs: 10000,
  peerCheckTimeoutMs: 2000,
  peerDivergenceGraceMs: 30000,
  rebalance: false,
  rebalanceTolerance: 0.2,
  rebalanceIntervalMs: 5000,
  rebalanceMaxMovesPerInterval: 0,
  peerNamespace: 'stargate',
  podIp: null,
  podName: null,
  relayIdleTimeoutMs: 300000,
  relayKeepAliveMs: 10000,
  tunnelProtocol: 'raw-quic',
  shutdownDrainTimeoutMs: 30000,
  tlsCertPath: null,
  tlsKeyPath: null,
  frontDoorTls: false,
  clientCaPath: null,
  upstreamTls: false,
  upstreamTlsCertPath: null,
  quicInsecure: false,
  tlsPollIntervalMs: 300000,
  tlsDebounceMs: 200,
  enablePeerDiscovery: false,
  peerService: null,
  logLevel: 'info',
  logFormat: 'json',
  // Tunnel port defences
  quicRetryThreshold: 500,
  quicMaxHandshakesPerAddress: 64,
  // Limits and timeouts
  httpUpstreamMaxConnections: 1024,
  httpUpstreamMaxQueue: 1024,
  trustedProxyCidrs: [],
  // Slow clients (SPEC §12)
  httpBodyBufferBytes: 65536,
  httpBodyMinBytesPerSecond: 1024,
  httpBodyRateWindowMs: 60000,
  httpBodyDeadlineMs: 900000,
  httpResponseStallTimeoutMs: 60000,
  httpUpstreamMaxClientSharePercent: 25,
  upstreamTlsSystemCa: false,
  frontDoorMaxConnections: 10000,
  httpKeepAliveTimeoutMs: 75000,
  http2SessionIdleTimeoutMs: 300000,
  tlsHandshakeTimeoutMs: 10000,
  nativeHeapTrimThresholdBytes: 67108864,
  nativeHeapCheckIntervalMs: 10000,
}

t.test('with only the namespace and the dial URI, every setting has the documented default', async (t) => {
  t.strictSame(configOf([], REQUIRED), DEFAULTS)
})

t.test('unrelated environment variables change nothing', async (t) => {
  t.strictSame(configOf([], { ...REQUIRED, PATH: '/usr/bin', STARGATE_UNKNOWN: 'x', HOME: '/root' }), DEFAULTS)
})

/**
 * One non-default value per flag, with the flags it needs to be valid. A flag added to the
 * table without a row here fails the completeness test below.
 */
const SAMPLES: Record<string, { value: string, expect: Partial<Config>, needs?: readonly string[] }> = {
  'listen-addr': { value: '127.0.0.1:9000', expect: { listenAddr: { host: '127.0.0.1', port: 9000 } } },
  'reverse-tunnel-listen-addr': { value: '[::]:9001', expect: { reverseTunnelListenAddr: { host: '::', port: 9001 } } },
  'health-listen-addr': { value: '127.0.0.2:9002', expect: { healthListenAddr: { host: '127.0.0.2', port: 9002 } } },
  discovery: { value: 'file', expect: { discovery: 'file', targetsFile: '/etc/targets.yaml' }, needs: ['--targets-file', '/etc/targets.yaml'] },
  'target-namespace': { value: 'other', expect: { targetNamespace: 'other' } },
  'target-service-name': { value: 'sg', expect: { targetServiceName: 'sg' } },
  'targets-file': { value: '/tmp/t.yaml', expect: { targetsFile: '/tmp/t.yaml' } },
  'grpc-port-name': { value: 'g', expect: { grpcPortName: 'g' } },
  'quic-port-name': { value: 'q', expect: { quicPortName: 'q' } },
  'http-port-name': { value: 'h', expect: { httpPortName: 'h' } },
  'max-snapshot-staleness-ms': { value: '60000', expect: { maxSnapshotStalenessMs: 60000 } },
  'advertised-hostname-template': { value: '{pod_name}.{namespace}.example', expect: { advertisedHostnameTemplate: '{pod_name}.{namespace}.example' } },
  'advertised-grpc-port': { value: '443', expect: { advertisedGrpcPort: 443 } },
  'grpc-pylon-dial-addr': { value: 'http://stargate-router.stargate.svc:50071', expect: { grpcPylonDialAddr: 'http://stargate-router.stargate.svc:50071' } },
  'remote-stargate-url': { value: 'https://a.example:50071', expect: { remoteStargateUrls: ['https://a.example:50071'] } },
  'allow-insecure-remote-watch-http': { value: 'true', expect: { allowInsecureRemoteWatchHttp: true } },
  'watch-heartbeat-ms': { value: '1', expect: { watchHeartbeatMs: 1 } },
  'connect-timeout-ms': { value: '1234', expect: { connectTimeoutMs: 1234 } },
  'drain-grace-ms': { value: '0', expect: { drainGraceMs: 0 } },
  'grpc-max-message-bytes': { value: '1024', expect: { grpcMaxMessageBytes: 1024 } },
  'quic-retry': { value: 'true', expect: { quicRetry: true } },
  'quic-max-connections': { value: '5', expect: { quicMaxConnections: 5 } },
  'webtransport-max-sessions-per-connection': { value: '3', expect: { webtransportMaxSessionsPerConnection: 3 } },
  'webtransport-max-sessions': { value: '7', expect: { webtransportMaxSessions: 7 } },
  'http-max-body-bytes': { value: '1024', expect: { httpMaxBodyBytes: 1024 } },
  'http-headers-timeout-ms': { value: '1000', expect: { httpHeadersTimeoutMs: 1000 } },
  'http-idle-timeout-ms': { value: '1000', expect: { httpIdleTimeoutMs: 1000 } },
  'http-request-timeout-ms': { value: '60000', expect: { httpRequestTimeoutMs: 60000 } },
  'http2-max-concurrent-streams': { value: '10', expect: { http2MaxConcurrentStreams: 10 } },
  'http2-max-header-list-bytes': { value: '8192', expect: { http2MaxHeaderListBytes: 8192 } },
  'relay-idle-timeout-ms': { value: '20000', expect: { relayIdleTimeoutMs: 20000 } },
  'relay-keep-alive-ms': { value: '0', expect: { relayKeepAliveMs: 0 } },
  'tunnel-protocol': { value: 'webtransport', expect: { tunnelProtocol: 'webtransport' } },
  'shutdown-drain-timeout-ms': { value: '100', expect: { shutdownDrainTimeoutMs: 100 } },
  'tls-cert-path': { value: '/tls/tls.crt', expect: { tlsCertPath: '/tls/tls.crt', tlsKeyPath: '/tls/tls.key' }, needs: ['--tls-key-path', '/tls/tls.key'] },
  'tls-key-path': { value: '/tls/tls.key', expect: { tlsCertPath: '/tls/tls.crt', tlsKeyPath: '/tls/tls.key' }, needs: ['--tls-cert-path', '/tls/tls.crt'] },
  'front-door-tls': {
    value: 'true',
    expect: { frontDoorTls: true, tlsCertPath: '/tls/tls.crt', tlsKeyPath: '/tls/tls.key' },
    needs: ['--tls-cert-path', '/tls/tls.crt', '--tls-key-path', '/tls/tls.key'],
  },
  'client-ca-path': {
    value: '/ca/ca.crt',
    expect: { clientCaPath: '/ca/ca.crt', tlsCertPath: '/tls/tls.crt', tlsKeyPath: '/tls/tls.key' },
    needs: ['--tls-cert-path', '/tls/tls.crt', '--tls-key-path', '/tls/tls.key'],
  },
  'upstream-tls': { value: 'true', expect: { upstreamTls: true, upstreamTlsCertPath: '/up/ca.crt' }, needs: ['--upstream-tls-cert-path', '/up/ca.crt'] },
  'upstream-tls-cert-path': { value: '/up/ca.crt', expect: { upstreamTlsCertPath: '/up/ca.crt' } },
  'quic-insecure': { value: 'true', expect: { quicInsecure: true } },
  'tls-poll-interval-ms': { value: '1000', expect: { tlsPollIntervalMs: 1000 } },
  'tls-debounce-ms': { value: '0', expect: { tlsDebounceMs: 0 } },
  'enable-peer-discovery': { value: 'true', expect: { enablePeerDiscovery: true, peersFile: '/etc/peers.yaml' }, needs: ['--peers-file', '/etc/peers.yaml'] },
  'peer-service': { value: 'router', expect: { peerService: 'router' } },
  'peers-file': { value: '/etc/peers.yaml', expect: { peersFile: '/etc/peers.yaml' } },
  'peer-health-port-name': { value: 'metrics', expect: { peerHealthPortName: 'metrics' } },
  'peer-health-port': { value: '9090', expect: { peerHealthPort: 9090 } },
  'peer-check-interval-ms': { value: '500', expect: { peerCheckIntervalMs: 500 } },
  'peer-check-timeout-ms': { value: '100', expect: { peerCheckTimeoutMs: 100 } },
  'peer-divergence-grace-ms': { value: '0', expect: { peerDivergenceGraceMs: 0 } },
  rebalance: { value: 'true', expect: { rebalance: true, enablePeerDiscovery: true, peersFile: '/etc/peers.yaml' }, needs: ['--enable-peer-discovery', '--peers-file', '/etc/peers.yaml'] },
  'rebalance-tolerance': { value: '0.35', expect: { rebalanceTolerance: 0.35 } },
  'rebalance-interval-ms': { value: '2500', expect: { rebalanceIntervalMs: 2500 } },
  'rebalance-max-moves-per-interval': { value: '3', expect: { rebalanceMaxMovesPerInterval: 3 } },
  'log-level': { value: 'debug', expect: { logLevel: 'debug' } },
  'log-format': { value: 'pretty', expect: { logFormat: 'pretty' } },
  // Tunnel port defences
  'quic-retry-threshold': { value: '50', expect: { quicRetryThreshold: 50 } },
  'quic-max-handshakes-per-address': { value: '8', expect: { quicMaxHandshakesPerAddress: 8 } },
  // Limits and timeouts
  'http-upstream-max-connections': { value: '8', expect: { httpUpstreamMaxConnections: 8 } },
  'http-upstream-max-queue': { value: '0', expect: { httpUpstreamMaxQueue: 0 } },
  'trusted-proxy-cidrs': { value: '10.0.0.0/8', expect: { trustedProxyCidrs: ['10.0.0.0/8'] } },
  'upstream-tls-system-ca': { value: 'true', expect: { upstreamTlsSystemCa: true } },
  'front-door-max-connections': { value: '500', expect: { frontDoorMaxConnections: 500 } },
  'http-keep-alive-timeout-ms': { value: '5000', expect: { httpKeepAliveTimeoutMs: 5000 } },
  'http2-session-idle-timeout-ms': { value: '60000', expect: { http2SessionIdleTimeoutMs: 60000 } },
  'tls-handshake-timeout-ms': { value: '3000', expect: { tlsHandshakeTimeoutMs: 3000 } },
  'native-heap-trim-threshold-bytes': { value: '0', expect: { nativeHeapTrimThresholdBytes: 0 } },
  'native-heap-check-interval-ms': { value: '500', expect: { nativeHeapCheckIntervalMs: 500 } },
  // Slow clients (SPEC §12)
  'http-body-buffer-bytes': { value: '0', expect: { httpBodyBufferBytes: 0 } },
  'http-body-min-bytes-per-second': { value: '0', expect: { httpBodyMinBytesPerSecond: 0 } },
  'http-body-rate-window-ms': { value: '5000', expect: { httpBodyRateWindowMs: 5000 } },
  'http-body-deadline-ms': { value: '0', expect: { httpBodyDeadlineMs: 0 } },
  'http-response-stall-timeout-ms': { value: '0', expect: { httpResponseStallTimeoutMs: 0 } },
  'http-upstream-max-client-share-percent': { value: '100', expect: { httpUpstreamMaxClientSharePercent: 100 } },
}

t.test('every flag in the table has a sample value in this test', async (t) => {
  t.strictSame(FLAGS.map((f) => f.name).filter((name) => SAMPLES[name] === undefined), [])
  t.strictSame(Object.keys(SAMPLES).filter((name) => !FLAGS.some((f) => f.name === name)), [])
})

t.test('every flag is read from argv and from its STARGATE_ environment variable alike', async (t) => {
  const base = REQUIRED
  for (const spec of FLAGS) {
    const sample = SAMPLES[spec.name]
    if (sample === undefined) continue
    const envName = 'STARGATE_' + spec.name.toUpperCase().replaceAll('-', '_')
    t.equal(spec.env[0], envName, `--${spec.name} reads ${envName} first`)
    const needs = sample.needs ?? []
    const argv = spec.kind === 'bool' ? [`--${spec.name}`, ...needs] : [`--${spec.name}`, sample.value, ...needs]
    const want = { ...DEFAULTS, ...sample.expect }
    t.strictSame(configOf(argv, base), want, `--${spec.name} on argv`)
    t.strictSame(configOf(needs, { ...base, [envName]: sample.value }), want, `--${spec.name} from ${envName}`)
  }
})

t.test('the Rust router\'s environment variable names are read', async (t) => {
  const base = REQUIRED
  t.equal(configOf([], { ...REQUIRED, POD_NAMESPACE: 'from-pod' }).targetNamespace, 'from-pod')
  t.strictSame(
    [configOf([], { ...base, STARGATE_TLS_CERT_PATH: '/c.pem', STARGATE_TLS_KEY_PATH: '/k.pem' })].map((c) => [c.tlsCertPath, c.tlsKeyPath]),
    [['/c.pem', '/k.pem']]
  )
  t.equal(configOf([], { ...base, STARGATE_QUIC_INSECURE: 'true' }).quicInsecure, true)
  t.equal(configOf([], { ...base, STARGATE_UPSTREAM_TLS_CERT_PATH: '/ca.pem' }).upstreamTlsCertPath, '/ca.pem')
  t.strictSame(configOf([], { ...base, STARGATE_REMOTE_WATCH_URLS: 'https://b.example,https://a.example' }).remoteStargateUrls, ['https://a.example', 'https://b.example'])
  t.equal(configOf([], { ...base, STARGATE_ALLOW_INSECURE_REMOTE_WATCH_HTTP: 'true' }).allowInsecureRemoteWatchHttp, true)
})

t.test('STARGATE_TARGET_NAMESPACE wins over POD_NAMESPACE', async (t) => {
  t.equal(configOf([], { ...REQUIRED, POD_NAMESPACE: 'pod-ns', STARGATE_TARGET_NAMESPACE: 'explicit' }).targetNamespace, 'explicit')
})

t.test('an empty environment variable counts as unset', async (t) => {
  t.equal(configOf([], { ...REQUIRED, STARGATE_CONNECT_TIMEOUT_MS: '' }).connectTimeoutMs, 5000)
  t.equal(configOf([], { ...REQUIRED, POD_NAMESPACE: 'ns', STARGATE_TARGET_NAMESPACE: '' }).targetNamespace, 'ns')
})

t.test('a flag on the command line beats its environment variable', async (t) => {
  const env = {
    ...REQUIRED,
    POD_NAMESPACE: 'pod-ns',
    STARGATE_CONNECT_TIMEOUT_MS: '1000',
    STARGATE_LISTEN_ADDR: '127.0.0.1:1111',
    STARGATE_REMOTE_WATCH_URLS: 'https://env.example',
    STARGATE_QUIC_INSECURE: 'false',
    STARGATE_TUNNEL_PROTOCOL: 'webtransport',
  }
  const config = configOf([
    '--connect-timeout-ms', '7000',
    '--listen-addr', '127.0.0.1:2222',
    '--remote-stargate-url', 'https://argv.example',
    '--grpc-pylon-dial-addr', 'https://argv-dial.example',
    '--quic-insecure',
    '--tunnel-protocol', 'raw-quic',
    '--target-namespace', 'argv-ns',
  ], env)
  t.equal(config.connectTimeoutMs, 7000)
  t.strictSame(config.listenAddr, { host: '127.0.0.1', port: 2222 })
  t.strictSame(config.remoteStargateUrls, ['https://argv.example'])
  t.equal(config.grpcPylonDialAddr, 'https://argv-dial.example')
  t.equal(config.quicInsecure, true)
  t.equal(config.tunnelProtocol, 'raw-quic')
  t.equal(config.targetNamespace, 'argv-ns')
})

t.test('--remote-stargate-url is repeatable, comma-delimited, and sent sorted and deduplicated', async (t) => {
  t.strictSame(
    configOf(['--remote-stargate-url', 'https://b.example:50071', '--remote-stargate-url', 'https://a.example:50071', '--remote-stargate-url', 'https://b.example:50071'], REQUIRED).remoteStargateUrls,
    ['https://a.example:50071', 'https://b.example:50071']
  )
  t.strictSame(
    configOf(['--remote-stargate-url', 'https://c.example,https://a.example'], REQUIRED).remoteStargateUrls,
    ['https://a.example', 'https://c.example']
  )
  t.strictSame(
    configOf([], { ...REQUIRED, STARGATE_REMOTE_WATCH_URLS: 'https://b.example:50071, https://a.example:50071,,https://a.example:50071' }).remoteStargateUrls,
    ['https://a.example:50071', 'https://b.example:50071']
  )
})

t.test('http:// remote URLs are accepted with --allow-insecure-remote-watch-http', async (t) => {
  t.strictSame(
    configOf(['--remote-stargate-url', 'http://router.west.example:50071', '--remote-stargate-url', 'https://router.east.example', '--allow-insecure-remote-watch-http'], REQUIRED).remoteStargateUrls,
    ['http://router.west.example:50071', 'https://router.east.example']
  )
})

t.test('--advertised-grpc-port defaults to 50071 whatever --listen-addr says, as in the Rust router', async (t) => {
  t.equal(configOf(['--listen-addr', '127.0.0.1:6000'], REQUIRED).advertisedGrpcPort, 50071)
  t.equal(configOf(['--listen-addr', '[::1]:0'], REQUIRED).advertisedGrpcPort, 50071)
  t.equal(configOf(['--listen-addr', '127.0.0.1:6000', '--advertised-grpc-port', '443'], REQUIRED).advertisedGrpcPort, 443)
})

t.test('--grpc-pylon-dial-addr is written as given, http or https, with or without a port or path', async (t) => {
  for (const value of ['https://gw.example.com', 'http://stargate-router.stargate.svc.cluster.local:50071', 'https://[2001:db8::1]:443', 'HTTPS://GW.example.com:443/']) {
    t.equal(configOf(['--grpc-pylon-dial-addr', value], REQUIRED).grpcPylonDialAddr, value, value)
  }
})

t.test('boolean environment variables accept true/false, 1/0 and yes/no in any case', async (t) => {
  const cases: Array<[string, boolean]> = [
    ['true', true], ['TRUE', true], ['True', true], ['1', true], ['yes', true], ['YES', true],
    ['false', false], ['FALSE', false], ['0', false], ['no', false], ['No', false],
  ]
  for (const [value, want] of cases) {
    t.equal(configOf([], { ...REQUIRED, STARGATE_QUIC_INSECURE: value }).quicInsecure, want, `STARGATE_QUIC_INSECURE=${value}`)
    t.equal(configOf([], { ...REQUIRED, STARGATE_UPSTREAM_TLS: value, STARGATE_UPSTREAM_TLS_SYSTEM_CA: 'true' }).upstreamTls, want, `STARGATE_UPSTREAM_TLS=${value}`)
  }
})

t.test('a boolean environment variable that is not a boolean names the flag and the variable', async (t) => {
  for (const value of ['maybe', '2', 'on', 'y']) {
    const err = t.throws(() => parseConfig([], { ...REQUIRED, STARGATE_QUIC_INSECURE: value })) as ConfigError
    t.ok(err instanceof ConfigError, value)
    t.equal(err.exitCode, 2, `${value}: a value not of the flag's type is a usage error`)
    t.equal(err.flag, 'quic-insecure', value)
    t.equal(err.message, `invalid --quic-insecure (STARGATE_QUIC_INSECURE) '${value}': expected true or false`)
  }
})

t.test('file discovery needs no namespace and uses the file', async (t) => {
  const config = configOf(['--discovery', 'file', '--targets-file', '/tmp/targets.yaml', '--grpc-pylon-dial-addr', DIAL], {})
  t.equal(config.discovery, 'file')
  t.equal(config.targetNamespace, '')
  t.equal(config.targetsFile, '/tmp/targets.yaml')
})
