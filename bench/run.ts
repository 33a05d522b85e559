/**
 * Runs the benchmarks: `npm run bench` runs every bench/**\/*.bench.ts, `npm run bench --
 * routing` only those whose path contains "routing". Each file runs in its own Node process
 * (so one benchmark's JIT state and heap do not colour the next) with --expose-gc; its
 * output is shown as it comes, and its last stdout line, a JSON BenchResult (bench/_util.ts),
 * is collected for the summary table.
 *
 * `--write-doc` rewrites the generated results block of docs/benchmarks.md (between the
 * BEGIN/END GENERATED RESULTS markers; the prose around it is kept). The block has one
 * section per benchmark (`### <bench>`), each saying when, with which command, Node and CPU,
 * and at which load it was recorded. A run replaces the sections of the benchmarks it ran
 * and keeps the others, so `npm run bench -- --write-doc routing` updates routing/resolve
 * only; a whole-suite run replaces them all (and drops sections of benchmarks that no longer
 * exist). A missed target is reported in the table, not turned into a failure; a benchmark
 * that crashes or prints no result makes the exit code 1, and nothing is written.
 */
import { spawn } from 'node:child_process'
import { globSync, readFileSync, writeFileSync, existsSync } from 'node:fs'
import { cpus, loadavg, totalmem } from 'node:os'
import { fileURLToPath } from 'node:url'
import { relative } from 'node:path'
import { createInterface } from 'node:readline'
import { formatRatio, formatTargetBound, formatValue, type BenchResult, type CaseResult } from './_util.ts'

const ROOT = fileURLToPath(new URL('..', import.meta.url))
const DOC = `${ROOT}docs/benchmarks.md`
const BEGIN = '<!-- BEGIN GENERATED RESULTS (npm run bench -- --write-doc) -->'
const END = '<!-- END GENERATED RESULTS -->'

function usage (): string {
  return 'usage: npm run bench [-- [--write-doc] [filter ...]]\n' +
    '  filter      run only benchmarks whose path under bench/ contains it (e.g. routing)\n' +
    '  --write-doc rewrite the results of the benchmarks run in docs/benchmarks.md (others are kept)\n' +
    'environment: BENCH_MAX_ROUNDS, BENCH_MAX_SPREAD, BENCH_MAX_TIME_MS, BENCH_QUICK=1'
}

const args = process.argv.slice(2)
const writeDoc = args.includes('--write-doc')
if (args.includes('--help') || args.includes('-h')) {
  console.log(usage())
  process.exit(0)
}
const unknown = args.filter((a) => a.startsWith('-') && a !== '--write-doc')
if (unknown.length > 0) {
  console.error(`unknown option ${unknown.join(', ')}\n${usage()}`)
  process.exit(2)
}
const filters = args.filter((a) => !a.startsWith('-'))
if (writeDoc && process.env.BENCH_QUICK === '1') {
  console.error('--write-doc records figures; unset BENCH_QUICK')
  process.exit(2)
}

const files = globSync('bench/**/*.bench.ts', { cwd: ROOT })
  .map((f) => f.replaceAll('\\', '/'))
  .filter((f) => filters.length === 0 || filters.some((filter) => f.slice('bench/'.length).includes(filter)))
  .sort()
if (files.length === 0) {
  console.error(`no benchmark matches ${filters.join(', ')}`)
  process.exit(2)
}

interface Outcome {
  readonly file: string
  readonly result: BenchResult | null
  readonly error: string | null
}

/** Runs one benchmark file; echoes its output and parses its last stdout line. */
function runOne (file: string): Promise<Outcome> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--expose-gc', file], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] })
    let last = ''
    const lines = createInterface({ input: child.stdout })
    lines.on('line', (line) => {
      if (last !== '') console.log(last)
      last = line
    })
    const onSignal = (): void => { child.kill('SIGINT') }
    process.once('SIGINT', onSignal)
    child.on('close', (code, signal) => {
      process.off('SIGINT', onSignal)
      let result: BenchResult | null = null
      try {
        const parsed = JSON.parse(last) as BenchResult
        if (typeof parsed.bench === 'string' && Array.isArray(parsed.cases)) result = parsed
      } catch {
        if (last !== '') console.log(last)
      }
      const error = code !== 0 ? `exited with ${signal ?? code}` : result === null ? 'printed no JSON result line' : null
      resolve({ file, result, error })
    })
  })
}

function pad (s: string, n: number): string {
  return s + ' '.repeat(Math.max(0, n - [...s].length))
}

function cells (c: CaseResult): string[] {
  const p = (v: number): string => formatValue(v, c.unit)
  const spread = `${p(c.p10)} – ${p(c.p90)}`
  const mad = c.median > 0 ? `${(100 * c.mad / c.median).toFixed(1)}%` : '-'
  const rounds = `${c.rounds}${c.converged ? '' : ' (not converged)'}`
  const target = c.target === undefined ? '' : `${formatTargetBound(c)} ${c.pass === true ? 'pass' : 'MISS'}`
  return [c.name, p(c.median), spread, p(c.p99), mad, rounds, formatRatio(c), target]
}

const HEADER = ['case', 'median', 'p10 – p90', 'p99', 'MAD', 'rounds', 'vs baseline', 'target']

function textTable (results: readonly BenchResult[]): string {
  const rows: string[][] = []
  for (const r of results) {
    rows.push([`[${r.bench}]`, '', '', '', '', '', '', ''])
    for (const c of r.cases) rows.push(cells(c))
  }
  const widths = HEADER.map((h, i) => Math.max([...h].length, ...rows.map((row) => [...(row[i] ?? '')].length)))
  const line = (row: readonly string[]): string => row.map((cell, i) => pad(cell, widths[i] ?? 0)).join('  ').trimEnd()
  return [line(HEADER), ...rows.map(line)].join('\n')
}

function markdownEscape (s: string): string {
  return s.replaceAll('|', '\\|')
}

/** The line under a section heading that says how and where its figures were recorded. */
function recordedLine (command: string, started: Date, load: readonly number[]): string {
  const cpu = cpus()
  return `Recorded ${started.toISOString().replace(/\.\d+Z$/, 'Z')} with \`${command}\` · ` +
    `Node ${process.version} on ${process.platform}/${process.arch} · ` +
    `${cpu[0]?.model ?? 'unknown'} × ${cpu.length}${(cpu[0]?.speed ?? 0) > 0 ? ` at ${cpu[0]?.speed} MHz` : ''}, ${(totalmem() / 2 ** 30).toFixed(1)} GiB RAM · ` +
    `load average (1/5/15 min) when the run started: ${load.map((l) => l.toFixed(2)).join(' / ')}`
}

/** One `### <bench>` section of the results block. */
function section (r: BenchResult, recorded: string): string {
  const out = [`### ${r.bench}`, '', recorded, '']
  const info = Object.entries(r.info).filter(([k]) => k !== 'sink')
  if (info.length > 0) out.push(info.map(([k, v]) => `${k}: ${v}`).join(' · '), '')
  out.push(`| ${HEADER.join(' | ')} |`, `|${HEADER.map((_, i) => i === 0 ? '---' : '---:').join('|')}|`)
  for (const c of r.cases) out.push(`| ${cells(c).map(markdownEscape).join(' | ')} |`)
  const notes = r.cases.filter((c) => c.note !== undefined)
  if (notes.length > 0) {
    out.push('')
    for (const c of notes) out.push(`- *${markdownEscape(c.name)}*: ${c.note}`)
  }
  return out.join('\n').trimEnd()
}

const BLOCK_INTRO = 'Each section says when and how it was recorded: a filtered run ' +
  '(`npm run bench -- --write-doc routing`) replaces only the sections of the benchmarks it ran.'

/**
 * The sections of an existing results block by bench name. A block written before sections
 * carried their own "Recorded" line (one header for the whole suite) is migrated: each of its
 * sections gets that header's facts as its line.
 */
function parseSections (block: string): Map<string, string> {
  const sections = new Map<string, string>()
  const parts = block.split(/^(?=### )/m)
  const preamble = parts[0]?.startsWith('### ') === true ? '' : parts.shift() ?? ''
  let legacy = ''
  const recorded = /^Recorded (\S+) with (`[^`]*`)\.$/m.exec(preamble)
  if (recorded !== null) {
    const bullet = (prefix: string): string => preamble.split('\n').find((l) => l.startsWith(prefix))?.slice(prefix.length).trim() ?? ''
    legacy = `Recorded ${recorded[1] ?? ''} with ${recorded[2] ?? ''} · ${bullet('- Node ').replace(/^/, 'Node ')} · ${bullet('- CPU: ')} · ` +
      `load average (1/5/15 min) when the run started: ${bullet('- Load average (1/5/15 min) when the run started: ')}`
  }
  for (const part of parts) {
    const heading = part.slice(4, part.indexOf('\n') < 0 ? undefined : part.indexOf('\n')).trim()
    let body = part.trimEnd()
    if (!/^Recorded /m.test(body) && legacy !== '') body = body.replace(/^(### [^\n]*\n)\n?/, `$1\n${legacy}\n\n`)
    sections.set(heading, body)
  }
  return sections
}

function writeResults (results: readonly BenchResult[], recorded: string, wholeSuite: boolean): void {
  const current = existsSync(DOC) ? readFileSync(DOC, 'utf8') : '# Benchmarks\n'
  const from = current.indexOf(BEGIN)
  const to = current.indexOf(END)
  const existing = from >= 0 && to > from && !wholeSuite ? parseSections(current.slice(from + BEGIN.length, to)) : new Map<string, string>()
  for (const r of results) existing.set(r.bench, section(r, recorded))
  const body = [BLOCK_INTRO, ...[...existing.keys()].sort().map((name) => existing.get(name) as string)].join('\n\n')
  const next = from >= 0 && to > from
    ? current.slice(0, from + BEGIN.length) + '\n' + body + '\n' + current.slice(to)
    : current.trimEnd() + '\n\n## Results\n\n' + BEGIN + '\n' + body + '\n' + END + '\n'
  writeFileSync(DOC, next)
  console.log(`\nwrote ${relative(ROOT, DOC)}: ${results.map((r) => r.bench).join(', ')}`)
}

const started = new Date()
const load = loadavg()
const cpu = cpus()
console.log(`node ${process.version}, ${cpu[0]?.model ?? 'unknown CPU'} × ${cpu.length}, load ${load.map((l) => l.toFixed(2)).join(' ')}`)
const outcomes: Outcome[] = []
for (const file of files) {
  console.log(`\n${file}`)
  outcomes.push(await runOne(file))
}

const results = outcomes.flatMap((o) => o.result === null ? [] : [o.result])
console.log(`\n${textTable(results)}`)
const failed = outcomes.filter((o) => o.error !== null)
for (const o of failed) console.error(`${o.file}: ${o.error}`)
const misses = results.flatMap((r) => r.cases.filter((c) => c.pass === false).map((c) => `${r.bench}: ${c.name}`))
if (misses.length > 0) console.log(`\ntargets missed (reported, not failed):\n  ${misses.join('\n  ')}`)

if (writeDoc) {
  if (failed.length > 0) {
    console.error('not writing docs/benchmarks.md: a benchmark failed')
  } else {
    // The command as run, with any BENCH_* limits, so the figures can be reproduced.
    const env = Object.entries(process.env).filter(([k]) => k.startsWith('BENCH_')).map(([k, v]) => `${k}=${v ?? ''} `).sort().join('')
    const command = `${env}npm run bench -- --write-doc${filters.map((f) => ` ${f}`).join('')}`
    writeResults(results, recordedLine(command, started, load), filters.length === 0)
  }
}
process.exitCode = failed.length > 0 ? 1 : 0
