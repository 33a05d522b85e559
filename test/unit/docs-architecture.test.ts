// Issue 17 "Proof": docs/architecture.md opens with the map of lib/ and server/ (one line per
// TypeScript module and per C source and header of the QUIC engine) and walks a registration, a raw QUIC tunnel, a WebTransport session and a TLS reload
// through the files in order, each walk touching at most 8 files. This keeps the map in step
// with the tree (a new module without a line, or a line for a module that is gone, fails) and
// the walks short (a walk that needs more files says the code is too spread).
import t from 'tap'
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('../..', import.meta.url))
const doc = readFileSync(join(root, 'docs/architecture.md'), 'utf8')

function modules (dir: string): string[] {
  const found: string[] = []
  for (const name of readdirSync(join(root, dir))) {
    const path = join(dir, name)
    if (statSync(join(root, path)).isDirectory()) {
      if (name !== 'gen' && name !== 'native') found.push(...modules(path))
    } else if (name.endsWith('.ts')) {
      found.push(relative('.', path))
    }
  }
  return found
}

function section (heading: string): string {
  const start = doc.indexOf(`\n## ${heading}\n`)
  if (start < 0) throw new Error(`docs/architecture.md has no section "${heading}"`)
  const end = doc.indexOf('\n## ', start + 1)
  return doc.slice(start, end < 0 ? undefined : end)
}

/** The C sources and headers of the QUIC engine (not its build output). */
function engineSources (): string[] {
  const dir = 'lib/quic/native/src'
  return readdirSync(join(root, dir)).filter((name) => name.endsWith('.c') || name.endsWith('.h')).map((name) => `${dir}/${name}`)
}

const paths = (text: string): string[] => [...text.matchAll(/`((?:lib|server)\/[a-z0-9/.-]+\.ts)`/g)].map((m) => m[1] as string)

t.test('the map lists every module of lib/ and server/ and every C file of the engine once, and nothing that is gone', async (t) => {
  const tree = [...modules('lib'), ...modules('server'), ...engineSources()].sort()
  const listed = [...section('Map of lib/ and server/').matchAll(/^- `((?:lib|server)\/[^`]+\.(?:ts|c|h))`: \S/gm)].map((m) => m[1] as string)
  t.ok(engineSources().length > 0, 'the engine has C sources')
  t.same(tree.filter((path) => !listed.includes(path)), [], 'modules without a line in the map')
  t.same(listed.filter((path) => !tree.includes(path)), [], 'lines for modules that do not exist')
  t.equal(new Set(listed).size, listed.length, 'no module listed twice')
})

t.test('the map comes first, before the other sections', async (t) => {
  const firstSection = doc.match(/^## (.+)$/m)?.[1]
  t.equal(firstSection, 'Map of lib/ and server/')
})

t.test('each of the four walks touches at most 8 files, all of which exist', async (t) => {
  const walks = section('Four walks').split('\n### ').slice(1)
  t.same(walks.map((walk) => walk.slice(0, walk.indexOf('\n'))), [
    'One registration (RegisterInferenceServer)',
    'One raw QUIC tunnel',
    'One WebTransport session (over HTTP/3)',
    'One TLS reload (kubelet swaps a Secret\'s `..data`)',
  ])
  const tree = new Set([...modules('lib'), ...modules('server')])
  for (const walk of walks) {
    const name = walk.slice(0, walk.indexOf('\n'))
    const files = new Set(paths(walk))
    t.ok(files.size >= 3 && files.size <= 8, `${name}: ${files.size} files`)
    for (const file of files) t.ok(tree.has(file), `${name}: ${file} exists`)
  }
})
