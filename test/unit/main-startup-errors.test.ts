// server/main.ts start-up in a child process (SPEC §2): --help, and every start that cannot
// work ends with exit code 2 and exactly one stderr line, `stargate-router: ` + the flag and
// the fix.
import t from 'tap'
import net from 'node:net'
import { FLAGS } from '../../lib/config/flags.ts'
import { exitWithin, oneTargetFile, startProcess } from '../fixtures/router-process.ts'

// Child processes on a small shared machine: allow more than tap's default 30 s per file.
t.setTimeout(120_000)

t.test('--help prints every flag on stdout and exits 0', async (t) => {
  const p = await startProcess(t, ['--help'])
  t.strictSame(await exitWithin(p, 30_000), { code: 0, signal: null })
  t.equal(p.stderr(), '')
  for (const spec of FLAGS) t.match(p.stdout(), `  --${spec.name}`, `lists --${spec.name}`)
})

t.test('invalid configuration exits 2 with one stderr line naming the flag', async (t) => {
  const cases: Array<[string, readonly string[], string]> = [
    ['a template without {pod_name}', ['--advertised-hostname-template', 'stargate.example'],
      "invalid --advertised-hostname-template: template must contain {pod_name}, got 'stargate.example'"],
    ['keep-alive not below the idle timeout', ['--relay-idle-timeout-ms', '1000', '--relay-keep-alive-ms', '1000'],
      'invalid --relay-keep-alive-ms 1000: must be less than --relay-idle-timeout-ms 1000 (or 0 to disable keep-alive)'],
    ['a certificate without a key', ['--tls-cert-path', '/tls/tls.crt'],
      'missing --tls-key-path: --tls-cert-path and --tls-key-path must be given together'],
    ['an unbracketed IPv6 listen address', ['--listen-addr', '::1:80'],
      "invalid --listen-addr '::1:80': IPv6 addresses need brackets; expected host:port such as 0.0.0.0:50071 or [::]:50071"],
    ['an unknown flag', ['--no-such-flag'],
      "unknown option '--no-such-flag'; run with --help to list the flags"],
  ]
  await Promise.all(cases.map(async ([why, args, message]) => {
    const p = await startProcess(t, ['--target-namespace', 'stargate', ...args])
    t.strictSame(await exitWithin(p, 30_000), { code: 2, signal: null }, why)
    t.equal(p.stderr(), `stargate-router: ${message}\n`, why)
    t.equal(p.stdout(), '', `${why}: nothing on stdout`)
  }))
})

t.test('a missing namespace exits 2 naming --target-namespace and POD_NAMESPACE', async (t) => {
  const p = await startProcess(t, [])
  t.strictSame(await exitWithin(p, 30_000), { code: 2, signal: null })
  t.equal(p.stderr(), 'stargate-router: missing --target-namespace: set it or POD_NAMESPACE (the downward API provides it in a pod)\n')
})

t.test('kubernetes discovery without any Kubernetes configuration exits 2 naming KUBECONFIG and --discovery file', async (t) => {
  const cases: Array<[string, NodeJS.ProcessEnv, string]> = [
    ['nothing configured', { POD_NAMESPACE: 'stargate' },
      'no Kubernetes configuration found (not running in a pod, KUBECONFIG unset, no ~/.kube/config): ' +
      'run in a cluster or set KUBECONFIG for --discovery kubernetes, or use --discovery file --targets-file <path>'],
    ['KUBECONFIG naming no file', { POD_NAMESPACE: 'stargate', KUBECONFIG: '/nonexistent/kubeconfig' },
      'KUBECONFIG names no readable file (/nonexistent/kubeconfig): fix KUBECONFIG, or use --discovery file with --targets-file'],
  ]
  await Promise.all(cases.map(async ([why, env, message]) => {
    const p = await startProcess(t, [], env)
    t.strictSame(await exitWithin(p, 30_000), { code: 2, signal: null }, why)
    t.equal(p.stderr(), `stargate-router: ${message}\n`, why)
  }))
})

t.test('a listen port already in use exits 2 with a clear message', async (t) => {
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
    const p = await startProcess(t, ['--discovery', 'file', '--targets-file', path, '--reverse-tunnel-listen-addr', '127.0.0.1:0', ...args])
    t.strictSame(await exitWithin(p, 30_000), { code: 2, signal: null }, why)
    t.equal(p.stderr(),
      `stargate-router: cannot listen: listen EADDRINUSE: address already in use 127.0.0.1:${port}; choose another address with --listen-addr / --health-listen-addr\n`, why)
  }))
})
