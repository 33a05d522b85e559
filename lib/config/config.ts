/**
 * Typed configuration: argv + environment -> Config, validated once at start-up.
 * Invalid input is a ConfigError whose message is the single line the process prints
 * before exiting (SPEC §2), with the Rust router's exit codes: 2 for a usage error (an
 * unknown flag, a flag without its value, a value that is not of the flag's type, a
 * missing required flag), 1 for a configuration that parses but is invalid.
 */
import { parseArgs } from 'node:util'
import { FLAGS, type FlagSpec } from './flags.ts'
import { checkExplicitUri, describeUriProblem } from './explicit-uri.ts'
import { compileHostnameTemplate } from '../routing/hostname-template.ts'
import { parseCidr } from '../http-forward/trusted-proxies.ts'
import { STARTUP_ERRORS } from './errors.ts'
import { splitHostPort } from '../host-port.ts'
import { isServiceName } from '../dns-name.ts'

export interface ListenAddress {
  readonly host: string
  readonly port: number
}

export interface Config {
  readonly listenAddr: ListenAddress
  readonly reverseTunnelListenAddr: ListenAddress
  readonly healthListenAddr: ListenAddress
  readonly discovery: 'kubernetes' | 'file'
  readonly targetNamespace: string
  readonly targetServiceName: string
  readonly targetsFile: string | null
  readonly grpcPortName: string
  readonly quicPortName: string
  readonly httpPortName: string
  readonly maxSnapshotStalenessMs: number
  readonly advertisedHostnameTemplate: string
  readonly advertisedGrpcPort: number
  /** Written into every StargateInfo.grpc_pylon_dial_addr, verbatim. */
  readonly grpcPylonDialAddr: string
  /** Sorted and deduplicated: watch_stargate_urls as sent. */
  readonly remoteStargateUrls: readonly string[]
  readonly allowInsecureRemoteWatchHttp: boolean
  readonly watchHeartbeatMs: number
  readonly connectTimeoutMs: number
  readonly drainGraceMs: number
  readonly grpcMaxMessageBytes: number
  readonly relayIdleTimeoutMs: number
  readonly relayKeepAliveMs: number
  readonly tunnelProtocol: 'raw-quic' | 'webtransport'
  readonly quicRetry: boolean
  readonly quicMaxConnections: number
  readonly webtransportMaxSessionsPerConnection: number
  readonly webtransportMaxSessions: number
  readonly httpMaxBodyBytes: number
  readonly httpHeadersTimeoutMs: number
  readonly httpIdleTimeoutMs: number
  readonly httpRequestTimeoutMs: number
  readonly shutdownDrainTimeoutMs: number
  readonly http2MaxConcurrentStreams: number
  readonly http2MaxHeaderListBytes: number
  readonly tlsCertPath: string | null
  readonly tlsKeyPath: string | null
  /** TLS on the front door, with the --tls-cert-path identity; false serves h2c + HTTP/1.1. */
  readonly frontDoorTls: boolean
  readonly clientCaPath: string | null
  readonly upstreamTls: boolean
  readonly upstreamTlsCertPath: string | null
  readonly quicInsecure: boolean
  readonly tlsPollIntervalMs: number
  readonly tlsDebounceMs: number
  readonly enablePeerDiscovery: boolean
  readonly peerService: string | null
  readonly peersFile: string | null
  readonly peerHealthPortName: string
  readonly peerHealthPort: number
  readonly peerCheckIntervalMs: number
  readonly peerCheckTimeoutMs: number
  readonly peerDivergenceGraceMs: number
  /** Replica balancing of Pylon connections (SPEC §10); needs peer discovery. */
  readonly rebalance: boolean
  /** Half-width of the band as a fraction of the mean, 0 < t < 1. */
  readonly rebalanceTolerance: number
  readonly rebalanceIntervalMs: number
  /** Per kind and interval; 0 is a tenth of this replica's connections of that kind. */
  readonly rebalanceMaxMovesPerInterval: number
  /** Namespace of --peer-service: POD_NAMESPACE (the router's own), else --target-namespace. */
  readonly peerNamespace: string
  /** This replica's address and Pod name (downward API POD_IP, POD_NAME), to exclude itself from its peers. */
  readonly podIp: string | null
  readonly podName: string | null
  readonly logLevel: string
  readonly logFormat: 'json' | 'pretty'
  // Tunnel port defences
  readonly quicRetryThreshold: number
  readonly quicMaxHandshakesPerAddress: number
  // Limits and timeouts
  readonly httpUpstreamMaxConnections: number
  readonly httpUpstreamMaxQueue: number
  readonly trustedProxyCidrs: readonly string[]
  // Slow clients (SPEC §12)
  readonly httpBodyBufferBytes: number
  readonly httpBodyMinBytesPerSecond: number
  readonly httpBodyRateWindowMs: number
  readonly httpBodyDeadlineMs: number
  readonly httpResponseStallTimeoutMs: number
  readonly httpUpstreamMaxClientSharePercent: number
  readonly upstreamTlsSystemCa: boolean
  readonly frontDoorMaxConnections: number
  readonly httpKeepAliveTimeoutMs: number
  readonly http2SessionIdleTimeoutMs: number
  readonly tlsHandshakeTimeoutMs: number
  readonly nativeHeapTrimThresholdBytes: number
  readonly nativeHeapCheckIntervalMs: number
}

/**
 * usage: the command line or an environment variable cannot be read as the flags' types
 * (exit 2, as clap's usage errors); invalid: it can, but the configuration is not usable
 * (exit 1, as the Rust router's start-up errors).
 */
export type ConfigErrorKind = 'usage' | 'invalid'

export class ConfigError extends Error {
  readonly kind: ConfigErrorKind
  readonly flag: string
  constructor (kind: ConfigErrorKind, flag: string, message: string) {
    super(message)
    this.name = 'ConfigError'
    this.kind = kind
    this.flag = flag
  }

  get exitCode (): 1 | 2 {
    return STARTUP_ERRORS[this.kind].exit
  }
}

export type ParseResult =
  | { readonly kind: 'config', readonly config: Config }
  | { readonly kind: 'help', readonly text: string }

type RawValue = string | boolean | string[] | undefined

function readEnv (spec: FlagSpec, env: NodeJS.ProcessEnv): { value: string, from: string } | undefined {
  for (const name of spec.env) {
    const value = env[name]
    if (value !== undefined && value !== '') return { value, from: name }
  }
  return undefined
}

/** Parses argv (without node and script) and env; throws ConfigError on invalid input. */
export function parseConfig (argv: readonly string[], env: NodeJS.ProcessEnv): ParseResult {
  const options: Record<string, { type: 'string' | 'boolean', multiple?: boolean }> = { help: { type: 'boolean' } }
  for (const spec of FLAGS) {
    options[spec.name] = spec.kind === 'bool'
      ? { type: 'boolean' }
      : spec.kind === 'list' ? { type: 'string', multiple: true } : { type: 'string' }
  }
  let values: Record<string, RawValue>
  try {
    values = parseArgs({ args: [...argv], options, strict: true, allowPositionals: false }).values as Record<string, RawValue>
  } catch (err) {
    const message = (err as Error).message.split('\n')[0] ?? 'invalid arguments'
    throw new ConfigError('usage', 'argv', `${message.replace(/^./, (c) => c.toLowerCase())}; run with --help to list the flags`)
  }
  if (values.help === true) return { kind: 'help', text: helpText() }

  const get = (name: string): { value: string | boolean | readonly string[] | undefined, from: string } => {
    const spec = FLAGS.find((f) => f.name === name)
    if (spec === undefined) throw new Error(`unknown flag ${name}`)
    const fromArgv = values[name]
    // Comma-delimited on the command line too, as clap's value_delimiter reads it.
    if (fromArgv !== undefined) return { value: Array.isArray(fromArgv) ? splitList(fromArgv) : fromArgv, from: `--${name}` }
    const fromEnv = readEnv(spec, env)
    if (fromEnv !== undefined) {
      if (spec.kind === 'list') return { value: splitList([fromEnv.value]), from: fromEnv.from }
      if (spec.kind === 'bool') return { value: parseBool(name, fromEnv.from, fromEnv.value), from: fromEnv.from }
      return { value: fromEnv.value, from: fromEnv.from }
    }
    if (spec.kind === 'bool') return { value: spec.default === 'true', from: 'default' }
    if (spec.kind === 'list') return { value: [], from: 'default' }
    return { value: spec.default, from: 'default' }
  }
  const str = (name: string): string | null => {
    const { value } = get(name)
    if (typeof value !== 'string') return null
    const spec = FLAGS.find((f) => f.name === name)
    if (spec?.choices !== undefined && !spec.choices.includes(value)) {
      throw new ConfigError('usage', name, `invalid --${name} '${value}': must be one of ${spec.choices.join(', ')}`)
    }
    return value
  }
  const int = (name: string, min: number, max: number): number | null => {
    const { value } = get(name)
    if (typeof value !== 'string') return null
    if (!/^\d+$/.test(value)) throw new ConfigError('usage', name, `invalid --${name} '${value}': expected a whole number`)
    const n = Number(value)
    if (n < min || n > max) throw new ConfigError('invalid', name, `invalid --${name} ${n}: must be between ${min} and ${max}`)
    return n
  }
  // The flag table holds every default (lib/config/flags.ts); these read a flag that has one,
  // so there is no second copy of the number here to drift from the docs.
  const defaultedInt = (name: string, min: number, max: number): number => {
    const n = int(name, min, max)
    if (n === null) throw new Error(`flag ${name} has no default in lib/config/flags.ts`)
    return n
  }
  const defaultedStr = (name: string): string => {
    const value = str(name)
    if (value === null) throw new Error(`flag ${name} has no default in lib/config/flags.ts`)
    return value
  }
  /** A decimal flag with a default; bounds exclusive (a fraction strictly between them). */
  const defaultedFraction = (name: string, above: number, below: number): number => {
    const { value } = get(name)
    if (typeof value !== 'string') throw new Error(`flag ${name} has no default in lib/config/flags.ts`)
    const n = Number(value)
    if (!(n > above && n < below)) throw new ConfigError('invalid', name, `invalid --${name} ${value}: must be above ${above} and below ${below}, e.g. 0.2`)
    return n
  }
  const bool = (name: string): boolean => get(name).value === true
  const required = (name: string, value: string | null, fix: string): string => {
    if (value === null || value === '') throw new ConfigError('usage', name, `missing --${name}: ${fix}`)
    return value
  }

  // Usage errors first (exit 2), in table order, as clap reports them before any validation.
  for (const spec of FLAGS) {
    const { value } = get(spec.name)
    if (typeof value !== 'string') continue
    if (spec.kind === 'int' && !/^\d+$/.test(value)) throw new ConfigError('usage', spec.name, `invalid --${spec.name} '${value}': expected a whole number`)
    if (spec.kind === 'number' && !DECIMAL.test(value)) throw new ConfigError('usage', spec.name, `invalid --${spec.name} '${value}': expected a number such as 0.2`)
    if (spec.kind === 'string') str(spec.name)
  }
  for (const name of ADDRESS_FLAGS) parseListenAddress(name, required(name, str(name), 'give host:port'))
  const discovery = str('discovery') as Config['discovery']
  const targetNamespace = str('target-namespace') ?? ''
  if (discovery === 'kubernetes' && targetNamespace === '') {
    throw new ConfigError('usage', 'target-namespace', 'missing --target-namespace: set it or POD_NAMESPACE (the downward API provides it in a pod)')
  }
  const targetsFile = str('targets-file')
  if (discovery === 'file' && (targetsFile === null || targetsFile === '')) {
    throw new ConfigError('usage', 'targets-file', 'missing --targets-file: --discovery file needs a YAML or JSON file of targets')
  }
  // Upstream's shared URI parser is a clap value parser: a malformed URI is a usage error.
  const dialRaw = str('grpc-pylon-dial-addr')
  const dialCheck = checkExplicitUri(required('grpc-pylon-dial-addr', dialRaw === null ? null : dialRaw.trim(),
    'give the http:// or https:// URI Pylons dial to reach the routers, e.g. https://stargate-router.example.com:443'))
  if (!dialCheck.ok) {
    throw new ConfigError('usage', 'grpc-pylon-dial-addr', `--grpc-pylon-dial-addr must be an explicit http:// or https:// URI: ${describeUriProblem(dialRaw ?? '', dialCheck.problem)}; e.g. https://stargate-router.example.com:443`)
  }
  const grpcPylonDialAddr = dialCheck.uri
  const remote = get('remote-stargate-url')
  const remoteSource = remote.from === '--remote-stargate-url' || remote.from === 'default' ? '--remote-stargate-url' : `--remote-stargate-url (${remote.from})`
  const remoteChecks = (Array.isArray(remote.value) ? remote.value as readonly string[] : []).map((url) => {
    const check = checkExplicitUri(url)
    if (!check.ok) {
      throw new ConfigError('usage', 'remote-stargate-url', `invalid ${remoteSource}: remote Watch URL must be an explicit http:// or https:// URI: ${describeUriProblem(url, check.problem)}; e.g. https://stargate-router.region-b.example.com:443`)
    }
    return check
  })

  // Then what parses but cannot work (exit 1).
  const MAX_MS = 24 * 3600 * 1000
  const listenAddr = parseListenAddress('listen-addr', required('listen-addr', str('listen-addr'), 'give host:port'))
  const template = required('advertised-hostname-template', str('advertised-hostname-template'), 'give a template such as {pod_name}.stargate.example')
  const compiled = compileHostnameTemplate(template, targetNamespace === '' ? 'default' : targetNamespace)
  if (!compiled.ok) throw new ConfigError('invalid', 'advertised-hostname-template', `invalid --advertised-hostname-template: ${compiled.message}`)

  const relayIdleTimeoutMs = defaultedInt('relay-idle-timeout-ms', 1, MAX_MS)
  const relayKeepAliveMs = defaultedInt('relay-keep-alive-ms', 0, MAX_MS)
  if (relayKeepAliveMs !== 0 && relayKeepAliveMs >= relayIdleTimeoutMs) {
    throw new ConfigError('invalid', 'relay-keep-alive-ms', `invalid --relay-keep-alive-ms ${relayKeepAliveMs}: must be less than --relay-idle-timeout-ms ${relayIdleTimeoutMs} (or 0 to disable keep-alive)`)
  }
  const tlsCertPath = emptyToNull(str('tls-cert-path'))
  const tlsKeyPath = emptyToNull(str('tls-key-path'))
  if ((tlsCertPath === null) !== (tlsKeyPath === null)) {
    const missing = tlsCertPath === null ? 'tls-cert-path' : 'tls-key-path'
    throw new ConfigError('invalid', missing, `missing --${missing}: --tls-cert-path and --tls-key-path must be given together`)
  }
  const clientCaPath = emptyToNull(str('client-ca-path'))
  if (clientCaPath !== null && tlsCertPath === null) {
    throw new ConfigError('invalid', 'client-ca-path', 'invalid --client-ca-path: client certificate verification needs a server identity; also set --tls-cert-path and --tls-key-path')
  }
  const frontDoorTls = bool('front-door-tls')
  if (frontDoorTls && tlsCertPath === null) {
    throw new ConfigError('invalid', 'front-door-tls', 'invalid --front-door-tls: TLS on the front door needs a server identity; also set --tls-cert-path and --tls-key-path (or leave TLS to the Gateway in front)')
  }
  const enablePeerDiscovery = bool('enable-peer-discovery')
  const peerService = emptyToNull(str('peer-service'))
  const peersFile = emptyToNull(str('peers-file'))
  const podIp = emptyToNull(env.POD_IP ?? null)
  const podName = emptyToNull(env.POD_NAME ?? null)
  if (enablePeerDiscovery) {
    if (peerService === null && peersFile === null) {
      throw new ConfigError('invalid', 'peer-service', 'missing --peer-service: --enable-peer-discovery needs the router\'s own Service name (or --peers-file without Kubernetes)')
    }
    if (peerService !== null && peersFile !== null) {
      throw new ConfigError('invalid', 'peers-file', 'invalid --peers-file: give --peer-service or --peers-file, not both')
    }
    if (peerService !== null && !isServiceName(peerService)) {
      throw new ConfigError('invalid', 'peer-service', `invalid --peer-service '${peerService}': must be a Service name (a lower-case DNS label such as stargate-router)`)
    }
    if (peerService !== null && podIp === null && podName === null) {
      throw new ConfigError('invalid', 'enable-peer-discovery', 'invalid --enable-peer-discovery: set POD_IP or POD_NAME from the downward API (status.podIP, metadata.name) so the replica can exclude itself from its peers')
    }
  }
  // Replica balancing reads the peers' load: without peer discovery it would see no peers and
  // never move anything, which is worse than a start-up error.
  const rebalance = bool('rebalance')
  if (rebalance && !enablePeerDiscovery) {
    throw new ConfigError('invalid', 'rebalance', 'invalid --rebalance: balancing reads the peers\' load; also set --enable-peer-discovery (with --peer-service, or --peers-file without Kubernetes)')
  }
  const rebalanceIntervalMs = defaultedInt('rebalance-interval-ms', 100, MAX_MS)
  const peerCheckTimeoutMs = defaultedInt('peer-check-timeout-ms', 10, MAX_MS)
  if (rebalance && rebalanceIntervalMs <= peerCheckTimeoutMs) {
    throw new ConfigError('invalid', 'rebalance-interval-ms', `invalid --rebalance-interval-ms ${rebalanceIntervalMs}: must be longer than --peer-check-timeout-ms ${peerCheckTimeoutMs} (every peer's load is read within one interval)`)
  }
  const allowInsecureRemoteWatchHttp = bool('allow-insecure-remote-watch-http')
  for (const check of remoteChecks) {
    if (check.scheme === 'http' && !allowInsecureRemoteWatchHttp) {
      throw new ConfigError('invalid', 'remote-stargate-url', `invalid ${remoteSource} '${check.uri}': http:// remote Watch URLs require --allow-insecure-remote-watch-http; use https:// or set that flag`)
    }
  }
  const remoteStargateUrls = remoteChecks.map((check) => check.uri)

  // Repeatable, and comma-separated (get() splits lists as clap's value_delimiter does).
  const trustedValue = get('trusted-proxy-cidrs').value
  const trustedProxyCidrs: readonly string[] = Array.isArray(trustedValue) ? trustedValue as readonly string[] : []
  for (const cidr of trustedProxyCidrs) {
    const parsedCidr = parseCidr(cidr)
    if (!parsedCidr.ok) throw new ConfigError('invalid', 'trusted-proxy-cidrs', `invalid --trusted-proxy-cidrs: ${parsedCidr.message}`)
  }

  // No silent fallback to the system CA store, which would trust any public certificate for a
  // pod address: that trust is asked for explicitly.
  const upstreamTlsSystemCa = bool('upstream-tls-system-ca')
  if (bool('upstream-tls') && !upstreamTlsSystemCa && emptyToNull(str('upstream-tls-cert-path')) === null && tlsCertPath === null) {
    throw new ConfigError('invalid', 'upstream-tls', 'invalid --upstream-tls: no trust bundle for Stargate certificates; set --upstream-tls-cert-path (or --tls-cert-path, whose certificate is then trusted), or --upstream-tls-system-ca to trust the system CA store')
  }

  const config: Config = {
    listenAddr,
    reverseTunnelListenAddr: parseListenAddress('reverse-tunnel-listen-addr', required('reverse-tunnel-listen-addr', str('reverse-tunnel-listen-addr'), 'give host:port')),
    healthListenAddr: parseListenAddress('health-listen-addr', required('health-listen-addr', str('health-listen-addr'), 'give host:port')),
    discovery,
    targetNamespace,
    targetServiceName: required('target-service-name', str('target-service-name'), 'name the Stargate Service'),
    targetsFile: emptyToNull(targetsFile),
    grpcPortName: required('grpc-port-name', str('grpc-port-name'), 'name the gRPC port'),
    quicPortName: required('quic-port-name', str('quic-port-name'), 'name the QUIC port'),
    httpPortName: required('http-port-name', str('http-port-name'), 'name the HTTP port'),
    maxSnapshotStalenessMs: defaultedInt('max-snapshot-staleness-ms', 0, MAX_MS),
    advertisedHostnameTemplate: template,
    advertisedGrpcPort: defaultedInt('advertised-grpc-port', 1, 65535),
    grpcPylonDialAddr,
    // Sorted and deduplicated once here, as the Rust router sends them.
    remoteStargateUrls: [...new Set(remoteStargateUrls)].sort(),
    allowInsecureRemoteWatchHttp,
    watchHeartbeatMs: defaultedInt('watch-heartbeat-ms', 1, MAX_MS),
    connectTimeoutMs: defaultedInt('connect-timeout-ms', 1, MAX_MS),
    drainGraceMs: defaultedInt('drain-grace-ms', 0, MAX_MS),
    grpcMaxMessageBytes: defaultedInt('grpc-max-message-bytes', 1024, 64 * 1024 * 1024),
    relayIdleTimeoutMs,
    relayKeepAliveMs,
    tunnelProtocol: str('tunnel-protocol') as Config['tunnelProtocol'],
    quicRetry: bool('quic-retry'),
    quicMaxConnections: defaultedInt('quic-max-connections', 1, 1_000_000),
    webtransportMaxSessionsPerConnection: defaultedInt('webtransport-max-sessions-per-connection', 1, 1000),
    webtransportMaxSessions: defaultedInt('webtransport-max-sessions', 1, 1_000_000),
    httpMaxBodyBytes: defaultedInt('http-max-body-bytes', 0, 2 ** 40),
    httpHeadersTimeoutMs: defaultedInt('http-headers-timeout-ms', 1, MAX_MS),
    httpIdleTimeoutMs: defaultedInt('http-idle-timeout-ms', 1, MAX_MS),
    httpRequestTimeoutMs: defaultedInt('http-request-timeout-ms', 0, MAX_MS),
    shutdownDrainTimeoutMs: defaultedInt('shutdown-drain-timeout-ms', 1, MAX_MS),
    http2MaxConcurrentStreams: defaultedInt('http2-max-concurrent-streams', 1, 1_000_000),
    http2MaxHeaderListBytes: defaultedInt('http2-max-header-list-bytes', 1024, 1024 * 1024),
    tlsCertPath,
    tlsKeyPath,
    frontDoorTls,
    clientCaPath,
    upstreamTls: bool('upstream-tls'),
    upstreamTlsCertPath: emptyToNull(str('upstream-tls-cert-path')),
    quicInsecure: bool('quic-insecure'),
    tlsPollIntervalMs: defaultedInt('tls-poll-interval-ms', 1000, MAX_MS),
    tlsDebounceMs: defaultedInt('tls-debounce-ms', 0, 60000),
    enablePeerDiscovery,
    peerService,
    peersFile,
    peerHealthPortName: required('peer-health-port-name', str('peer-health-port-name'), 'name the peers\' health port'),
    peerHealthPort: defaultedInt('peer-health-port', 1, 65535),
    peerCheckIntervalMs: defaultedInt('peer-check-interval-ms', 100, MAX_MS),
    peerCheckTimeoutMs,
    peerDivergenceGraceMs: defaultedInt('peer-divergence-grace-ms', 0, MAX_MS),
    rebalance,
    rebalanceTolerance: defaultedFraction('rebalance-tolerance', 0, 1),
    rebalanceIntervalMs,
    rebalanceMaxMovesPerInterval: defaultedInt('rebalance-max-moves-per-interval', 0, 1_000_000),
    peerNamespace: emptyToNull(env.POD_NAMESPACE ?? null) ?? (targetNamespace === '' ? 'default' : targetNamespace),
    podIp,
    podName,
    logLevel: defaultedStr('log-level'),
    logFormat: str('log-format') as Config['logFormat'],
    // Tunnel port defences
    quicRetryThreshold: defaultedInt('quic-retry-threshold', 1, 1_000_000),
    quicMaxHandshakesPerAddress: defaultedInt('quic-max-handshakes-per-address', 1, 1_000_000),
    // Limits and timeouts
    httpUpstreamMaxConnections: defaultedInt('http-upstream-max-connections', 1, 100_000),
    httpUpstreamMaxQueue: defaultedInt('http-upstream-max-queue', 0, 1_000_000),
    trustedProxyCidrs,
    // Slow clients (SPEC §12)
    httpBodyBufferBytes: defaultedInt('http-body-buffer-bytes', 0, 16 * 1024 * 1024),
    httpBodyMinBytesPerSecond: defaultedInt('http-body-min-bytes-per-second', 0, 1_000_000_000),
    httpBodyRateWindowMs: defaultedInt('http-body-rate-window-ms', 100, MAX_MS),
    httpBodyDeadlineMs: defaultedInt('http-body-deadline-ms', 0, MAX_MS),
    httpResponseStallTimeoutMs: defaultedInt('http-response-stall-timeout-ms', 0, MAX_MS),
    httpUpstreamMaxClientSharePercent: defaultedInt('http-upstream-max-client-share-percent', 0, 100),
    upstreamTlsSystemCa,
    frontDoorMaxConnections: defaultedInt('front-door-max-connections', 1, 1_000_000),
    httpKeepAliveTimeoutMs: defaultedInt('http-keep-alive-timeout-ms', 100, MAX_MS),
    http2SessionIdleTimeoutMs: defaultedInt('http2-session-idle-timeout-ms', 100, MAX_MS),
    tlsHandshakeTimeoutMs: defaultedInt('tls-handshake-timeout-ms', 100, MAX_MS),
    nativeHeapTrimThresholdBytes: defaultedInt('native-heap-trim-threshold-bytes', 0, 2 ** 40),
    nativeHeapCheckIntervalMs: defaultedInt('native-heap-check-interval-ms', 100, MAX_MS),
  }
  return { kind: 'config', config }
}

/** Flags whose value is host:port (a SocketAddr in the Rust router: a malformed one is a usage error). */
const ADDRESS_FLAGS = ['listen-addr', 'reverse-tunnel-listen-addr', 'health-listen-addr'] as const

/** A plain decimal: digits with at most one point (no sign, exponent, or hex). */
const DECIMAL = /^(?:\d+(?:\.\d*)?|\.\d+)$/

/** List values, each split on commas, trimmed, empty entries dropped. */
function splitList (values: readonly string[]): string[] {
  return values.flatMap((v) => v.split(',')).map((s) => s.trim()).filter((s) => s !== '')
}

function emptyToNull (value: string | null): string | null {
  return value === null || value === '' ? null : value
}

function parseBool (flagName: string, envName: string, value: string): boolean {
  switch (value.toLowerCase()) {
    case 'true': case '1': case 'yes': return true
    case 'false': case '0': case 'no': return false
    default: throw new ConfigError('usage', flagName, `invalid --${flagName} (${envName}) '${value}': expected true or false`)
  }
}

/** host:port or [v6]:port; the port may be 0 (tests bind an ephemeral port). */
function parseListenAddress (flagName: string, value: string): ListenAddress {
  const fail = (why: string): never => {
    throw new ConfigError('usage', flagName, `invalid --${flagName} '${value}': ${why}; expected host:port such as 0.0.0.0:50071 or [::]:50071`)
  }
  const { host: written, port: portText } = splitHostPort(value)
  let host = written
  if (written.startsWith('[')) {
    if (!value.includes(']')) return fail('unterminated IPv6 address')
    if (portText === null || written.indexOf(']') !== written.length - 1) return fail('no port')
    host = written.slice(1, -1)
  } else {
    if (portText === null) return fail('no port')
    if (written === '') return fail('no host')
    if (written.includes(':')) return fail('IPv6 addresses need brackets')
  }
  if (!/^\d{1,5}$/.test(portText) || Number(portText) > 65535) return fail('port must be 0..65535')
  return { host, port: Number(portText) }
}

export function helpText (): string {
  const lines = [
    'stargate-router: routes Pylon registrations, reverse tunnels and LLM client requests to Stargate pods.',
    '',
    'usage: stargate-router [flags]   (every flag also reads STARGATE_<UPPER_SNAKE_NAME>)',
    '',
  ]
  for (const spec of FLAGS) {
    const value = spec.placeholder === undefined ? '' : ` <${spec.placeholder}>`
    const def = spec.default === undefined || spec.default === '' ? '' : ` (default ${spec.default})`
    const choices = spec.choices === undefined ? '' : ` [${spec.choices.join('|')}]`
    lines.push(`  --${spec.name}${value}${choices}${def}`)
    lines.push(`      ${spec.help}; env ${spec.env.join(', ')}`)
  }
  lines.push('  --help', '      print this text')
  return lines.join('\n') + '\n'
}
