/**
 * Where the router's memory goes after load (docs/configuration.md, "Memory after load"): the
 * router as an operator runs it (file discovery, one pod answering 200 with keep-alive), with
 * its inspector open, through rounds of front-door connections (test/fixtures/front-door-load.ts,
 * 5,000 a round by default). After idle and after each round it reports RSS as the router left
 * it, with V8's committed heap, the mappings under 1 MiB V8 allocates its heap pages in and
 * malloc's main arena ([heap] in smaps); then it forces a full GC through the inspector
 * (HeapProfiler.collectGarbage, which V8 runs as a low-memory notification: memory-reducing
 * GCs that also give back pooled pages) and reports the JS heap after it and RSS again. With
 * --snapshots it also writes a heap snapshot (v8.writeHeapSnapshot) each time and prints which
 * constructors' counts changed between them, the way a retained object shows. Snapshots cost
 * native memory themselves, so take RSS figures from a run without them.
 *
 *   npx node scripts/memory-after-load.ts [--rounds 3] [--idle-wait-s 45] [--snapshots]
 *                                         [--node-options=--max-semi-space-size=16]
 *
 * It needs `ulimit -n` above 10,000 in the shell that runs it (the router child gets 20,000).
 */
import http from 'node:http'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { startReadyRouter } from '../test/fixtures/router-process.ts'
import { connectInspector, type Inspector } from '../test/fixtures/inspector.ts'
import { probe } from '../test/fixtures/fault-probe.ts'
import { ROUND_5000, roundSize, runRound } from '../test/fixtures/front-door-load.ts'
import { waitFor } from '../test/fixtures/wait.ts'

const { values: options } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    'idle-wait-s': { type: 'string', default: '0' },
    snapshots: { type: 'boolean', default: false },
    'node-options': { type: 'string', default: '' },
  },
})
const ROUNDS = Number(options.rounds)
const IDLE_WAIT_S = Number(options['idle-wait-s'])
const POD_IP = '127.0.1.171'
const HOST = 'stargate-0.stargate.external'
const MIB = 2 ** 20

const teardowns: Array<() => unknown> = []
const t = { teardown (fn: () => unknown): void { teardowns.push(fn) } }
const dir = mkdtempSync(join(tmpdir(), 'stargate-memory-'))
teardowns.push(() => { rmSync(dir, { recursive: true, force: true }) })

interface Mappings { readonly brk: number, readonly v8Pages: number, readonly lazyFree: number }

/** From /proc/<pid>/smaps: malloc's main arena, mappings under 1 MiB (V8's 256 KiB pages), MADV_FREE'd bytes. */
function mappings (pid: number): Mappings {
  let brk = 0
  let v8Pages = 0
  let lazyFree = 0
  let name = ''
  let size = 0
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$/.exec(line)
    if (head !== null) {
      name = head[3] ?? ''
      size = parseInt(head[2] as string, 16) - parseInt(head[1] as string, 16)
      continue
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line)
    if (rss !== null) {
      if (name === '[heap]') brk += Number(rss[1]) * 1024
      else if (name === '' && size < MIB) v8Pages += Number(rss[1]) * 1024
    }
    const lazy = /^LazyFree:\s+(\d+) kB/.exec(line)
    if (lazy !== null) lazyFree += Number(lazy[1]) * 1024
  }
  return { brk, v8Pages, lazyFree }
}

function rssOf (pid: number): number {
  return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024
}

/** Count and self size per constructor (object, closure and native nodes) of a heap snapshot. */
function constructors (file: string): Map<string, { count: number, size: number }> {
  const snapshot = JSON.parse(readFileSync(file, 'utf8')) as { snapshot: { meta: { node_fields: string[], node_types: [string[]] } }, nodes: number[], strings: string[] }
  const fields = snapshot.snapshot.meta.node_fields
  const types = snapshot.snapshot.meta.node_types[0]
  const [type, name, selfSize] = [fields.indexOf('type'), fields.indexOf('name'), fields.indexOf('self_size')]
  const out = new Map<string, { count: number, size: number }>()
  for (let i = 0; i < snapshot.nodes.length; i += fields.length) {
    const kind = types[snapshot.nodes[i + type] as number] ?? '?'
    if (kind !== 'object' && kind !== 'closure' && kind !== 'native') continue
    const key = `${kind} ${(snapshot.strings[snapshot.nodes[i + name] as number] ?? '').slice(0, 60)}`
    const entry = out.get(key) ?? { count: 0, size: 0 }
    entry.count++
    entry.size += snapshot.nodes[i + selfSize] as number
    out.set(key, entry)
  }
  return out
}

function printChanges (from: string, to: string, before: Map<string, { count: number, size: number }>, after: Map<string, { count: number, size: number }>): void {
  const changes = [...new Set([...before.keys(), ...after.keys()])]
    .map((key) => ({ key, count: (after.get(key)?.count ?? 0) - (before.get(key)?.count ?? 0), size: (after.get(key)?.size ?? 0) - (before.get(key)?.size ?? 0) }))
    .filter((c) => c.count !== 0)
    .sort((a, b) => Math.abs(b.size) - Math.abs(a.size))
  console.log(`constructors whose count changed, ${from} -> ${to}: ${changes.length === 0 ? 'none' : ''}`)
  for (const c of changes.slice(0, 20)) console.log(`  ${String(c.count).padStart(7)} ${(c.size / 1024).toFixed(1).padStart(9)} KiB  ${c.key}`)
}

async function measure (label: string, pid: number, inspector: Inspector, snapshots: Array<[string, string]>): Promise<void> {
  const f = (bytes: number): string => (bytes / MIB).toFixed(1)
  const rss = rssOf(pid)
  const heapTotal = await inspector.evaluate<number>('process.memoryUsage().heapTotal')
  const m = mappings(pid)
  const heapUsed = await inspector.heapUsedAfterGc()
  const reduced = mappings(pid)
  console.log(`${label.padEnd(20)} as left: RSS ${f(rss)} MiB, V8 committed ${f(heapTotal)} MiB, V8 page mappings ${f(m.v8Pages)} MiB, malloc [heap] ${f(m.brk)} MiB, LazyFree ${f(m.lazyFree)} MiB` +
    ` | after a memory-reducing GC: JS heap ${f(heapUsed)} MiB, RSS ${f(rssOf(pid))} MiB, V8 page mappings ${f(reduced.v8Pages)} MiB, malloc [heap] ${f(reduced.brk)} MiB`)
  if (options.snapshots) {
    const file = join(dir, `${snapshots.length}.heapsnapshot`)
    await inspector.evaluate(`process.getBuiltinModule('v8').writeHeapSnapshot(${JSON.stringify(file)})`)
    snapshots.push([label, file])
  }
}

try {
  const pod = http.createServer((req, res) => {
    req.resume()
    req.on('end', () => { res.writeHead(200, { 'content-type': 'application/json' }).end('{"object":"list","data":[]}') })
  })
  pod.keepAliveTimeout = 60_000
  await new Promise<void>((resolve) => { pod.listen(0, POD_IP, resolve) })
  teardowns.push(() => { pod.closeAllConnections(); pod.close() })
  const targets = join(dir, 'targets.yaml')
  writeFileSync(targets, `targets:\n  - {identity: stargate-0, address: ${POD_IP}, grpcPort: 50051, quicPort: 50052, httpPort: ${(pod.address() as AddressInfo).port}}\n`)
  const nodeOptions = `--inspect=127.0.0.1:0 ${options['node-options']}`.trim()
  const { p, health, frontDoor } = await startReadyRouter(t, ['--targets-file', targets], { fdLimit: 20_000, env: { NODE_OPTIONS: nodeOptions } })
  const pid = p.child.pid as number
  const inspector = await connectInspector(() => p.stderr())
  teardowns.push(() => { inspector.close() })
  const router = probe(health)
  console.log(`router pid ${pid}, NODE_OPTIONS ${nodeOptions}; rounds of ${roundSize(ROUND_5000)} connections (${JSON.stringify(ROUND_5000)})`)
  const snapshots: Array<[string, string]> = []
  await measure('idle', pid, inspector, snapshots)
  for (let round = 1; round <= ROUNDS; round++) {
    const started = performance.now()
    await runRound({ frontDoor, health }, HOST, ROUND_5000)
    await waitFor(async () => await router.metric('stargate_k8s_router_front_door_connections') === 0, { message: 'every connection closed', timeoutMs: 120_000 })
    console.log(`round ${round}: ${((performance.now() - started) / 1000).toFixed(1)} s`)
    await measure(`after round ${round}`, pid, inspector, snapshots)
  }
  if (IDLE_WAIT_S > 0) {
    await new Promise((resolve) => setTimeout(resolve, IDLE_WAIT_S * 1000))
    await measure(`idle ${IDLE_WAIT_S} s after`, pid, inspector, snapshots)
  }
  console.log(`native heap trims (lib/native-heap-trim.ts): ${await router.metric('stargate_k8s_router_native_heap_trims_total')}, ${((await router.metric('stargate_k8s_router_native_heap_released_bytes_total') ?? 0) / 2 ** 20).toFixed(1)} MiB given back`)
  for (let i = 1; i < snapshots.length; i++) {
    const [from, before] = snapshots[i - 1] as [string, string]
    const [to, after] = snapshots[i] as [string, string]
    printChanges(from, to, constructors(before), constructors(after))
  }
} finally {
  for (const fn of teardowns.reverse()) await fn()
}
