/**
 * Typed configuration: argv + environment -> Config, validated once at start-up.
 * Invalid input is a ConfigError whose message is the single line the process prints
 * before exiting with code 2 (SPEC §2).
 */
import { parseArgs } from 'node:util'
import { FLAGS, type FlagSpec } from './flags.ts'
import { compileHostnameTemplate } from '../routing/hostname-template.ts'

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
  readonly pylonGrpcDialAddr: string
  readonly remoteWatchUrls: readonly string[]
  readonly watchHeartbeatMs: number
  readonly connectTimeoutMs: number
  readonly drainGraceMs: number
  readonly grpcMaxMessageBytes: number
  readonly relayIdleTimeoutMs: number
  readonly relayKeepAliveMs: number
  readonly tunnelProtocol: 'raw-quic' | 'webtransport'
  readonly quicRetry: boolean
  readonly quicMaxConnections: number
  readonly httpMaxBodyBytes: number
  readonly httpHeadersTimeoutMs: number
  readonly httpIdleTimeoutMs: number
  readonly httpRequestTimeoutMs: number
  readonly shutdownDrainMs: number
  readonly http2MaxConcurrentStreams: number
  readonly http2MaxHeaderListBytes: number
  readonly tlsCertPath: string | null
  readonly tlsKeyPath: string | null
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
  /** Namespace of --peer-service: POD_NAMESPACE (the router's own), else --target-namespace. */
  readonly peerNamespace: string
  /** This replica's address and Pod name (downward API POD_IP, POD_NAME), to exclude itself from its peers. */
  readonly podIp: string | null
  readonly podName: string | null
  readonly logLevel: string
  readonly logFormat: 'json' | 'pretty'
  // Tunnel port defences (issue 15)
  readonly quicRetryThreshold: number
  readonly quicMaxHandshakesPerAddress: number
}

export class ConfigError extends Error {
  readonly flag: string
  constructor (flag: string, message: string) {
    super(message)
    this.name = 'ConfigError'
    this.flag = flag
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
    throw new ConfigError('argv', `${message.replace(/^./, (c) => c.toLowerCase())}; run with --help to list the flags`)
  }
  if (values.help === true) return { kind: 'help', text: helpText() }

  const get = (name: string): { value: string | boolean | readonly string[] | undefined, from: string } => {
    const spec = FLAGS.find((f) => f.name === name)
    if (spec === undefined) throw new Error(`unknown flag ${name}`)
    const fromArgv = values[name]
    if (fromArgv !== undefined) return { value: fromArgv, from: `--${name}` }
    const fromEnv = readEnv(spec, env)
    if (fromEnv !== undefined) {
      if (spec.kind === 'list') return { value: fromEnv.value.split(',').map((s) => s.trim()).filter((s) => s !== ''), from: fromEnv.from }
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
      throw new ConfigError(name, `invalid --${name} '${value}': must be one of ${spec.choices.join(', ')}`)
    }
    return value
  }
  const int = (name: string, min: number, max: number): number | null => {
    const { value } = get(name)
    if (typeof value !== 'string') return null
    if (!/^\d+$/.test(value)) throw new ConfigError(name, `invalid --${name} '${value}': expected a whole number`)
    const n = Number(value)
    if (n < min || n > max) throw new ConfigError(name, `invalid --${name} ${n}: must be between ${min} and ${max}`)
    return n
  }
  const bool = (name: string): boolean => get(name).value === true
  const list = (name: string): readonly string[] => {
    const { value } = get(name)
    return Array.isArray(value) ? value : []
  }
  const required = (name: string, value: string | null, fix: string): string => {
    if (value === null || value === '') throw new ConfigError(name, `missing --${name}: ${fix}`)
    return value
  }

  const MAX_MS = 24 * 3600 * 1000
  const listenAddr = parseListenAddress('listen-addr', required('listen-addr', str('listen-addr'), 'give host:port'))
  const discovery = str('discovery') as Config['discovery']
  const targetNamespace = str('target-namespace') ?? ''
  if (discovery === 'kubernetes' && targetNamespace === '') {
    throw new ConfigError('target-namespace', 'missing --target-namespace: set it or POD_NAMESPACE (the downward API provides it in a pod)')
  }
  const targetsFile = str('targets-file')
  if (discovery === 'file' && (targetsFile === null || targetsFile === '')) {
    throw new ConfigError('targets-file', 'missing --targets-file: --discovery file needs a YAML or JSON file of targets')
  }
  const template = required('advertised-hostname-template', str('advertised-hostname-template'), 'give a template such as {pod_name}.stargate.example')
  const compiled = compileHostnameTemplate(template, targetNamespace === '' ? 'default' : targetNamespace)
  if (!compiled.ok) throw new ConfigError('advertised-hostname-template', `invalid --advertised-hostname-template: ${compiled.message}`)

  const relayIdleTimeoutMs = int('relay-idle-timeout-ms', 1, MAX_MS) ?? 300000
  const relayKeepAliveMs = int('relay-keep-alive-ms', 0, MAX_MS) ?? 10000
  if (relayKeepAliveMs !== 0 && relayKeepAliveMs >= relayIdleTimeoutMs) {
    throw new ConfigError('relay-keep-alive-ms', `invalid --relay-keep-alive-ms ${relayKeepAliveMs}: must be less than --relay-idle-timeout-ms ${relayIdleTimeoutMs} (or 0 to disable keep-alive)`)
  }
  const tlsCertPath = emptyToNull(str('tls-cert-path'))
  const tlsKeyPath = emptyToNull(str('tls-key-path'))
  if ((tlsCertPath === null) !== (tlsKeyPath === null)) {
    const missing = tlsCertPath === null ? 'tls-cert-path' : 'tls-key-path'
    throw new ConfigError(missing, `missing --${missing}: --tls-cert-path and --tls-key-path must be given together`)
  }
  const clientCaPath = emptyToNull(str('client-ca-path'))
  if (clientCaPath !== null && tlsCertPath === null) {
    throw new ConfigError('client-ca-path', 'invalid --client-ca-path: client certificate verification needs a server identity; also set --tls-cert-path and --tls-key-path')
  }
  const enablePeerDiscovery = bool('enable-peer-discovery')
  const peerService = emptyToNull(str('peer-service'))
  const peersFile = emptyToNull(str('peers-file'))
  const podIp = emptyToNull(env.POD_IP ?? null)
  const podName = emptyToNull(env.POD_NAME ?? null)
  if (enablePeerDiscovery) {
    if (peerService === null && peersFile === null) {
      throw new ConfigError('peer-service', 'missing --peer-service: --enable-peer-discovery needs the router\'s own Service name (or --peers-file without Kubernetes)')
    }
    if (peerService !== null && peersFile !== null) {
      throw new ConfigError('peers-file', 'invalid --peers-file: give --peer-service or --peers-file, not both')
    }
    if (peerService !== null && !DNS_LABEL.test(peerService)) {
      throw new ConfigError('peer-service', `invalid --peer-service '${peerService}': must be a Service name (a lower-case DNS label such as stargate-router)`)
    }
    if (peerService !== null && podIp === null && podName === null) {
      throw new ConfigError('enable-peer-discovery', 'invalid --enable-peer-discovery: set POD_IP or POD_NAME from the downward API (status.podIP, metadata.name) so the replica can exclude itself from its peers')
    }
  }
  for (const url of list('remote-watch-url')) {
    // URL.canParse alone accepts 'router.example:50071' (scheme 'router.example:'); Pylons dial these.
    const parsedUrl = URL.parse(url)
    if (parsedUrl === null || (parsedUrl.protocol !== 'http:' && parsedUrl.protocol !== 'https:') || parsedUrl.hostname === '') throw new ConfigError('remote-watch-url', `invalid --remote-watch-url '${url}': expected an http:// or https:// URL such as https://router.other-cluster.example:50071`)
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
    maxSnapshotStalenessMs: int('max-snapshot-staleness-ms', 0, MAX_MS) ?? 0,
    advertisedHostnameTemplate: template,
    advertisedGrpcPort: int('advertised-grpc-port', 1, 65535) ?? listenAddr.port,
    pylonGrpcDialAddr: str('pylon-grpc-dial-addr') ?? '',
    remoteWatchUrls: list('remote-watch-url'),
    watchHeartbeatMs: int('watch-heartbeat-ms', 0, MAX_MS) ?? 5000,
    connectTimeoutMs: int('connect-timeout-ms', 1, MAX_MS) ?? 5000,
    drainGraceMs: int('drain-grace-ms', 0, MAX_MS) ?? 30000,
    grpcMaxMessageBytes: int('grpc-max-message-bytes', 1024, 64 * 1024 * 1024) ?? 4194304,
    relayIdleTimeoutMs,
    relayKeepAliveMs,
    tunnelProtocol: str('tunnel-protocol') as Config['tunnelProtocol'],
    quicRetry: bool('quic-retry'),
    quicMaxConnections: int('quic-max-connections', 1, 1_000_000) ?? 10000,
    httpMaxBodyBytes: int('http-max-body-bytes', 0, 2 ** 40) ?? 33554432,
    httpHeadersTimeoutMs: int('http-headers-timeout-ms', 1, MAX_MS) ?? 30000,
    httpIdleTimeoutMs: int('http-idle-timeout-ms', 1, MAX_MS) ?? 300000,
    httpRequestTimeoutMs: int('http-request-timeout-ms', 0, MAX_MS) ?? 0,
    shutdownDrainMs: int('shutdown-drain-ms', 0, MAX_MS) ?? 25000,
    http2MaxConcurrentStreams: int('http2-max-concurrent-streams', 1, 1_000_000) ?? 1000,
    http2MaxHeaderListBytes: int('http2-max-header-list-bytes', 1024, 1024 * 1024) ?? 16384,
    tlsCertPath,
    tlsKeyPath,
    clientCaPath,
    upstreamTls: bool('upstream-tls'),
    upstreamTlsCertPath: emptyToNull(str('upstream-tls-cert-path')),
    quicInsecure: bool('quic-insecure'),
    tlsPollIntervalMs: int('tls-poll-interval-ms', 1000, MAX_MS) ?? 300000,
    tlsDebounceMs: int('tls-debounce-ms', 0, 60000) ?? 200,
    enablePeerDiscovery,
    peerService,
    peersFile,
    peerHealthPortName: required('peer-health-port-name', str('peer-health-port-name'), 'name the peers\' health port'),
    peerHealthPort: int('peer-health-port', 1, 65535) ?? 8080,
    peerCheckIntervalMs: int('peer-check-interval-ms', 100, MAX_MS) ?? 10000,
    peerCheckTimeoutMs: int('peer-check-timeout-ms', 10, MAX_MS) ?? 2000,
    peerDivergenceGraceMs: int('peer-divergence-grace-ms', 0, MAX_MS) ?? 30000,
    peerNamespace: emptyToNull(env.POD_NAMESPACE ?? null) ?? (targetNamespace === '' ? 'default' : targetNamespace),
    podIp,
    podName,
    logLevel: str('log-level') ?? 'info',
    logFormat: str('log-format') as Config['logFormat'],
    // Tunnel port defences (issue 15)
    quicRetryThreshold: int('quic-retry-threshold', 1, 1_000_000) ?? 500,
    quicMaxHandshakesPerAddress: int('quic-max-handshakes-per-address', 1, 1_000_000) ?? 64,
  }
  return { kind: 'config', config }
}

/** A Service name (RFC 1035 label), as Kubernetes validates it. */
const DNS_LABEL = /^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/

function emptyToNull (value: string | null): string | null {
  return value === null || value === '' ? null : value
}

function parseBool (flagName: string, envName: string, value: string): boolean {
  switch (value.toLowerCase()) {
    case 'true': case '1': case 'yes': return true
    case 'false': case '0': case 'no': return false
    default: throw new ConfigError(flagName, `invalid --${flagName} (${envName}) '${value}': expected true or false`)
  }
}

/** host:port or [v6]:port; the port may be 0 (tests bind an ephemeral port). */
export function parseListenAddress (flagName: string, value: string): ListenAddress {
  const fail = (why: string): never => {
    throw new ConfigError(flagName, `invalid --${flagName} '${value}': ${why}; expected host:port such as 0.0.0.0:50071 or [::]:50071`)
  }
  let host: string
  let portText: string
  if (value.startsWith('[')) {
    const close = value.indexOf(']')
    if (close < 0) return fail('unterminated IPv6 address')
    if (value[close + 1] !== ':') return fail('no port')
    host = value.slice(1, close)
    portText = value.slice(close + 2)
  } else {
    const colon = value.lastIndexOf(':')
    if (colon < 0) return fail('no port')
    if (colon === 0) return fail('no host')
    host = value.slice(0, colon)
    portText = value.slice(colon + 1)
    if (host.includes(':')) return fail('IPv6 addresses need brackets')
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
    const value = spec.kind === 'bool' ? '' : spec.kind === 'int' ? ' <ms|n>' : ' <value>'
    const def = spec.default === undefined || spec.default === '' ? '' : ` (default ${spec.default})`
    const choices = spec.choices === undefined ? '' : ` [${spec.choices.join('|')}]`
    lines.push(`  --${spec.name}${value}${choices}${def}`)
    lines.push(`      ${spec.help}; env ${spec.env.join(', ')}`)
  }
  lines.push('  --help', '      print this text')
  return lines.join('\n') + '\n'
}
