// docs/architecture.md opens with the map of lib/ and server/ (one line per TypeScript module
// and per C source and header of the QUIC engine) and walks a registration, a raw QUIC tunnel,
// a WebTransport session and a TLS rotation on the tunnel port through the files in the order
// the work passes them. Failure modes this catches: a module or C file without a line, or a
// line for one that is gone; a walk that skips a file the work goes through (two consecutive
// steps that neither import each other nor share the function the step names); a walk whose
// length differs from the figures the doc states; a walk that climbs into server/.
import t from 'tap'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { figuresOf, joinOf, stepsOf, walkProblems, type ReadSource } from './docs-walks.ts'

const root = fileURLToPath(new URL('../..', import.meta.url))
const doc = readFileSync(join(root, 'docs/architecture.md'), 'utf8')
const ENGINE_SOURCES = 'lib/quic/native/src'

/** TypeScript modules of a tree (generated protobuf code and the addon's folder apart). */
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

/** The C sources and headers of the QUIC engine (not its build output). */
function engineSources (): string[] {
  return readdirSync(join(root, ENGINE_SOURCES)).filter((name) => name.endsWith('.c') || name.endsWith('.h')).map((name) => `${ENGINE_SOURCES}/${name}`)
}

function section (heading: string): string {
  const start = doc.indexOf(`\n## ${heading}\n`)
  if (start < 0) throw new Error(`docs/architecture.md has no section "${heading}"`)
  const end = doc.indexOf('\n## ', start + 1)
  return doc.slice(start, end < 0 ? undefined : end)
}

const readRepo: ReadSource = (path) => existsSync(join(root, path)) ? readFileSync(join(root, path), 'utf8') : null

t.test('the map lists every module of lib/ and server/ and every C file of the engine once, and nothing that is gone', async (t) => {
  const tree = [...modules('lib'), ...modules('server'), ...engineSources()].sort()
  const listed = [...section('Map of lib/ and server/').matchAll(/^- `((?:lib|server)\/[^`]+\.(?:ts|c|h))`: \S/gm)].map((m) => m[1] as string)
  t.ok(engineSources().length > 0, 'the engine has C sources')
  t.same(tree.filter((path) => !listed.includes(path)), [], 'files without a line in the map')
  t.same(listed.filter((path) => !tree.includes(path)), [], 'lines for files that do not exist')
  t.equal(new Set(listed).size, listed.length, 'no file listed twice')
})

t.test('the map comes first, before the other sections', async (t) => {
  const firstSection = doc.match(/^## (.+)$/m)?.[1]
  t.equal(firstSection, 'Map of lib/ and server/')
})

const WALKS = [
  'One registration (RegisterInferenceServer)',
  'One raw QUIC tunnel',
  'One WebTransport session (over HTTP/3)',
  'One TLS rotation on the tunnel port (kubelet swaps the identity Secret)',
]

/** The walks' table: per walk, the figures the doc states. */
function statedFigures (text: string): Map<string, number[]> {
  const rows = new Map<string, number[]>()
  for (const line of text.split('\n')) {
    const cells = line.split('|').slice(1, -1).map((cell) => cell.trim())
    const name = cells[0]
    if (name === undefined || !WALKS.includes(name)) continue
    rows.set(name, cells.slice(1, 6).map(Number))
  }
  return rows
}

t.test('each walk is the path the code takes: every file exists, every consecutive pair is joined, the figures are the stated ones, none enters server/', async (t) => {
  const text = section('Four walks')
  const walks = text.split('\n### ').slice(1)
  t.same(walks.map((walk) => walk.slice(0, walk.indexOf('\n'))), WALKS)
  const stated = statedFigures(text.slice(0, text.indexOf('\n### ')))
  for (const walk of walks) {
    const name = walk.slice(0, walk.indexOf('\n'))
    t.same(walkProblems(walk, readRepo), [], `${name}: every step's file exists and is joined to the previous one`)
    const figures = figuresOf(walk)
    t.same(stated.get(name), [figures.files, figures.typescript, figures.c, figures.crossings, figures.server],
      `${name}: the table states what the walk measures (files, TypeScript, C, crossings, server/)`)
    t.equal(figures.server, 0, `${name}: no step in server/ (wiring only)`)
  }
})

// The check itself, on a small synthetic tree: it must fail a walk with an unjoined pair.
t.test('the walk check reports an unjoined pair and passes joined ones', async (t) => {
  const files: Record<string, string> = {
    'lib/a.ts': "import { b } from './b.ts'\nexport const a = () => b()\n",
    'lib/b.ts': 'export function b (): number { return 1 }\n',
    'lib/c.ts': '// onReady is mentioned only here, in a comment\nexport const c = 2\n',
    'lib/d.ts': 'export function start (native: { onReady (): void }) { native.onReady() }\n',
    'lib/p.ts': 'const onReady = 1\nexport const p = onReady\n',
    'lib/k.ts': 'export class K { check (): void {} }\n',
    'lib/m.ts': 'export const m = (x: { check (): void }) => { x.check() }\n',
    'lib/h.ts': "import { I } from './i.ts'\nexport const h = (x: I) => { x.check() }\n",
    'lib/i.ts': 'export class I { check (): void {} }\n',
    'lib/n/e.c': '#include "q.h"\nvoid q_run(void) {}\nstatic const char *names[] = {"onReady"};\n',
    'lib/n/f.c': '#include "q.h"\nvoid f(void) { q_run(); q_local(); }\n',
    'lib/n/g.c': 'void g(void) { q_local(); }\n',
    'lib/n/q.h': '#include "v.h"\nvoid q_run(void);\n',
    'lib/n/v.h': 'int v_get(void);\n',
  }
  const read: ReadSource = (path) => files[path] ?? null
  const walk = (...steps: string[]): string => `x\n${steps.map((step, i) => `${i + 1}. ${step}`).join('\n')}\n`

  t.same(walkProblems(walk('`lib/a.ts`: start.', '`lib/b.ts`: `b()`.'), read), [], 'an import joins')
  t.same(walkProblems(walk('`lib/b.ts`: start.', '`lib/a.ts`: back.'), read), [], 'an import joins either way')
  t.same(walkProblems(walk('`lib/d.ts`: start.', '`lib/n/e.c`: `onReady`.'), read), [], 'a function the addon registers and TypeScript calls joins')
  t.same(walkProblems(walk('`lib/m.ts`: start.', '`lib/k.ts`: `check`.'), read), [], 'a method one defines and the other calls joins')
  t.same(walkProblems(walk('`lib/n/e.c`: start.', '`lib/n/q.h`: declares.'), read), [], 'an include joins a C file and its header')
  t.same(walkProblems(walk('`lib/n/e.c`: start.', '`lib/n/v.h`: `v_get`.'), read), [], 'so does an include through another header')
  t.same(walkProblems(walk('`lib/n/e.c`: start.', '`lib/n/f.c`: `q_run()`.'), read), [], 'a function declared in a header both include joins two C files')

  const unjoined = walkProblems(walk('`lib/b.ts`: start.', '`lib/c.ts`: `onReady`.'), read)
  t.equal(unjoined.length, 1, 'an unjoined pair is reported')
  t.match(unjoined[0], /step 2: lib\/b\.ts → lib\/c\.ts is not joined/)
  t.equal(walkProblems(walk('`lib/d.ts`: start.', '`lib/c.ts`: `onReady`.'), read).length, 1, 'a name only in a comment does not join')
  t.equal(walkProblems(walk('`lib/p.ts`: start.', '`lib/n/e.c`: `onReady`.'), read).length, 1, 'a name used but not called as a member does not join')
  t.equal(walkProblems(walk('`lib/h.ts`: start.', '`lib/k.ts`: `check`.'), read).length, 1, 'a call that resolves to another import\'s definition does not join')
  t.equal(walkProblems(walk('`lib/n/f.c`: start.', '`lib/n/g.c`: `q_local`.'), read).length, 1, 'a name no shared header declares does not join two C files')
  t.same(walkProblems(walk('`lib/a.ts`: start.', '`lib/z.ts`: `b`.'), read).filter((p) => p.includes('does not exist')), ['step 2: lib/z.ts does not exist'], 'a missing file is reported')
  t.same(walkProblems(walk('`lib/a.ts`: start, see `lib/c.ts`.', '`lib/b.ts`: `b`.'), read), ['lib/c.ts is named but is no step\'s file'], 'a file named but not walked is reported')

  t.equal(joinOf('lib/a.ts', 'lib/b.ts', [], read), 'lib/a.ts imports lib/b.ts')
  t.same(stepsOf(walk('`lib/a.ts`: `x.onReady()` and `#dispatch`.')).map((step) => step.names), [['onReady', '#dispatch']])
  t.same(figuresOf(walk('`lib/d.ts`: a.', '`lib/n/e.c`: `onReady`.', '`lib/n/f.c`: `q_run`.', '`lib/d.ts`: back.')),
    { files: 3, typescript: 1, c: 2, crossings: 2, server: 0 })
})
