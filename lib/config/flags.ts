/**
 * The table of every command-line flag, its environment variables, default and help line.
 * It drives parsing, `--help`, and the consistency tests that keep .env.example and
 * docs/configuration.md in step with the code (SPEC §2). Names kept from the Rust
 * stargate-k8s-router must not change.
 */

export type FlagKind = 'string' | 'int' | 'bool' | 'list'

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
}

/** STARGATE_ + upper-snake name, the rule of SPEC §2. */
function envNameOf (flag: string): string {
  return 'STARGATE_' + flag.toUpperCase().replaceAll('-', '_')
}

function flag (
  name: string,
  kind: FlagKind,
  defaultValue: string | undefined,
  help: string,
  extra: { env?: readonly string[], choices?: readonly string[] } = {}
): FlagSpec {
  const env = [envNameOf(name), ...(extra.env ?? [])]
  return extra.choices === undefined
    ? { name, kind, env, default: defaultValue, help }
    : { name, kind, env, default: defaultValue, help, choices: extra.choices }
}

export const FLAGS: readonly FlagSpec[] = [
  // Listeners (Rust names and defaults)
  flag('listen-addr', 'string', '0.0.0.0:50071', 'front door (TCP): gRPC control plane and LLM client HTTP, cleartext h2c + HTTP/1.1 unless --front-door-tls'),
  flag('reverse-tunnel-listen-addr', 'string', '0.0.0.0:50072', 'reverse tunnels: QUIC on UDP, WebTransport over HTTP/2 on TCP with the same port'),
  flag('health-listen-addr', 'string', '0.0.0.0:8080', '/livez, /readyz, /metrics, /debug/* (plain HTTP)'),

  // Discovery
  flag('discovery', 'string', 'kubernetes', 'where targets come from: EndpointSlices of the target Service, or a file', { choices: ['kubernetes', 'file'] }),
  flag('target-namespace', 'string', undefined, 'namespace of the Stargate Service (required with --discovery kubernetes)', { env: ['POD_NAMESPACE'] }),
  flag('target-service-name', 'string', 'stargate-headless', 'Service whose EndpointSlices list the Stargate pods (it must respect readiness)'),
  flag('targets-file', 'string', undefined, 'YAML or JSON file of targets, required with --discovery file'),
  flag('grpc-port-name', 'string', 'grpc', 'EndpointSlice port name (TCP) of the Stargate gRPC port'),
  flag('quic-port-name', 'string', 'quic', 'EndpointSlice port name (UDP) of the Stargate QUIC tunnel port'),
  flag('http-port-name', 'string', 'http', 'EndpointSlice port name (TCP) of the Stargate HTTP port for LLM clients (optional per pod)'),
  flag('max-snapshot-staleness-ms', 'int', '0', '/readyz fails when discovery has been broken for longer than this; 0 disables'),

  // Advertisement
  flag('advertised-hostname-template', 'string', '{pod_name}.stargate.external', 'host advertised per pod and matched on :authority and SNI; must contain {pod_name}, may contain {namespace}'),
  flag('advertised-grpc-port', 'int', '50071', 'port after the rendered host in advertise_addr, the :authority Pylons register with (> 0)'),
  flag('grpc-pylon-dial-addr', 'string', undefined, 'required: the explicit http:// or https:// URI Pylons dial to reach the routers (e.g. the Gateway), written into every StargateInfo.grpc_pylon_dial_addr'),
  flag('remote-stargate-url', 'list', undefined, 'repeatable (or comma-separated): an explicit http(s) URI of another region\'s WatchStargates, sent sorted and deduplicated in watch_stargate_urls', { env: ['STARGATE_REMOTE_WATCH_URLS'] }),
  flag('allow-insecure-remote-watch-http', 'bool', 'false', 'allow http:// (cleartext) --remote-stargate-url values; without it they fail start-up'),
  flag('watch-heartbeat-ms', 'int', '5000', 're-send the unchanged Stargate set to watchers at least this often (> 0)'),

  // Forwarding and relaying
  flag('connect-timeout-ms', 'int', '5000', 'timeout for connecting to a Stargate pod'),
  flag('grpc-max-message-bytes', 'int', '4194304', 'largest gRPC message a Pylon may send on a registration stream (RESOURCE_EXHAUSTED above it)'),
  flag('drain-grace-ms', 'int', '30000', 'how long a registration stream or a tunnel may outlive its target leaving the ready set'),
  flag('relay-idle-timeout-ms', 'int', '300000', 'idle timeout of relayed tunnel connections (> 0)'),
  flag('relay-keep-alive-ms', 'int', '10000', 'keep-alive interval of relayed tunnel connections (< idle timeout; 0 disables)'),
  flag('tunnel-protocol', 'string', 'raw-quic', 'reverse tunnel protocol on the tunnel port', { choices: ['raw-quic', 'webtransport'] }),
  flag('quic-retry', 'bool', 'false', 'validate client addresses with a stateless QUIC Retry before accepting a tunnel (costs one round trip)'),
  flag('quic-max-connections', 'int', '10000', 'most concurrent QUIC connections (handshaking or relaying) on the tunnel port'),

  // Tunnel port defences (issue 15)
  flag('quic-retry-threshold', 'int', '500', 'half-open QUIC handshakes on the tunnel port above which every new client must first answer a stateless Retry'),
  flag('quic-max-handshakes-per-address', 'int', '64', 'half-open QUIC handshakes one source address may hold before its new clients must answer a stateless Retry'),

  // LLM client HTTP forwarding
  flag('http-max-body-bytes', 'int', '33554432', 'largest LLM client request body (413 payload_too_large above it)'),
  flag('http-headers-timeout-ms', 'int', '30000', 'time for a client to send a request head (and for a new connection to send its first bytes), and for a pod to start its response (504 upstream_timeout)'),
  flag('http-idle-timeout-ms', 'int', '300000', 'longest silence on a forwarded request or response body, e.g. between SSE tokens'),
  flag('http-request-timeout-ms', 'int', '0', 'total time a forwarded request may take; 0 means no limit (LLM streams are long)'),
  flag('http2-max-concurrent-streams', 'int', '1000', 'HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS advertised to clients of the front door'),
  flag('http2-max-header-list-bytes', 'int', '16384', 'largest request header list (HTTP/2 SETTINGS_MAX_HEADER_LIST_SIZE, HTTP/1.1 header size) on the front door'),
  flag('shutdown-drain-timeout-ms', 'int', '30000', 'on SIGTERM, how long in-flight streams and requests may finish (> 0)'),

  // TLS
  flag('tls-cert-path', 'string', undefined, 'server certificate chain (PEM) of the reverse tunnels (QUIC, WebTransport) and, with --front-door-tls, of the front door; without it the tunnels use a generated self-signed identity'),
  flag('tls-key-path', 'string', undefined, 'private key (PEM) of --tls-cert-path; the two go together'),
  flag('front-door-tls', 'bool', 'false', 'serve TLS (ALPN h2, http/1.1) on --listen-addr with the --tls-cert-path identity; off, the front door is cleartext h2c + HTTP/1.1 behind a TLS-terminating Gateway'),
  flag('client-ca-path', 'string', undefined, 'CA bundle (PEM) for verifying Pylon client certificates (mTLS) on the tunnel port and, with --front-door-tls, the front door; needs --tls-cert-path'),
  flag('upstream-tls', 'bool', 'false', 'dial Stargate pods over TLS (gRPC and HTTP)'),
  flag('upstream-tls-cert-path', 'string', undefined, 'CA bundle (PEM) trusted when dialing Stargate pods (default: the router certificate file)'),
  flag('quic-insecure', 'bool', 'false', 'do not verify Stargate certificates on the QUIC upstream leg'),
  flag('tls-poll-interval-ms', 'int', '300000', 'reconciliation poll of mounted TLS material'),
  flag('tls-debounce-ms', 'int', '200', 'debounce of TLS directory change events'),

  // Peers
  flag('enable-peer-discovery', 'bool', 'false', 'discover router replicas and report Stargate snapshot divergence'),
  flag('peer-service', 'string', undefined, 'the router\'s own Service, required with --enable-peer-discovery'),
  flag('peers-file', 'string', undefined, 'YAML or JSON file of peer routers for runs without Kubernetes (instead of --peer-service)'),
  flag('peer-health-port-name', 'string', 'health', 'EndpointSlice port name of the peers\' health port'),
  flag('peer-health-port', 'int', '8080', 'health port of peers whose slice lacks --peer-health-port-name'),
  flag('peer-check-interval-ms', 'int', '10000', 'how often each peer\'s /debug/snapshot is compared with ours'),
  flag('peer-check-timeout-ms', 'int', '2000', 'timeout of one peer snapshot check'),
  flag('peer-divergence-grace-ms', 'int', '30000', 'how long a peer\'s snapshot digest may differ from ours before it is reported divergent'),

  // Limits and timeouts (issue 14)
  flag('http-upstream-max-connections', 'int', '1024', 'most connections to one Stargate pod for LLM client requests'),
  flag('http-upstream-max-queue', 'int', '1024', 'most LLM client requests waiting for a connection to one pod; beyond it 503 upstream_busy'),
  flag('front-door-max-connections', 'int', '10000', 'most open TCP connections on the front door; more are closed at accept (see docs/configuration.md, memory bound)'),
  flag('http-keep-alive-timeout-ms', 'int', '75000', 'front door: silence allowed on an HTTP/1.1 connection between requests (keep it above the idle timeout of a load balancer in front)'),
  flag('http2-session-idle-timeout-ms', 'int', '300000', 'front door: an HTTP/2 connection with no open stream for this long gets GOAWAY'),
  flag('tls-handshake-timeout-ms', 'int', '10000', 'front door: time for a client to complete the TLS handshake'),
  flag('upstream-tls-system-ca', 'bool', 'false', 'with --upstream-tls, also trust the system CA store for Stargate certificates (without it a trust bundle is required)'),
  flag('trusted-proxy-cidrs', 'list', undefined, 'repeatable or comma-separated: proxies (CIDR blocks or addresses) whose x-forwarded-for, forwarded and x-real-ip are believed; from other peers they are replaced'),

  // WebTransport sessions (issue 16)
  flag('webtransport-max-sessions-per-connection', 'int', '1', 'WebTransport sessions one Pylon connection may hold at once over HTTP/2 (429 above it; each has its own upstream connection); over HTTP/3 a connection carries one session, as the Rust router (a further request is reset with H3_REQUEST_REJECTED)'),
  flag('webtransport-max-sessions', 'int', '10000', 'WebTransport sessions (waiting for the pod or bridged) the router holds at once (503 above it)'),

  // Logging
  flag('log-level', 'string', 'info', 'pino log level', { choices: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] }),
  flag('log-format', 'string', 'json', 'json lines, or pretty for humans', { choices: ['json', 'pretty'] }),
]
