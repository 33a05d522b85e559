// server/main.ts start-up in a child process (SPEC §2): --help, and every start that
// cannot work ends with exactly one stderr line, `stargate-router: ` + the flag and the fix,
// and the Rust router's exit code: 2 for an unknown or malformed flag (or a missing required
// one), 1 for a configuration that parses but is invalid or a start-up that fails. Here: each
// start-up error the Rust router has, and one of each other kind; test/unit/config-validation.test.ts
// has every configuration error's line and exit code.
import t, { type Test } from 'tap'
import net from 'node:net'
import { join } from 'node:path'
import { writeFile } from 'node:fs/promises'
import { FLAGS } from '../../lib/config/flags.ts'
import { GRPC_PYLON_DIAL_ADDR, exitWithin, oneTargetFile, startProcess, tempDir } from '../fixtures/router-process.ts'

// Child processes on a small shared machine: allow more than tap's default 30 s per file; the
// starts that fail only after loading the whole router (TLS, listen) get a minute each.
t.setTimeout(240_000)

const DIAL = ['--grpc-pylon-dial-addr', GRPC_PYLON_DIAL_ADDR]
const DIAL_RULE = '--grpc-pylon-dial-addr must be an explicit http:// or https:// URI'
const DIAL_EXAMPLE = 'e.g. https://stargate-router.example.com:443'
const REMOTE_RULE = 'remote Watch URL must be an explicit http:// or https:// URI'
const REMOTE_EXAMPLE = 'e.g. https://stargate-router.region-b.example.com:443'

interface StartupCase {
  readonly why: string
  readonly args: readonly string[]
  readonly env?: NodeJS.ProcessEnv
  readonly code: 1 | 2
  readonly line: string
  /** A start-up that fails after the configuration was read logs 'starting stargate router' first. */
  readonly started?: boolean
}

/** Runs the cases a few at a time (each is a process start of ~0.3 s CPU). */
async function runCases (t: Test, cases: readonly StartupCase[]): Promise<void> {
  for (let i = 0; i < cases.length; i += 4) {
    await Promise.all(cases.slice(i, i + 4).map(async (c) => {
      const p = await startProcess(t, c.args, c.env ?? { POD_NAMESPACE: 'stargate' })
      t.strictSame(await exitWithin(p, 30_000), { code: c.code, signal: null }, `${c.why}: exit ${c.code}`)
      t.equal(p.stderr(), `stargate-router: ${c.line}\n`, `${c.why}: the one stderr line`)
      if (c.started === true) t.strictSame(p.logs().map((l) => l.msg), ['starting stargate router'], `${c.why}: stdout has the start-up log line only`)
      else t.equal(p.stdout(), '', `${c.why}: nothing on stdout`)
    }))
  }
}

t.test('--help prints every flag on stdout and exits 0', async (t) => {
  const p = await startProcess(t, ['--help'])
  t.strictSame(await exitWithin(p, 30_000), { code: 0, signal: null })
  t.equal(p.stderr(), '')
  for (const spec of FLAGS) t.match(p.stdout(), `  --${spec.name}`, `lists --${spec.name}`)
})

t.test('an unknown, removed or malformed flag, or a missing required one, exits 2 naming it', async (t) => {
  await runCases(t, [
    { why: 'an unknown flag', args: ['--no-such-flag', ...DIAL], code: 2, line: "unknown option '--no-such-flag'; run with --help to list the flags" },
    { why: 'the removed --pylon-grpc-dial-addr', args: ['--pylon-grpc-dial-addr', 'https://gw.example.com'], code: 2, line: "unknown option '--pylon-grpc-dial-addr'; run with --help to list the flags" },
    { why: 'the removed --shutdown-drain-ms', args: [...DIAL, '--shutdown-drain-ms', '1000'], code: 2, line: "unknown option '--shutdown-drain-ms'; run with --help to list the flags" },
    { why: 'a number with a unit', args: [...DIAL, '--shutdown-drain-timeout-ms', '30s'], code: 2, line: "invalid --shutdown-drain-timeout-ms '30s': expected a whole number" },
    { why: 'a percentage for a fraction', args: [...DIAL, '--rebalance-tolerance', '20%'], code: 2, line: "invalid --rebalance-tolerance '20%': expected a number such as 0.2" },
    { why: 'no --grpc-pylon-dial-addr', args: [], code: 2, line: 'missing --grpc-pylon-dial-addr: give the http:// or https:// URI Pylons dial to reach the routers, e.g. https://stargate-router.example.com:443' },
    { why: 'no namespace', args: DIAL, env: {}, code: 2, line: 'missing --target-namespace: set it or POD_NAMESPACE (the downward API provides it in a pod)' },
  ])
})

// Upstream parses both URI flags with one shared parser as clap value parsers, so a
// malformed value is a usage error (exit 2), one line naming the flag, the problem and the fix.
t.test('a malformed --grpc-pylon-dial-addr or --remote-stargate-url exits 2 naming the flag', async (t) => {
  await runCases(t, [
    { why: 'a dial address that is host:port', args: ['--grpc-pylon-dial-addr', 'router.example:50071'], code: 2, line: `${DIAL_RULE}: got 'router.example:50071', which has no http:// or https:// scheme; ${DIAL_EXAMPLE}` },
    { why: 'a dial address with another scheme', args: ['--grpc-pylon-dial-addr=ftp://router.example'], code: 2, line: `${DIAL_RULE}: got 'ftp://router.example', whose scheme is not http or https; ${DIAL_EXAMPLE}` },
    { why: 'a dial address with user info', args: ['--grpc-pylon-dial-addr', 'https://pylon:s3cret@router.example'], code: 2, line: `${DIAL_RULE}: got a URI with user info (user@ or user:password@), which is not allowed; ${DIAL_EXAMPLE}` },
    { why: 'a dial address with an empty host', args: ['--grpc-pylon-dial-addr', 'https://:443'], code: 2, line: `${DIAL_RULE}: got 'https://:443', which has no host; ${DIAL_EXAMPLE}` },
    { why: 'a dial address with a port above 65535', args: ['--grpc-pylon-dial-addr', 'http://router.example:70000'], code: 2, line: `${DIAL_RULE}: got 'http://router.example:70000', whose port is not a number from 1 to 65535; ${DIAL_EXAMPLE}` },
    { why: 'a dial address with port 0', args: ['--grpc-pylon-dial-addr', 'https://router.example:0'], code: 2, line: `${DIAL_RULE}: got 'https://router.example:0', whose port is not a number from 1 to 65535; ${DIAL_EXAMPLE}` },
    { why: 'a dial address with an empty port', args: ['--grpc-pylon-dial-addr', 'https://router.example:'], code: 2, line: `${DIAL_RULE}: got 'https://router.example:', whose port is empty (a colon with no number after it); ${DIAL_EXAMPLE}` },
    { why: 'a dial address with a path, from the environment', args: [], env: { POD_NAMESPACE: 'stargate', STARGATE_GRPC_PYLON_DIAL_ADDR: ' https://gw.example.com/pylon ' }, code: 2, line: `${DIAL_RULE}: got 'https://gw.example.com/pylon', which has a path: nothing may follow the host and port but one /; ${DIAL_EXAMPLE}` },
    { why: 'a remote Watch URL that is host:port', args: [...DIAL, '--remote-stargate-url', 'router.west.example:50071'], code: 2, line: `invalid --remote-stargate-url: ${REMOTE_RULE}: got 'router.west.example:50071', which has no http:// or https:// scheme; ${REMOTE_EXAMPLE}` },
    { why: 'a remote Watch URL from STARGATE_REMOTE_WATCH_URLS with another scheme', args: DIAL, env: { POD_NAMESPACE: 'stargate', STARGATE_REMOTE_WATCH_URLS: 'https://a.example,grpc://b.example' }, code: 2, line: `invalid --remote-stargate-url (STARGATE_REMOTE_WATCH_URLS): ${REMOTE_RULE}: got 'grpc://b.example', whose scheme is not http or https; ${REMOTE_EXAMPLE}` },
    { why: 'a remote Watch URL with a query', args: [...DIAL, '--remote-stargate-url', 'https://b.example?region=b'], code: 2, line: `invalid --remote-stargate-url: ${REMOTE_RULE}: got 'https://b.example?…', which has a query: nothing may follow the host and port but one /; ${REMOTE_EXAMPLE}` },
  ])
})

t.test('a configuration that parses but is invalid exits 1 naming the flag', async (t) => {
  await runCases(t, [
    { why: 'an http:// remote Watch URL without the opt-in', args: [...DIAL, '--remote-stargate-url', 'http://router.west.example:50071'], code: 1, line: "invalid --remote-stargate-url 'http://router.west.example:50071': http:// remote Watch URLs require --allow-insecure-remote-watch-http; use https:// or set that flag" },
    { why: 'a drain timeout of 0', args: [...DIAL, '--shutdown-drain-timeout-ms', '0'], code: 1, line: 'invalid --shutdown-drain-timeout-ms 0: must be between 1 and 86400000' },
    { why: 'a watch heartbeat of 0', args: [...DIAL, '--watch-heartbeat-ms', '0'], code: 1, line: 'invalid --watch-heartbeat-ms 0: must be between 1 and 86400000' },
    { why: 'an advertised port of 0', args: [...DIAL, '--advertised-grpc-port', '0'], code: 1, line: 'invalid --advertised-grpc-port 0: must be between 1 and 65535' },
    { why: 'front-door TLS without an identity', args: [...DIAL, '--front-door-tls'], code: 1, line: 'invalid --front-door-tls: TLS on the front door needs a server identity; also set --tls-cert-path and --tls-key-path (or leave TLS to the Gateway in front)' },
    { why: 'replica balancing without peer discovery', args: [...DIAL, '--rebalance'], code: 1, line: "invalid --rebalance: balancing reads the peers' load; also set --enable-peer-discovery (with --peer-service, or --peers-file without Kubernetes)" },
  ])
})

t.test('kubernetes discovery without any Kubernetes configuration exits 1 naming KUBECONFIG and --discovery file', async (t) => {
  await runCases(t, [
    { why: 'nothing configured', args: DIAL, code: 1, started: true,
      line: 'no Kubernetes configuration found (not running in a pod, KUBECONFIG unset, no ~/.kube/config): ' +
        'run in a cluster or set KUBECONFIG for --discovery kubernetes, or use --discovery file --targets-file <path>' },
    { why: 'KUBECONFIG naming no file', args: DIAL, env: { POD_NAMESPACE: 'stargate', KUBECONFIG: '/nonexistent/kubeconfig' }, code: 1, started: true,
      line: 'KUBECONFIG names no readable file (/nonexistent/kubeconfig): fix KUBECONFIG, or use --discovery file with --targets-file' },
  ])
})

t.test('TLS material that cannot be used exits 1 (no insecure fallback)', async (t) => {
  const dir = await tempDir(t)
  await writeFile(join(dir, 'tls.crt'), 'not a certificate\n')
  await writeFile(join(dir, 'tls.key'), 'not a key\n')
  const path = await oneTargetFile(t)
  const p = await startProcess(t, ['--discovery', 'file', '--targets-file', path, ...DIAL,
    '--listen-addr', '127.0.0.1:0', '--health-listen-addr', '127.0.0.1:0', '--reverse-tunnel-listen-addr', '127.0.0.1:0',
    '--tls-cert-path', join(dir, 'tls.crt'), '--tls-key-path', join(dir, 'tls.key')])
  t.strictSame(await exitWithin(p, 60_000), { code: 1, signal: null })
  t.equal(p.stderr(), `stargate-router: start-up failed: cannot load the server identity from ${join(dir, 'tls.crt')} and ${join(dir, 'tls.key')}: parse: certificate file is not pem: no "-----BEGIN" line found\n`)
})

t.test('a listen port already in use exits 1 with a clear message', async (t) => {
  const holder = net.createServer()
  await new Promise<void>((resolve) => { holder.listen(0, '127.0.0.1', resolve) })
  t.teardown(() => new Promise<void>((resolve) => { holder.close(() => { resolve() }) }))
  const port = (holder.address() as net.AddressInfo).port
  const path = await oneTargetFile(t)
  const cases: Array<[string, readonly string[]]> = [
    ['front door', ['--listen-addr', `127.0.0.1:${port}`, '--health-listen-addr', '127.0.0.1:0']],
    ['health', ['--listen-addr', '127.0.0.1:0', '--health-listen-addr', `127.0.0.1:${port}`]],
  ]
  await Promise.all(cases.map(async ([why, args]) => {
    const p = await startProcess(t, ['--discovery', 'file', '--targets-file', path, ...DIAL, '--reverse-tunnel-listen-addr', '127.0.0.1:0', ...args])
    t.strictSame(await exitWithin(p, 60_000), { code: 1, signal: null }, why)
    t.equal(p.stderr(),
      `stargate-router: cannot listen: listen EADDRINUSE: address already in use 127.0.0.1:${port}; choose another address with --listen-addr, --reverse-tunnel-listen-addr or --health-listen-addr\n`, why)
  }))
})
