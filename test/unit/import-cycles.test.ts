// No import cycle among the modules of lib/ and server/ (lib/quic endpoint↔engine and
// server/tunnels↔the tunnel wiring were broken by moving the shared types down). A cycle makes
// load order matter and two modules one; this reads every import and export-from (type-only
// ones too: they tie the modules as much for a reader) and fails naming the modules of any
// strongly connected set. Pure file reading, no module is loaded.
import t from 'tap'
import { readFileSync, readdirSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..')
const IMPORT = /^\s*(?:import|export)\s[^'";]*?from\s+'(\.{1,2}\/[^']+)'|\bimport\(\s*'(\.{1,2}\/[^']+)'\s*\)/gm

function sourcesUnder (dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts'))
    .map((entry) => join(entry.parentPath, entry.name))
    .filter((path) => !path.includes('/node_modules/'))
}

/** Module → the local modules it imports. */
function importGraph (files: readonly string[]): Map<string, string[]> {
  const known = new Set(files)
  const graph = new Map<string, string[]>()
  for (const file of files) {
    const deps: string[] = []
    for (const match of readFileSync(file, 'utf8').matchAll(IMPORT)) {
      const target = resolve(dirname(file), match[1] ?? match[2] ?? '')
      if (known.has(target)) deps.push(target)
    }
    graph.set(file, deps)
  }
  return graph
}

/** Tarjan's strongly connected components with more than one module, or one importing itself. */
export function cycles (graph: ReadonlyMap<string, readonly string[]>): string[][] {
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const onStack = new Set<string>()
  const found: string[][] = []
  const visit = (v: string): void => {
    index.set(v, index.size)
    low.set(v, index.get(v) ?? 0)
    stack.push(v)
    onStack.add(v)
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w)
        low.set(v, Math.min(low.get(v) ?? 0, low.get(w) ?? 0))
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v) ?? 0, index.get(w) ?? 0))
    }
    if (low.get(v) !== index.get(v)) return
    const component: string[] = []
    let w: string | undefined
    do {
      w = stack.pop()
      if (w === undefined) break
      onStack.delete(w)
      component.push(w)
    } while (w !== v)
    if (component.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(component.sort())
  }
  for (const v of graph.keys()) if (!index.has(v)) visit(v)
  return found
}

t.test('the cycle finder finds a cycle and passes a chain', async (t) => {
  t.strictSame(cycles(new Map([['a', ['b']], ['b', ['c']], ['c', ['a']], ['d', ['a']]])), [['a', 'b', 'c']])
  t.strictSame(cycles(new Map([['a', ['b']], ['b', ['c']], ['c', []]])), [])
})

t.test('no module of lib/ or server/ imports itself through others', async (t) => {
  const files = [...sourcesUnder(join(ROOT, 'lib')), ...sourcesUnder(join(ROOT, 'server'))]
  t.ok(files.length > 100, `read ${files.length} modules`)
  const graph = importGraph(files)
  t.ok([...graph.values()].some((deps) => deps.length > 0), 'imports were found')
  t.strictSame(cycles(graph).map((component) => component.map((file) => relative(ROOT, file))), [])
})
