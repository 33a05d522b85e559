// The image. The Dockerfile is multi-stage (a builder that compiles the QUIC addon over
// Debian's ngtcp2 + GnuTLS with npm ci, a slim runtime with their shared libraries) and answers
// to /usr/local/bin/stargate-k8s-router, as the Rust router's image does. These are the facts
// `npm run image-smoke` relies on, read by the same parser it uses (scripts/dockerfile.ts), and
// the parser's refusals of what it cannot emulate.
import t from 'tap'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { matchesGlob } from 'node:path'
import { fileURLToPath } from 'node:url'
import { DockerfileError, imageConfigOf, logicalLines, parseDockerfile, type Instruction, type Stage } from '../../scripts/dockerfile.ts'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const stages = parseDockerfile(await readFile(join(ROOT, 'Dockerfile'), 'utf8'))

function runs (stage: Stage): string[] {
  return stage.instructions.flatMap((i) => i.kind === 'run' ? [i.command] : [])
}

function copies (stage: Stage): Array<Extract<Instruction, { kind: 'copy' }>> {
  return stage.instructions.flatMap((i) => i.kind === 'copy' ? [i] : [])
}

t.test('two stages: a node:24-bookworm builder and a node:24-bookworm-slim runtime', async (t) => {
  t.strictSame(stages.map((s) => [s.name, s.base]), [['builder', 'node:24-bookworm'], ['runtime', 'node:24-bookworm-slim']])
})

t.test('the builder installs the compiler and the -dev packages, and runs npm ci --omit=dev after copying the sources', async (t) => {
  const builder = stages[0] as Stage
  const install = runs(builder).find((r) => r.includes('apt-get install')) ?? ''
  for (const pkg of ['libngtcp2-dev', 'libngtcp2-crypto-gnutls-dev', 'libgnutls28-dev', 'g++', 'make', 'python3', 'pkg-config']) {
    t.ok(install.split(/\s+/).includes(pkg), `installs ${pkg}`)
  }
  const steps = builder.instructions.map((i) => i.kind === 'copy' ? `copy ${i.sources.join(' ')}` : i.kind === 'run' ? `run ${i.command.slice(0, 6)}` : i.kind)
  const npmCi = steps.indexOf('run npm ci')
  t.ok(npmCi > steps.indexOf('copy lib'), 'lib (with the addon sources) is in place before npm ci builds it')
  t.ok(npmCi > steps.indexOf('copy package.json package-lock.json'), 'and the lockfile')
  t.match(runs(builder).find((r) => r.startsWith('npm ci')), /--omit=dev/)
  t.equal(imageConfigOf(builder).env.get('npm_config_nodedir'), '/usr/local', 'node-gyp builds against the image\'s own Node.js headers')
})

t.test('the runtime has the shared libraries, the app from the builder, the wrapper, and runs as node', async (t) => {
  const runtime = stages[1] as Stage
  const install = runs(runtime).find((r) => r.includes('apt-get install')) ?? ''
  for (const pkg of ['libngtcp2-9', 'libngtcp2-crypto-gnutls2', 'libgnutls30']) t.ok(install.split(/\s+/).includes(pkg), `installs ${pkg}`)
  t.notMatch(install, /-dev\b|g\+\+|\bmake\b/, 'no compiler or -dev package in the runtime')
  const fromBuilder = copies(runtime).filter((c) => c.from === 'builder').flatMap((c) => c.sources)
  for (const path of ['/app/node_modules', '/app/lib', '/app/server', '/app/package.json']) t.ok(fromBuilder.includes(path), `${path} comes from the builder`)
  const wrapper = copies(runtime).find((c) => c.dest === '/usr/local/bin/stargate-k8s-router')
  t.strictSame(wrapper?.sources, ['server/stargate-k8s-router.sh'], '/usr/local/bin/stargate-k8s-router, the Rust router\'s binary name')
  const image = imageConfigOf(runtime)
  t.equal(image.user, 'node')
  t.equal(image.env.get('NODE_ENV'), 'production')
  t.strictSame(image.entrypoint, ['/usr/local/bin/stargate-k8s-router'])
  const script = await readFile(join(ROOT, 'server', 'stargate-k8s-router.sh'), 'utf8')
  t.match(script, /^#!\/bin\/sh\n/, 'a POSIX shell script (bookworm-slim has /bin/sh)')
  t.match(script, /\nexec node \/app\/server\/main\.ts "\$@"\n/, 'exec (node receives the signals) with the same arguments')
})

t.test('.dockerignore keeps no COPY source of the build context out, and keeps the caches out', async (t) => {
  const patterns = (await readFile(join(ROOT, '.dockerignore'), 'utf8')).split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'))
  const excluded = (rel: string): boolean => patterns.some((p) => rel.split('/').some((_, i, parts) => matchesGlob(parts.slice(0, i + 1).join('/'), p)))
  for (const copy of stages.flatMap(copies).filter((c) => c.from === null)) {
    for (const source of copy.sources) t.notOk(excluded(source), `${source} reaches the build`)
  }
  for (const path of ['node_modules', '.cache', '.git', 'test']) t.ok(excluded(path), `${path} stays out of the build context`)
})

t.test('the parser joins continuations, drops comments, and refuses what image-smoke cannot emulate', async (t) => {
  t.strictSame(logicalLines('FROM a\n# c\nRUN x \\\n  # inner comment\n  && y\n\nUSER n\n'), [
    { line: 1, text: 'FROM a' }, { line: 3, text: 'RUN x && y' }, { line: 7, text: 'USER n' },
  ])
  const cases: Array<[string, string, RegExp]> = [
    ['an unknown instruction', 'FROM a\nHEALTHCHECK CMD true\n', /line 2: HEALTHCHECK is not an instruction/],
    ['ENTRYPOINT in shell form', 'FROM a\nENTRYPOINT node main.ts\n', /line 2: ENTRYPOINT must be in exec form/],
    ['a wildcard COPY', 'FROM a\nCOPY *.json ./\n', /line 2: COPY sources with wildcards/],
    ['COPY --chown', 'FROM a\nCOPY --chown=node a b\n', /line 2: COPY --chown=node is not supported/],
    ['several sources into a file', 'FROM a\nCOPY a b c\n', /line 2: COPY of several sources needs a destination ending in \//],
    ['an instruction before FROM', 'RUN true\n', /line 1: RUN before the first FROM/],
    ['an ENV with a variable', 'FROM a\nENV P=$PATH:/x\n', /line 2: ENV values with quotes or variables/],
  ]
  for (const [why, text, message] of cases) {
    const err = t.throws(() => parseDockerfile(text), why) as unknown
    t.ok(err instanceof DockerfileError, why)
    t.match((err as Error).message, message, why)
  }
  const parsed = parseDockerfile('FROM a AS b\nENV A=1 B=2\nENV C three words\nWORKDIR /app\nWORKDIR sub\nCOPY --from=b /x /y\nCMD ["x"]\n')
  const config = imageConfigOf(parsed[0] as Stage)
  t.strictSame([config.env.get('A'), config.env.get('B'), config.env.get('C'), config.workdir, config.cmd], ['1', '2', 'three words', '/app/sub', ['x']])
})
