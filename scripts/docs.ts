/**
 * Renders the generated parts of the docs from the code, so they never disagree:
 * .env.example and the flag table of docs/configuration.md from lib/config/flags.ts, and the
 * metric table of docs/metrics.md from the metrics registry, and all of docs/errors.md from the
 * error catalogue (lib/errors.ts). `npm run docs` rewrites them; test/unit/docs-generated.test.ts
 * fails when they are stale.
 */
import { readFileSync, writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { Registry } from 'prom-client'
import { FLAGS, type FlagSpec } from '../lib/config/flags.ts'
import { createMetrics } from '../lib/metrics/metrics.ts'
import { ERROR_CATALOGUE } from '../lib/errors.ts'

export const ROOT = fileURLToPath(new URL('..', import.meta.url))

function marker (what: string): { begin: string, end: string } {
  return { begin: `<!-- BEGIN GENERATED ${what} (npm run docs) -->`, end: `<!-- END GENERATED ${what} -->` }
}

function shownDefault (spec: FlagSpec): string {
  if (spec.kind === 'bool') return spec.default ?? 'false'
  return spec.default ?? ''
}

export function renderEnvExample (): string {
  const lines = [
    '# Every stargate-router setting as an environment variable, with its default.',
    '# Flags (--name) win over these; uncomment a line to change a setting.',
    '# Generated from lib/config/flags.ts by `npm run docs`.',
    '',
  ]
  for (const spec of FLAGS) {
    const choices = spec.choices === undefined ? '' : ` (${spec.choices.join('|')})`
    lines.push(`# --${spec.name}: ${spec.help}${choices}`)
    const aliases = spec.env.slice(1)
    if (aliases.length > 0) lines.push(`#   also read from: ${aliases.join(', ')}`)
    lines.push(`# ${spec.env[0]}=${shownDefault(spec)}`)
    lines.push('')
  }
  return lines.join('\n')
}

export function renderFlagTable (): string {
  const rows = [
    '| flag | environment | default | meaning |',
    '|---|---|---|---|',
  ]
  for (const spec of FLAGS) {
    const def = shownDefault(spec)
    const choices = spec.choices === undefined ? '' : ` One of: ${spec.choices.map((c) => `\`${c}\``).join(', ')}.`
    rows.push(`| \`--${spec.name}\` | ${spec.env.map((e) => `\`${e}\``).join(', ')} | ${def === '' ? '(unset)' : `\`${def}\``} | ${spec.help.replaceAll('|', '\\|')}.${choices} |`)
  }
  return rows.join('\n')
}

/** Router metrics (not Node's default ones) as a table: name, type, labels, meaning. */
export function renderMetricTable (): string {
  const metrics = createMetrics(new Registry(), { defaultMetrics: false })
  const rows = ['| metric | type | labels | meaning |', '|---|---|---|---|']
  const all = metrics.registry.getMetricsAsArray() as unknown as Array<{ name: string, help: string, type: string, labelNames: readonly string[] }>
  for (const metric of [...all].sort((a, b) => a.name.localeCompare(b.name))) {
    const labels = metric.labelNames.map((l) => `\`${l}\``).join(', ')
    rows.push(`| \`${metric.name}\` | ${metric.type} | ${labels} | ${metric.help.replaceAll('|', '\\|')} |`)
  }
  return rows.join('\n')
}

function cell (text: string): string {
  return text.replaceAll('|', '\\|')
}

/** docs/errors.md: one table per area of lib/errors.ts (code, what the user sees, meaning, what to do). */
export function renderErrorsDoc (): string {
  const lines = [
    '# Errors',
    '',
    '<!-- Generated from lib/errors.ts by `npm run docs`; edit the tables there, not this file. -->',
    '',
    'Every error the router sends, by area, with what the user sees, what it means and what to do.',
    'Each table is defined next to the code that sends it (the file is named under each heading);',
    '`{name}` in a message is filled with a value when it is sent. Wire codes are the SPEC\'s.',
    '',
  ]
  for (const area of ERROR_CATALOGUE) {
    lines.push(`## ${area.title}`, '', `${area.where} Table: \`${area.table}\` in \`${area.file}\`.`, '')
    lines.push('| code | what the user sees | meaning | what to do |', '|---|---|---|---|')
    for (const row of area.rows) lines.push(`| \`${row.code}\` | ${cell(row.seen)} | ${cell(row.meaning)} | ${cell(row.action)} |`)
    lines.push('')
    for (const note of area.notes ?? []) lines.push(note, '')
  }
  return lines.join('\n')
}

export function replaceGenerated (current: string, what: string, body: string, file: string): string {
  const { begin, end } = marker(what)
  const from = current.indexOf(begin)
  const to = current.indexOf(end)
  if (from < 0 || to < from) throw new Error(`${file} must contain the markers ${begin} and ${end}`)
  return current.slice(0, from + begin.length) + '\n' + body + '\n' + current.slice(to)
}

/** Every generated file with the content it should have. */
export async function renderAll (): Promise<Array<{ path: string, content: string }>> {
  const configPath = `${ROOT}docs/configuration.md`
  const metricsPath = `${ROOT}docs/metrics.md`
  return [
    { path: `${ROOT}.env.example`, content: renderEnvExample() },
    { path: configPath, content: replaceGenerated(readFileSync(configPath, 'utf8'), 'FLAGS', renderFlagTable(), configPath) },
    { path: metricsPath, content: replaceGenerated(readFileSync(metricsPath, 'utf8'), 'METRICS', renderMetricTable(), metricsPath) },
    { path: `${ROOT}docs/errors.md`, content: renderErrorsDoc() },
  ]
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  for (const { path, content } of await renderAll()) writeFileSync(path, content)
  console.log('wrote .env.example, docs/configuration.md, docs/metrics.md, docs/errors.md')
}
