/**
 * Child processes for the benchmarks that put the router, its upstreams and the reference
 * proxies under load: each runs in its own process, so that the client (the benchmark
 * process), the router and the upstream do not share one CPU budget and the router's CPU
 * and memory can be read from /proc/<pid>/stat (utime + stime) and /proc/<pid>/status
 * (VmRSS) alone.
 *
 * - spawnChild(): any command; JSON lines on its stdout can be awaited (next()).
 * - startRouter(): server/main.ts as an operator runs it; ports come from its
 *   "stargate router listening" log line. BENCH_ROUTER_NODE_ARGS adds Node flags to the
 *   router only (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`: stopAll() ends it with SIGTERM,
 *   so the profile is written).
 * - startNginx(): /usr/sbin/nginx in the foreground with a generated config in a temp
 *   directory, one worker, logs in that directory.
 * - CpuMeter: CPU seconds of a set of processes between start() and stop().
 *
 * Everything started here is stopped by stopAll() (and killed on exit); temp directories
 * are removed on exit.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer, Socket, type AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createInterface } from 'node:readline'

export const ROOT = fileURLToPath(new URL('..', import.meta.url))
const MAIN = join(ROOT, 'server', 'main.ts')
export const NGINX = '/usr/sbin/nginx'

const children = new Set<ChildProcess>()
const dirs = new Set<string>()

export interface Child {
  readonly process: ChildProcess
  readonly pid: number
  /** Resolves with the next stdout JSON line that satisfies pick (earlier ones are kept). */
  next<T> (pick?: (value: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<T>
  /** The last few KiB of stderr, for error messages. */
  stderr (): string
  readonly exited: Promise<number | null>
}

export function spawnChild (command: string, args: readonly string[], options: { env?: NodeJS.ProcessEnv, cwd?: string } = {}): Child {
  const child = spawn(command, args, { cwd: options.cwd ?? ROOT, env: options.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] })
  children.add(child)
  const exited = new Promise<number | null>((resolve) => {
    child.on('close', (code) => {
      children.delete(child)
      resolve(code)
    })
  })
  const queue: Array<Record<string, unknown>> = []
  const waiters: Array<{ pick: (v: Record<string, unknown>) => boolean, resolve: (v: Record<string, unknown>) => void }> = []
  let stderr = ''
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => { stderr = (stderr + chunk).slice(-4000) })
  createInterface({ input: child.stdout! }).on('line', (line) => {
    if (!line.startsWith('{')) return
    let value: Record<string, unknown>
    try {
      value = JSON.parse(line) as Record<string, unknown>
    } catch {
      return
    }
    const at = waiters.findIndex((w) => w.pick(value))
    if (at >= 0) waiters.splice(at, 1)[0]?.resolve(value)
    else if (queue.length < 1000) queue.push(value)
  })
  return {
    process: child,
    pid: child.pid ?? 0,
    exited,
    stderr: () => stderr,
    next<T> (pick: (value: Record<string, unknown>) => boolean = () => true, timeoutMs = 60_000): Promise<T> {
      const at = queue.findIndex(pick)
      if (at >= 0) return Promise.resolve(queue.splice(at, 1)[0] as T)
      return new Promise<T>((resolve, reject) => {
        const timer = setTimeout(() => { reject(new Error(`${command}: no matching output within ${timeoutMs} ms; stderr: ${stderr}`)) }, timeoutMs)
        waiters.push({ pick, resolve: (v) => { clearTimeout(timer); resolve(v as T) } })
        void exited.then((code) => {
          clearTimeout(timer)
          reject(new Error(`${command} ${args.join(' ')} exited with ${code}: ${stderr}`))
        })
      })
    },
  }
}

/** A Node script (a .ts file under bench/ or server/) in its own process. */
export function spawnNode (script: string, args: readonly string[], options: { env?: NodeJS.ProcessEnv, nodeArgs?: readonly string[] } = {}): Child {
  return spawnChild(process.execPath, [...(options.nodeArgs ?? []), script, ...args], options.env === undefined ? {} : { env: options.env })
}

/** Ends every child: SIGTERM, then SIGKILL for those still running after graceMs. */
export async function stopAll (graceMs = 5000): Promise<void> {
  const running = [...children]
  for (const child of running) child.kill('SIGTERM')
  await Promise.all(running.map((child) => new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) { resolve(); return }
    const timer = setTimeout(() => { child.kill('SIGKILL'); resolve() }, graceMs)
    child.once('close', () => { clearTimeout(timer); resolve() })
  })))
}

/** Stops one child (SIGTERM, then SIGKILL after graceMs). */
export async function stop (child: Child, graceMs = 5000): Promise<void> {
  const p = child.process
  if (p.exitCode !== null || p.signalCode !== null) return
  p.kill('SIGTERM')
  const timer = setTimeout(() => { p.kill('SIGKILL') }, graceMs)
  await child.exited
  clearTimeout(timer)
}

process.on('exit', () => {
  for (const child of children) child.kill('SIGKILL')
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
})
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => { void stopAll(1000).finally(() => process.exit(130)) })
}

/** A temp directory removed when the process exits. */
export function tempDir (prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), `stargate-bench-${prefix}-`))
  dirs.add(dir)
  return dir
}

export interface FileTarget {
  readonly identity: string
  readonly address: string
  readonly grpcPort: number
  readonly quicPort?: number
  readonly httpPort?: number
}

/** A targets file for --discovery file (lib/discovery/file.ts). */
export function writeTargetsFile (dir: string, targets: readonly FileTarget[]): string {
  const path = join(dir, 'targets.yaml')
  writeFileSync(path, 'targets:\n' + targets.map((t) =>
    `  - {identity: ${t.identity}, address: ${t.address}, grpcPort: ${t.grpcPort}, quicPort: ${t.quicPort ?? 50072}${t.httpPort === undefined ? '' : `, httpPort: ${t.httpPort}`}}\n`).join(''))
  return path
}

export interface RouterChild extends Child {
  readonly frontDoorPort: number
  readonly healthPort: number
}

export interface RouterOptions {
  /** --discovery file with this targets file; else the args/env must configure discovery. */
  readonly targetsFile?: string
  readonly args?: readonly string[]
  readonly env?: NodeJS.ProcessEnv
}

/**
 * server/main.ts on loopback ports chosen by the kernel, logging at info (the level at which
 * it announces its ports; nothing on the per-request or per-message paths logs at info).
 * Resolves once /readyz answers 200.
 */
export async function startRouter (options: RouterOptions): Promise<RouterChild> {
  const nodeArgs = (process.env.BENCH_ROUTER_NODE_ARGS ?? '').split(' ').filter((a) => a !== '')
  const discovery = options.targetsFile === undefined ? [] : ['--discovery', 'file', '--targets-file', options.targetsFile]
  const child = spawnNode(MAIN, [
    ...discovery,
    '--listen-addr', '127.0.0.1:0', '--health-listen-addr', '127.0.0.1:0', '--reverse-tunnel-listen-addr', '127.0.0.1:0',
    '--log-level', 'info', '--shutdown-drain-timeout-ms', '200',
    '--grpc-pylon-dial-addr', 'https://stargate-router.example.com:443',
    ...(options.args ?? []),
  ], { nodeArgs, env: { ...process.env, ...options.env } })
  const listening = await child.next<{ frontDoor: { port: number }, health: { port: number } }>((v) => v.msg === 'stargate router listening')
  const router: RouterChild = { ...child, frontDoorPort: listening.frontDoor.port, healthPort: listening.health.port }
  const deadline = Date.now() + 30_000
  for (;;) {
    try {
      if ((await fetch(`http://127.0.0.1:${router.healthPort}/readyz`)).status === 200) break
    } catch { /* not yet */ }
    if (Date.now() > deadline) throw new Error(`router not ready within 30 s; stderr: ${child.stderr()}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return router
}

/** CPU seconds (user + system) a process has used so far, from /proc/<pid>/stat. */
export function cpuSeconds (pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  // Fields after the command name (which may contain spaces), counted from field 3 (state).
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS
}

/** USER_HZ: the unit of utime/stime; 100 on every Linux this runs on (getconf CLK_TCK). */
const CLOCK_TICKS = 100

/** Resident set size in KiB, from /proc/<pid>/status VmRSS. */
export function rssKiB (pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('VmRSS:'))
  return Number(line?.split(/\s+/)[1] ?? NaN)
}

/** The direct children of a process (e.g. nginx's worker), from /proc/<pid>/task/<pid>/children. */
export function childPids (pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter((s) => s !== '').map(Number)
  } catch {
    return []
  }
}

/** CPU time of a set of processes over an interval. */
export class CpuMeter {
  readonly #pids: () => readonly number[]
  #start = 0

  constructor (pids: () => readonly number[]) {
    this.#pids = pids
  }

  #total (): number {
    let sum = 0
    for (const pid of this.#pids()) sum += cpuSeconds(pid)
    return sum
  }

  start (): void {
    this.#start = this.#total()
  }

  /** CPU seconds since start(). */
  stop (): number {
    return this.#total() - this.#start
  }
}

/** A port that was free a moment ago (for servers that cannot report a kernel-chosen port). */
export async function freePort (host = '127.0.0.1'): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => { server.listen(0, host, resolve) })
  const { port } = server.address() as AddressInfo
  await new Promise<void>((resolve) => { server.close(() => { resolve() }) })
  return port
}

export interface Nginx {
  readonly child: Child
  readonly port: number
  readonly dir: string
  /** Master and worker: the processes whose CPU and memory count. */
  pids (): number[]
}

/**
 * nginx in the foreground (`-g 'daemon off;'`) with one worker; `server` is the body of the
 * http block (upstreams and one server block listening on the port written {{port}}).
 */
export async function startNginx (httpBlock: string, options: { workerConnections?: number } = {}): Promise<Nginx> {
  const dir = tempDir('nginx')
  const port = await freePort()
  const connections = options.workerConnections ?? 4096
  writeFileSync(join(dir, 'nginx.conf'), `
worker_processes 1;
worker_rlimit_nofile ${connections * 2 + 100};
error_log ${join(dir, 'error.log')} warn;
pid ${join(dir, 'nginx.pid')};
events { worker_connections ${connections}; multi_accept on; }
http {
  access_log off;
  client_body_temp_path ${join(dir, 'body')};
  proxy_temp_path ${join(dir, 'proxy')};
  fastcgi_temp_path ${join(dir, 'fastcgi')};
  uwsgi_temp_path ${join(dir, 'uwsgi')};
  scgi_temp_path ${join(dir, 'scgi')};
  ${httpBlock.replaceAll('{{port}}', String(port))}
}
`)
  const child = spawnChild(NGINX, ['-p', dir, '-c', join(dir, 'nginx.conf'), '-g', 'daemon off;'])
  const deadline = Date.now() + 10_000
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = new Socket()
      socket.once('connect', () => { socket.destroy(); resolve(true) })
      socket.once('error', () => { resolve(false) })
      socket.connect(port, '127.0.0.1')
    })
    if (ok && childPids(child.pid).length > 0) break
    if (child.process.exitCode !== null || Date.now() > deadline) {
      let log = ''
      try { log = readFileSync(join(dir, 'error.log'), 'utf8') } catch { /* none */ }
      throw new Error(`nginx did not start: ${child.stderr()} ${log}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return { child, port, dir, pids: () => [child.pid, ...childPids(child.pid)] }
}

export interface CommandResult {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** Runs a command to completion (wrk, h2load), collecting its output. */
export function runCommand (command: string, args: readonly string[]): Promise<CommandResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] })
    children.add(child)
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (c: string) => { stdout += c })
    child.stderr.setEncoding('utf8').on('data', (c: string) => { stderr += c })
    child.on('error', reject)
    child.on('close', (code) => {
      children.delete(child)
      resolve({ code, stdout, stderr })
    })
  })
}
