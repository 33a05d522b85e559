// SPEC §2: invalid configuration fails start-up with one line naming the flag and
// the fix. Each row is the exact ConfigError a user sees (server/main.ts prints it) and its
// exit code: 2 for a usage error (unknown flag, missing value, a value not of the flag's
// type, a missing required flag), 1 for a configuration that parses but is invalid.
import t from 'tap'
import { parseConfig, ConfigError, helpText } from '../../lib/config/config.ts'
import { FLAGS } from '../../lib/config/flags.ts'

const NS = { POD_NAMESPACE: 'stargate', STARGATE_GRPC_PYLON_DIAL_ADDR: 'https://stargate-router.example.com:443' }
const ADDR_HINT = 'expected host:port such as 0.0.0.0:50071 or [::]:50071'
const DIAL_RULE = '--grpc-pylon-dial-addr must be an explicit http:// or https:// URI'
const DIAL_EXAMPLE = 'e.g. https://stargate-router.example.com:443'
const REMOTE_RULE = 'remote Watch URL must be an explicit http:// or https:// URI'
const REMOTE_EXAMPLE = 'e.g. https://stargate-router.region-b.example.com:443'

interface Case {
  readonly why: string
  readonly argv: readonly string[]
  readonly env?: NodeJS.ProcessEnv
  readonly flag: string
  readonly exitCode: 1 | 2
  readonly message: string
}

const CASES: readonly Case[] = [
  {
    why: 'a hostname template without {pod_name}',
    argv: ['--advertised-hostname-template', 'stargate.example'],
    flag: 'advertised-hostname-template',
    exitCode: 1,
    message: "invalid --advertised-hostname-template: template must contain {pod_name}, got 'stargate.example'",
  },
  {
    why: 'keep-alive equal to the idle timeout',
    argv: ['--relay-keep-alive-ms', '300000'],
    flag: 'relay-keep-alive-ms',
    exitCode: 1,
    message: 'invalid --relay-keep-alive-ms 300000: must be less than --relay-idle-timeout-ms 300000 (or 0 to disable keep-alive)',
  },
  {
    why: 'keep-alive above the idle timeout',
    argv: ['--relay-idle-timeout-ms', '5000', '--relay-keep-alive-ms', '6000'],
    flag: 'relay-keep-alive-ms',
    exitCode: 1,
    message: 'invalid --relay-keep-alive-ms 6000: must be less than --relay-idle-timeout-ms 5000 (or 0 to disable keep-alive)',
  },
  {
    why: 'an idle timeout of 0',
    argv: ['--relay-idle-timeout-ms', '0'],
    flag: 'relay-idle-timeout-ms',
    exitCode: 1,
    message: 'invalid --relay-idle-timeout-ms 0: must be between 1 and 86400000',
  },
  {
    why: 'a certificate without a key',
    argv: ['--tls-cert-path', '/tls/tls.crt'],
    flag: 'tls-key-path',
    exitCode: 1,
    message: 'missing --tls-key-path: --tls-cert-path and --tls-key-path must be given together',
  },
  {
    why: 'a key without a certificate',
    argv: ['--tls-key-path', '/tls/tls.key'],
    flag: 'tls-cert-path',
    exitCode: 1,
    message: 'missing --tls-cert-path: --tls-cert-path and --tls-key-path must be given together',
  },
  {
    why: 'a certificate without a key, from the Rust environment variable',
    argv: [],
    env: { ...NS, STARGATE_TLS_CERT_PATH: '/tls/tls.crt' },
    flag: 'tls-key-path',
    exitCode: 1,
    message: 'missing --tls-key-path: --tls-cert-path and --tls-key-path must be given together',
  },
  {
    why: 'a client CA without a server identity',
    argv: ['--client-ca-path', '/ca/ca.crt'],
    flag: 'client-ca-path',
    exitCode: 1,
    message: 'invalid --client-ca-path: client certificate verification needs a server identity; also set --tls-cert-path and --tls-key-path',
  },
  {
    why: 'kubernetes discovery without a namespace',
    argv: [],
    env: {},
    flag: 'target-namespace',
    exitCode: 2,
    message: 'missing --target-namespace: set it or POD_NAMESPACE (the downward API provides it in a pod)',
  },
  {
    why: 'file discovery without a targets file',
    argv: ['--discovery', 'file'],
    env: {},
    flag: 'targets-file',
    exitCode: 2,
    message: 'missing --targets-file: --discovery file needs a YAML or JSON file of targets',
  },
  {
    why: 'a listen address without a port',
    argv: ['--listen-addr', 'nohost'],
    flag: 'listen-addr',
    exitCode: 2,
    message: `invalid --listen-addr 'nohost': no port; ${ADDR_HINT}`,
  },
  {
    why: 'a listen address without a host',
    argv: ['--listen-addr', ':80'],
    flag: 'listen-addr',
    exitCode: 2,
    message: `invalid --listen-addr ':80': no host; ${ADDR_HINT}`,
  },
  {
    why: 'a port above 65535',
    argv: ['--listen-addr', '1.2.3.4:99999'],
    flag: 'listen-addr',
    exitCode: 2,
    message: `invalid --listen-addr '1.2.3.4:99999': port must be 0..65535; ${ADDR_HINT}`,
  },
  {
    why: 'a non-numeric port',
    argv: ['--health-listen-addr', '127.0.0.1:http'],
    flag: 'health-listen-addr',
    exitCode: 2,
    message: `invalid --health-listen-addr '127.0.0.1:http': port must be 0..65535; ${ADDR_HINT}`,
  },
  {
    why: 'an IPv6 address without brackets',
    argv: ['--listen-addr', '::1:80'],
    flag: 'listen-addr',
    exitCode: 2,
    message: `invalid --listen-addr '::1:80': IPv6 addresses need brackets; ${ADDR_HINT}`,
  },
  {
    why: 'an unterminated IPv6 address',
    argv: ['--reverse-tunnel-listen-addr', '[::1:80'],
    flag: 'reverse-tunnel-listen-addr',
    exitCode: 2,
    message: `invalid --reverse-tunnel-listen-addr '[::1:80': unterminated IPv6 address; ${ADDR_HINT}`,
  },
  {
    why: 'a bracketed IPv6 address without a port',
    argv: ['--listen-addr', '[::1]'],
    flag: 'listen-addr',
    exitCode: 2,
    message: `invalid --listen-addr '[::1]': no port; ${ADDR_HINT}`,
  },
  {
    why: 'a bad listen address from the environment',
    argv: [],
    env: { ...NS, STARGATE_HEALTH_LISTEN_ADDR: 'localhost' },
    flag: 'health-listen-addr',
    exitCode: 2,
    message: `invalid --health-listen-addr 'localhost': no port; ${ADDR_HINT}`,
  },
  {
    why: 'milliseconds with a unit',
    argv: ['--connect-timeout-ms', '5s'],
    flag: 'connect-timeout-ms',
    exitCode: 2,
    message: "invalid --connect-timeout-ms '5s': expected a whole number",
  },
  {
    why: 'negative milliseconds',
    argv: ['--shutdown-drain-timeout-ms=-1'],
    flag: 'shutdown-drain-timeout-ms',
    exitCode: 2,
    message: "invalid --shutdown-drain-timeout-ms '-1': expected a whole number",
  },
  {
    why: 'a drain timeout of 0',
    argv: ['--shutdown-drain-timeout-ms', '0'],
    flag: 'shutdown-drain-timeout-ms',
    exitCode: 1,
    message: 'invalid --shutdown-drain-timeout-ms 0: must be between 1 and 86400000',
  },
  {
    why: 'a watch heartbeat of 0 (the Rust router rejects it)',
    argv: ['--watch-heartbeat-ms=0'],
    flag: 'watch-heartbeat-ms',
    exitCode: 1,
    message: 'invalid --watch-heartbeat-ms 0: must be between 1 and 86400000',
  },
  {
    why: 'fractional milliseconds from the environment',
    argv: [],
    env: { ...NS, STARGATE_WATCH_HEARTBEAT_MS: '1.5' },
    flag: 'watch-heartbeat-ms',
    exitCode: 2,
    message: "invalid --watch-heartbeat-ms '1.5': expected a whole number",
  },
  {
    why: 'an advertised port of 0',
    argv: ['--advertised-grpc-port', '0'],
    flag: 'advertised-grpc-port',
    exitCode: 1,
    message: 'invalid --advertised-grpc-port 0: must be between 1 and 65535',
  },
  {
    why: 'an unknown flag',
    argv: ['--listen-adress', '0.0.0.0:1'],
    flag: 'argv',
    exitCode: 2,
    message: "unknown option '--listen-adress'; run with --help to list the flags",
  },
  {
    why: 'a positional argument',
    argv: ['start'],
    flag: 'argv',
    exitCode: 2,
    message: "unexpected argument 'start'. This command does not take positional arguments; run with --help to list the flags",
  },
  {
    why: 'a value given to a boolean flag',
    argv: ['--quic-insecure=false'],
    flag: 'argv',
    exitCode: 2,
    message: "option '--quic-insecure' does not take an argument; run with --help to list the flags",
  },
  {
    why: 'a flag without its value',
    argv: ['--listen-addr'],
    flag: 'argv',
    exitCode: 2,
    message: "option '--listen-addr <value>' argument missing; run with --help to list the flags",
  },
  {
    why: 'an unknown tunnel protocol',
    argv: ['--tunnel-protocol', 'quic'],
    flag: 'tunnel-protocol',
    exitCode: 2,
    message: "invalid --tunnel-protocol 'quic': must be one of raw-quic, webtransport",
  },
  {
    why: 'an unknown discovery source',
    argv: ['--discovery', 'dns'],
    flag: 'discovery',
    exitCode: 2,
    message: "invalid --discovery 'dns': must be one of kubernetes, file",
  },
  {
    why: 'an unknown log level',
    argv: ['--log-level', 'verbose'],
    flag: 'log-level',
    exitCode: 2,
    message: "invalid --log-level 'verbose': must be one of fatal, error, warn, info, debug, trace, silent",
  },
  {
    why: 'an unknown log level from the environment',
    argv: [],
    env: { ...NS, STARGATE_LOG_LEVEL: 'INFO' },
    flag: 'log-level',
    exitCode: 2,
    message: "invalid --log-level 'INFO': must be one of fatal, error, warn, info, debug, trace, silent",
  },
  {
    why: 'no --grpc-pylon-dial-addr',
    argv: [],
    env: { POD_NAMESPACE: 'stargate' },
    flag: 'grpc-pylon-dial-addr',
    exitCode: 2,
    message: 'missing --grpc-pylon-dial-addr: give the http:// or https:// URI Pylons dial to reach the routers, e.g. https://stargate-router.example.com:443',
  },
  {
    why: 'a dial address that is host:port, not a URI',
    argv: ['--grpc-pylon-dial-addr', 'router.example:50071'],
    flag: 'grpc-pylon-dial-addr',
    exitCode: 2,
    message: `${DIAL_RULE}: got 'router.example:50071', which has no http:// or https:// scheme; ${DIAL_EXAMPLE}`,
  },
  {
    why: 'a dial address with another scheme',
    argv: ['--grpc-pylon-dial-addr=ftp://router.example'],
    flag: 'grpc-pylon-dial-addr',
    exitCode: 2,
    message: `${DIAL_RULE}: got 'ftp://router.example', whose scheme is not http or https; ${DIAL_EXAMPLE}`,
  },
  {
    why: 'a dial address with user info (not echoed: it may be a password)',
    argv: ['--grpc-pylon-dial-addr', 'https://pylon:s3cret@router.example'],
    flag: 'grpc-pylon-dial-addr',
    exitCode: 2,
    message: `${DIAL_RULE}: got a URI with user info (user@ or user:password@), which is not allowed; ${DIAL_EXAMPLE}`,
  },
  {
    why: 'a dial address with an empty user info',
    argv: ['--grpc-pylon-dial-addr', 'https://@router.example'],
    flag: 'grpc-pylon-dial-addr',
    exitCode: 2,
    message: `${DIAL_RULE}: got a URI with user info (user@ or user:password@), which is not allowed; ${DIAL_EXAMPLE}`,
  },
  {
    why: 'a dial address with an empty host',
    argv: ['--grpc-pylon-dial-addr', 'https://:443'],
    flag: 'grpc-pylon-dial-addr',
    exitCode: 2,
    message: `${DIAL_RULE}: got 'https://:443', which has no host; ${DIAL_EXAMPLE}`,
  },
  {
    why: 'a dial address with no host at all',
    argv: ['--grpc-pylon-dial-addr', 'http://'],
    flag: 'grpc-pylon-dial-addr',
    exitCode: 2,
    message: `${DIAL_RULE}: got 'http://', which has no host; ${DIAL_EXAMPLE}`,
  },
  {
    why: 'a dial address with a port above 65535',
    argv: ['--grpc-pylon-dial-addr', 'https://router.example:65536'],
    flag: 'grpc-pylon-dial-addr',
    exitCode: 2,
    message: `${DIAL_RULE}: got 'https://router.example:65536', whose port is not a number from 1 to 65535; ${DIAL_EXAMPLE}`,
  },
  // Upstream's shared parser refuses a path, a query, a fragment, port 0 and an empty port.
  {
    why: 'a dial address with a path',
    argv: ['--grpc-pylon-dial-addr', 'https://gw.example.com:443/pylon'],
    flag: 'grpc-pylon-dial-addr',
    exitCode: 2,
    message: `${DIAL_RULE}: got 'https://gw.example.com:443/pylon', which has a path: nothing may follow the host and port but one /; ${DIAL_EXAMPLE}`,
  },
  {
    why: 'a dial address with an empty port',
    argv: ['--grpc-pylon-dial-addr', ' https://gw.example.com: '],
    flag: 'grpc-pylon-dial-addr',
    exitCode: 2,
    message: `${DIAL_RULE}: got 'https://gw.example.com:', whose port is empty (a colon with no number after it); ${DIAL_EXAMPLE}`,
  },
  {
    why: 'a dial address with port 0',
    argv: ['--grpc-pylon-dial-addr', 'https://[::1]:0'],
    flag: 'grpc-pylon-dial-addr',
    exitCode: 2,
    message: `${DIAL_RULE}: got 'https://[::1]:0', whose port is not a number from 1 to 65535; ${DIAL_EXAMPLE}`,
  },
  {
    why: 'a dial address of blanks only',
    argv: ['--grpc-pylon-dial-addr', '   '],
    flag: 'grpc-pylon-dial-addr',
    exitCode: 2,
    message: 'missing --grpc-pylon-dial-addr: give the http:// or https:// URI Pylons dial to reach the routers, e.g. https://stargate-router.example.com:443',
  },
  {
    why: 'a remote Watch URL with a query (not echoed: it may carry a token)',
    argv: ['--remote-stargate-url', 'https://b.example.com?token=s3cret'],
    flag: 'remote-stargate-url',
    exitCode: 2,
    message: `invalid --remote-stargate-url: ${REMOTE_RULE}: got 'https://b.example.com?…', which has a query: nothing may follow the host and port but one /; ${REMOTE_EXAMPLE}`,
  },
  {
    why: 'a remote Watch URL with a fragment',
    argv: ['--remote-stargate-url', 'https://b.example.com/#x'],
    flag: 'remote-stargate-url',
    exitCode: 2,
    message: `invalid --remote-stargate-url: ${REMOTE_RULE}: got 'https://b.example.com/#…', which has a fragment: nothing may follow the host and port but one /; ${REMOTE_EXAMPLE}`,
  },
  {
    why: 'a malformed remote Watch URL is a usage error even when another one is http:// without the opt-in',
    argv: ['--remote-stargate-url', 'http://a.example.com', '--remote-stargate-url', 'https://b.example.com/watch'],
    flag: 'remote-stargate-url',
    exitCode: 2,
    message: `invalid --remote-stargate-url: ${REMOTE_RULE}: got 'https://b.example.com/watch', which has a path: nothing may follow the host and port but one /; ${REMOTE_EXAMPLE}`,
  },
  {
    why: 'a dial address from the environment that is host:port',
    argv: [],
    env: { POD_NAMESPACE: 'stargate', STARGATE_GRPC_PYLON_DIAL_ADDR: 'router:50071' },
    flag: 'grpc-pylon-dial-addr',
    exitCode: 2,
    message: `${DIAL_RULE}: got 'router:50071', which has no http:// or https:// scheme; ${DIAL_EXAMPLE}`,
  },
  {
    why: 'a remote Watch URL that is host:port',
    argv: ['--remote-stargate-url', 'https://ok.example', '--remote-stargate-url', 'router.example:50071'],
    flag: 'remote-stargate-url',
    exitCode: 2,
    message: `invalid --remote-stargate-url: ${REMOTE_RULE}: got 'router.example:50071', which has no http:// or https:// scheme; ${REMOTE_EXAMPLE}`,
  },
  {
    why: 'a remote Watch URL with user info',
    argv: ['--remote-stargate-url', 'https://user:pw@router.example'],
    flag: 'remote-stargate-url',
    exitCode: 2,
    message: `invalid --remote-stargate-url: ${REMOTE_RULE}: got a URI with user info (user@ or user:password@), which is not allowed; ${REMOTE_EXAMPLE}`,
  },
  {
    why: 'a remote Watch URL that is not a URI, from the comma-delimited environment variable',
    argv: [],
    env: { ...NS, STARGATE_REMOTE_WATCH_URLS: 'https://ok.example,not a url' },
    flag: 'remote-stargate-url',
    exitCode: 2,
    message: `invalid --remote-stargate-url (STARGATE_REMOTE_WATCH_URLS): ${REMOTE_RULE}: got 'not a url', which has no http:// or https:// scheme; ${REMOTE_EXAMPLE}`,
  },
  {
    why: 'an http:// remote Watch URL without --allow-insecure-remote-watch-http',
    argv: ['--remote-stargate-url', 'http://router.west.example:50071'],
    flag: 'remote-stargate-url',
    exitCode: 1,
    message: "invalid --remote-stargate-url 'http://router.west.example:50071': http:// remote Watch URLs require --allow-insecure-remote-watch-http; use https:// or set that flag",
  },
  {
    why: 'front-door TLS without a server identity',
    argv: ['--front-door-tls'],
    flag: 'front-door-tls',
    exitCode: 1,
    message: 'invalid --front-door-tls: TLS on the front door needs a server identity; also set --tls-cert-path and --tls-key-path (or leave TLS to the Gateway in front)',
  },
  {
    why: 'a removed name of the Rust-era fork (--pylon-grpc-dial-addr is --grpc-pylon-dial-addr)',
    argv: ['--pylon-grpc-dial-addr', 'https://router.example'],
    flag: 'argv',
    exitCode: 2,
    message: "unknown option '--pylon-grpc-dial-addr'; run with --help to list the flags",
  },
  {
    why: 'a usage error is reported before an invalid value, as clap does',
    argv: ['--relay-keep-alive-ms', '400000', '--connect-timeout-ms', 'soon'],
    flag: 'connect-timeout-ms',
    exitCode: 2,
    message: "invalid --connect-timeout-ms 'soon': expected a whole number",
  },
]

t.test('each invalid input is a ConfigError naming the flag with a one-line message and the fix', async (t) => {
  for (const c of CASES) {
    let caught: unknown = null
    try {
      parseConfig(c.argv, c.env ?? NS)
    } catch (err) {
      caught = err
    }
    if (!(caught instanceof ConfigError)) {
      t.fail(`${c.why}: expected a ConfigError, got ${String(caught)}`)
      continue
    }
    t.equal(caught.name, 'ConfigError', c.why)
    t.equal(caught.flag, c.flag, c.why)
    t.equal(caught.message, c.message, c.why)
    t.equal(caught.exitCode, c.exitCode, `${c.why}: exit code`)
    t.notOk(caught.message.includes('\n'), `${c.why}: one line`)
    if (c.flag !== 'argv') t.ok(caught.message.includes(`--${c.flag}`), `${c.why}: names --${c.flag}`)
  }
})

t.test('URIs are used as trimmed: the dial address in every StargateInfo, the remote Watch URLs sorted', async (t) => {
  const parsed = parseConfig(['--grpc-pylon-dial-addr', '  https://gw.example.com:443/ ', '--remote-stargate-url', ' https://b.example.com ,https://a.example.com/'], { POD_NAMESPACE: 'stargate' })
  if (parsed.kind !== 'config') throw new Error('expected a config')
  t.equal(parsed.config.grpcPylonDialAddr, 'https://gw.example.com:443/')
  t.strictSame(parsed.config.remoteStargateUrls, ['https://a.example.com/', 'https://b.example.com'])
})

t.test('valid listen addresses parse to host and port', async (t) => {
  const cases: Array<[string, { host: string, port: number }]> = [
    ['[::1]:80', { host: '::1', port: 80 }],
    ['[::]:50071', { host: '::', port: 50071 }],
    ['0.0.0.0:0', { host: '0.0.0.0', port: 0 }],
    ['localhost:65535', { host: 'localhost', port: 65535 }],
  ]
  for (const [value, want] of cases) {
    const result = parseConfig(['--listen-addr', value], NS)
    t.strictSame(result.kind === 'config' ? result.config.listenAddr : null, want, value)
  }
})

t.test('keep-alive 0 is allowed whatever the idle timeout', async (t) => {
  const result = parseConfig(['--relay-idle-timeout-ms', '1', '--relay-keep-alive-ms', '0'], NS)
  t.strictSame(result.kind === 'config' ? [result.config.relayIdleTimeoutMs, result.config.relayKeepAliveMs] : null, [1, 0])
})

t.test('--help returns the help text listing every flag, its environment variables and default', async (t) => {
  const result = parseConfig(['--help'], {})
  t.equal(result.kind, 'help')
  if (result.kind !== 'help') return
  t.equal(result.text, helpText())
  const lines = result.text.split('\n')
  for (const spec of FLAGS) {
    const at = lines.findIndex((line) => line.startsWith(`  --${spec.name} `) || line === `  --${spec.name}`)
    t.ok(at >= 0, `--help lists --${spec.name}`)
    if (spec.default !== undefined && spec.default !== '') t.ok(lines[at]?.endsWith(`(default ${spec.default})`), `--help shows the default of --${spec.name}`)
    t.equal(lines[at + 1], `      ${spec.help}; env ${spec.env.join(', ')}`, `--help explains --${spec.name}`)
  }
  t.ok(lines.includes('  --help'))
})

// --help names the kind of each value, not one `<ms|n>` for every number.
t.test('--help names what each value is: <port> for ports, <ms> for durations, <host:port> for addresses', async (t) => {
  const lines = helpText().split('\n')
  const shown = (flag: string): string | undefined => lines.find((line) => line.startsWith(`  --${flag} `) || line === `  --${flag}`)
  for (const flag of ['advertised-grpc-port', 'peer-health-port']) t.match(shown(flag), new RegExp(`^  --${flag} <port> \\(default \\d+\\)$`), `--${flag}`)
  t.match(shown('watch-heartbeat-ms'), /^ {2}--watch-heartbeat-ms <ms> \(default 5000\)$/)
  t.match(shown('http-max-body-bytes'), /^ {2}--http-max-body-bytes <bytes> /)
  t.match(shown('quic-max-connections'), /^ {2}--quic-max-connections <n> /)
  t.match(shown('listen-addr'), /^ {2}--listen-addr <host:port> /)
  t.match(shown('grpc-pylon-dial-addr'), /^ {2}--grpc-pylon-dial-addr <uri>$/)
  t.equal(shown('quic-insecure'), '  --quic-insecure (default false)', 'a boolean takes no value')
  t.notOk(lines.some((line) => line.includes('<ms|n>')), 'no flag shows <ms|n>')
  for (const spec of FLAGS) {
    if (spec.kind !== 'int') continue
    const port = spec.name.endsWith('-port')
    t.equal(spec.placeholder === 'port', port, `--${spec.name} ${port ? 'is' : 'is not'} shown as a port`)
  }
})

t.test('--help wins over otherwise invalid configuration', async (t) => {
  t.equal(parseConfig(['--help', '--tls-cert-path', '/only-cert'], {}).kind, 'help')
})
