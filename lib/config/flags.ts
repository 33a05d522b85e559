/**
 * The table of every command-line flag, its environment variables, default and help line.
 * It drives parsing, `--help`, and the consistency tests that keep .env.example and
 * docs/configuration.md in step with the code (SPEC §2). Names kept from the Rust
 * stargate-k8s-router must not change.
 */

export type FlagKind = 'string' | 'int' | 'number' | 'bool' | 'list'

export interface FlagSpec {
  /** Flag name without the leading dashes. */
  readonly name: string
  readonly kind: FlagKind
  /** Environment variables read when the flag is absent, in priority order. */
  readonly env: readonly string[]
  /** Default as the user would type it; `undefined` means unset. */
  readonly default: string | undefined
  readonly help: string
  /** Allowed values for enumerated string flags. */
  readonly choices?: readonly string[]
  /** What the value is, as `--help` shows it (`<port>`, `<ms>`); absent for booleans. */
  readonly placeholder?: string
}

/** STARGATE_ + upper-snake name, the rule of SPEC §2. */
function envNameOf (flag: string): string {
  return 'STARGATE_' + flag.toUpperCase().replaceAll('-', '_')
}

interface FlagExtra {
  /** Environment variables read after the STARGATE_ one. */
  readonly env?: readonly string[]
  readonly choices?: readonly string[]
  /** The value's placeholder in `--help`; default by kind (see flag()). */
  readonly placeholder?: string
}

/** `--help`'s placeholder for a flag without its own: a duration, a size, a count, text. */
function placeholderOf (name: string, kind: FlagKind): string | undefined {
  if (kind === 'bool') return undefined
  if (kind !== 'int') return 'value'
  if (name.endsWith('-ms')) return 'ms'
  if (name.endsWith('-bytes')) return 'bytes'
  return 'n'
}

function flag (name: string, kind: FlagKind, defaultValue: string | undefined, help: string, extra: FlagExtra): FlagSpec {
  const env = [envNameOf(name), ...(extra.env ?? [])]
  const placeholder = extra.placeholder ?? placeholderOf(name, kind)
  const spec: FlagSpec = placeholder === undefined ? { name, kind, env, default: defaultValue, help } : { name, kind, env, default: defaultValue, help, placeholder }
  return extra.choices === undefined ? spec : { ...spec, choices: extra.choices }
}

// One builder per kind, so a default is written as the value it is (the compiler checks that an
// int flag's default is a number and a bool's a boolean); the table stores it as typed on the
// command line, the form --help and the docs show.
function str (name: string, defaultValue: string | undefined, help: string, extra: FlagExtra = {}): FlagSpec {
  return flag(name, 'string', defaultValue, help, extra)
}

function int (name: string, defaultValue: number, help: string): FlagSpec {
  return flag(name, 'int', String(defaultValue), help, {})
}

/** A TCP or UDP port number: an int shown as `<port>`. */
function port (name: string, defaultValue: number, help: string): FlagSpec {
  return flag(name, 'int', String(defaultValue), help, { placeholder: 'port' })
}

/** A decimal such as 0.2 (a fraction). */
function num (name: string, defaultValue: number, help: string): FlagSpec {
  return flag(name, 'number', String(defaultValue), help, { placeholder: 'fraction' })
}

function bool (name: string, defaultValue: boolean, help: string): FlagSpec {
  return flag(name, 'bool', String(defaultValue), help, {})
}

/** Repeatable or comma-separated; empty by default. */
function list (name: string, help: string, extra: FlagExtra = {}): FlagSpec {
  return flag(name, 'list', undefined, help, extra)
}

export const FLAGS: readonly FlagSpec[] = [
  // Listeners (Rust names and defaults)
  str('listen-addr', '0.0.0.0:50071', 'front door (TCP): gRPC control plane and LLM client HTTP, cleartext h2c + HTTP/1.1 unless --front-door-tls', { placeholder: 'host:port' }),
  str('reverse-tunnel-listen-addr', '0.0.0.0:50072', 'reverse tunnels: QUIC on UDP, WebTransport over HTTP/2 on TCP with the same port', { placeholder: 'host:port' }),
  str('health-listen-addr', '0.0.0.0:8080', '/livez, /readyz, /metrics, /debug/* (plain HTTP)', { placeholder: 'host:port' }),

  // Discovery
  str('discovery', 'kubernetes', 'where targets come from: EndpointSlices of the target Service, or a file', { choices: ['kubernetes', 'file'] }),
  str('target-namespace', undefined, 'namespace of the Stargate Service (required with --discovery kubernetes)', { env: ['POD_NAMESPACE'] }),
  str('target-service-name', 'stargate-headless', 'Service whose EndpointSlices list the Stargate pods; may publish not-ready addresses (warming pods then take Pylons, never LLM client HTTP)'),
  str('targets-file', undefined, 'YAML or JSON file of targets, required with --discovery file'),
  str('grpc-port-name', 'grpc', 'EndpointSlice port name (TCP) of the Stargate gRPC port'),
  str('quic-port-name', 'quic', 'EndpointSlice port name (UDP) of the Stargate QUIC tunnel port'),
  str('http-port-name', 'http', 'EndpointSlice port name (TCP) of the Stargate HTTP port for LLM clients (optional per pod)'),
  int('max-snapshot-staleness-ms', 0, '/readyz fails when discovery has been broken for longer than this; 0 disables'),

  // Advertisement
  str('advertised-hostname-template', '{pod_name}.stargate.external', 'host advertised per pod and matched on :authority and SNI; must contain {pod_name}, may contain {namespace}'),
  port('advertised-grpc-port', 50071, 'port after the rendered host in advertise_addr, the :authority Pylons register with (> 0)'),
  str('grpc-pylon-dial-addr', undefined, 'required: the explicit http:// or https:// URI Pylons dial to reach the routers (e.g. the Gateway), written into every StargateInfo.grpc_pylon_dial_addr', { placeholder: 'uri' }),
  list('remote-stargate-url', 'repeatable (or comma-separated): an explicit http(s) URI of another region\'s WatchStargates, sent sorted and deduplicated in watch_stargate_urls', { env: ['STARGATE_REMOTE_WATCH_URLS'], placeholder: 'uri' }),
  bool('allow-insecure-remote-watch-http', false, 'allow http:// (cleartext) --remote-stargate-url values; without it they fail start-up'),
  int('watch-heartbeat-ms', 5000, 're-send the unchanged Stargate set to a watcher this long after its last message (> 0)'),

  // Forwarding and relaying
  int('connect-timeout-ms', 5000, 'timeout for connecting to a Stargate pod'),
  int('grpc-max-message-bytes', 4194304, 'largest gRPC message a Pylon may send on a registration stream (RESOURCE_EXHAUSTED above it)'),
  int('drain-grace-ms', 30000, 'how long a registration stream or a tunnel may outlive its pod terminating or leaving the Service (a pod that only turns unready keeps them)'),
  int('relay-idle-timeout-ms', 300000, 'idle timeout of relayed tunnel connections (> 0)'),
  int('relay-keep-alive-ms', 10000, 'keep-alive interval of relayed tunnel connections (< idle timeout; 0 disables)'),
  str('tunnel-protocol', 'raw-quic', 'reverse tunnel protocol on the tunnel port', { choices: ['raw-quic', 'webtransport'] }),
  bool('quic-retry', false, 'validate client addresses with a stateless QUIC Retry before accepting a tunnel (costs one round trip)'),
  int('quic-max-connections', 10000, 'most concurrent QUIC connections (handshaking or relaying) on the tunnel port'),

  // Tunnel port defences
  int('quic-retry-threshold', 500, 'half-open QUIC handshakes on the tunnel port above which every new client must first answer a stateless Retry'),
  int('quic-max-handshakes-per-address', 64, 'half-open QUIC handshakes one source address may hold before its new clients must answer a stateless Retry'),

  // LLM client HTTP forwarding
  int('http-max-body-bytes', 33554432, 'largest LLM client request body (413 payload_too_large above it)'),
  int('http-headers-timeout-ms', 30000, 'time for a client to send a request head (and for a new connection to send its first bytes), and for a pod to start its response (504 upstream_timeout)'),
  int('http-idle-timeout-ms', 300000, 'longest silence on a forwarded request or response body, e.g. between SSE tokens'),
  int('http-request-timeout-ms', 0, 'total time a forwarded request may take; 0 means no limit (LLM streams are long)'),
  int('http2-max-concurrent-streams', 1000, 'HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS advertised to clients of the front door'),
  int('http2-max-header-list-bytes', 16384, 'largest request header list on the front door (RFC 7541 size over HTTP/2, bytes over HTTP/1.1): 431 above it; HTTP/2 advertises twice it as SETTINGS_MAX_HEADER_LIST_SIZE, beyond which streams are reset'),
  int('shutdown-drain-timeout-ms', 30000, 'on SIGTERM, the longest open streams and requests may take to finish; the router exits as soon as none is left (> 0)'),

  // TLS
  str('tls-cert-path', undefined, 'server certificate chain (PEM) of the reverse tunnels (QUIC, WebTransport) and, with --front-door-tls, of the front door; without it the tunnels use a generated self-signed identity'),
  str('tls-key-path', undefined, 'private key (PEM) of --tls-cert-path; the two go together'),
  bool('front-door-tls', false, 'serve TLS (ALPN h2, http/1.1) on --listen-addr with the --tls-cert-path identity; off, the front door is cleartext h2c + HTTP/1.1 behind a TLS-terminating Gateway'),
  str('client-ca-path', undefined, 'CA bundle (PEM) for verifying Pylon client certificates (mTLS) on the tunnel port and, with --front-door-tls, the front door; needs --tls-cert-path'),
  bool('upstream-tls', false, 'dial Stargate pods over TLS (gRPC and HTTP)'),
  str('upstream-tls-cert-path', undefined, 'CA bundle (PEM) trusted when dialing Stargate pods (default: the router certificate file)'),
  bool('quic-insecure', false, 'do not verify Stargate certificates on the QUIC upstream leg'),
  int('tls-poll-interval-ms', 300000, 'reconciliation poll of mounted TLS material'),
  int('tls-debounce-ms', 200, 'debounce of TLS directory change events'),

  // Peers
  bool('enable-peer-discovery', false, 'discover router replicas and report Stargate snapshot divergence'),
  str('peer-service', undefined, 'the router\'s own Service, required with --enable-peer-discovery'),
  str('peers-file', undefined, 'YAML or JSON file of peer routers for runs without Kubernetes (instead of --peer-service)'),
  str('peer-health-port-name', 'health', 'EndpointSlice port name of the peers\' health port'),
  port('peer-health-port', 8080, 'health port of peers whose slice lacks --peer-health-port-name'),
  int('peer-check-interval-ms', 10000, 'how often each peer\'s /debug/snapshot is compared with ours'),
  int('peer-check-timeout-ms', 2000, 'timeout of one peer snapshot check'),
  int('peer-divergence-grace-ms', 30000, 'how long a peer\'s snapshot digest may differ from ours before it is reported divergent'),

  // Replica balancing (needs peer discovery)
  bool('rebalance', false, 'keep this replica\'s share of Pylon connections (registrations, tunnels) even with its peers by moving the oldest ones off a replica above the mean; needs --enable-peer-discovery'),
  num('rebalance-tolerance', 0.2, 'half-width of the balancing band as a fraction of the mean load (never less than one connection), above 0 and below 1'),
  int('rebalance-interval-ms', 5000, 'how often a replica compares its Pylon load with its peers\'; a replica outside the band for two intervals in a row starts moves'),
  int('rebalance-max-moves-per-interval', 0, 'most connections of each kind a replica moves in one interval; 0 is a tenth of its connections of that kind, rounded up'),

  // Limits and timeouts
  int('http-upstream-max-connections', 1024, 'most connections to one Stargate pod for LLM client requests'),
  int('http-upstream-max-queue', 1024, 'most LLM client requests waiting for a connection to one pod; beyond it 503 upstream_busy'),
  int('front-door-max-connections', 10000, 'most open TCP connections on the front door, and on the WebTransport-over-HTTP/2 listener of the tunnel port; more are closed at accept (see docs/configuration.md, memory bound)'),
  int('http-keep-alive-timeout-ms', 75000, 'front door: silence allowed on an HTTP/1.1 connection between requests (keep it above the idle timeout of a load balancer in front)'),
  int('http2-session-idle-timeout-ms', 300000, 'front door: an HTTP/2 connection with no open stream for this long gets GOAWAY'),
  int('tls-handshake-timeout-ms', 10000, 'front door and WebTransport-over-HTTP/2 listener: time for a client to complete the TLS handshake'),
  int('native-heap-trim-threshold-bytes', 67108864, 'resident memory neither allocated by malloc nor V8\'s heap that may build up (as after a wave of connections closed) before the router gives malloc\'s free pages back to the kernel; 0 never does'),
  int('native-heap-check-interval-ms', 10000, 'how often the router compares its resident memory with what it has allocated (>= 100)'),
  bool('upstream-tls-system-ca', false, 'with --upstream-tls, also trust the system CA store for Stargate certificates (without it a trust bundle is required)'),
  list('trusted-proxy-cidrs', 'repeatable or comma-separated: proxies (CIDR blocks or addresses) whose x-forwarded-for, forwarded and x-real-ip are believed; from other peers they are replaced'),

  // Slow clients (SPEC §12): what a client must do to hold a pod connection
  int('http-body-buffer-bytes', 65536, 'bytes of an LLM client request body read before a pod connection is taken: a body up to this size is forwarded whole once it is in, a larger one once this much is in; 0 takes the connection at the request head'),
  int('http-body-min-bytes-per-second', 1024, 'least average rate of an LLM client request body over each --http-body-rate-window-ms while it is incomplete (408 body_rate_too_low); 0 disables'),
  int('http-body-rate-window-ms', 60000, 'window over which --http-body-min-bytes-per-second is averaged (>= 100)'),
  int('http-body-deadline-ms', 900000, 'most time from an LLM client request head to the end of its body (408 body_deadline_exceeded); 0 disables'),
  int('http-response-stall-timeout-ms', 60000, 'longest the router waits on an LLM client to take response bytes while the pod has more (the client\'s connection is then closed and the pod\'s released); 0 disables'),
  int('http-upstream-max-client-share-percent', 25, 'percent of --http-upstream-max-connections one client address may hold or wait for at one pod (429 client_over_share); behind a proxy in --trusted-proxy-cidrs the client is the one x-forwarded-for names; 0 disables'),

  // WebTransport sessions
  int('webtransport-max-sessions-per-connection', 1, 'WebTransport sessions one Pylon connection may hold at once over HTTP/2 (429 above it; each has its own upstream connection); over HTTP/3 a connection carries one session, as the Rust router (a further request is reset with H3_REQUEST_REJECTED)'),
  int('webtransport-max-sessions', 10000, 'WebTransport sessions (waiting for the pod or bridged) the router holds at once (503 above it)'),

  // Logging
  str('log-level', 'info', 'pino log level', { choices: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] }),
  str('log-format', 'json', 'json lines, or pretty for humans', { choices: ['json', 'pretty'] }),
]
