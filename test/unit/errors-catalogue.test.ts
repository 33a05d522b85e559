// As STYLE asks ("a test keeps codes, docs and types in step", as fastify's
// test/internals/errors.test.js): every code of the error catalogue (lib/errors.ts) is
// documented, is sent by some source file, and docs/errors.md is what `npm run docs` renders.
// A code nobody references is a stale row: the docs would promise an error that never comes.
import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { ERROR_CATALOGUE } from '../../lib/errors.ts'
import { renderErrorsDoc, ROOT } from '../../scripts/docs.ts'

function sources (dir: string): string[] {
  const out: string[] = []
  for (const entry of readdirSync(join(ROOT, dir), { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) {
      if (entry.name !== 'gen' && entry.name !== 'native') out.push(...sources(path))
    } else if (entry.name.endsWith('.ts')) {
      out.push(path)
    }
  }
  return out
}

/** The file's text without the table literal itself, which names every code by definition. */
function withoutTable (text: string, table: string): string {
  const from = text.indexOf(`export const ${table} = {`)
  if (from < 0) return text
  const to = text.indexOf('\n} as const', from)
  return text.slice(0, from) + text.slice(to < 0 ? text.length : to)
}

t.test('every area names a table that its file defines', async (t) => {
  for (const area of ERROR_CATALOGUE) {
    t.match(readFileSync(join(ROOT, area.file), 'utf8'), `export const ${area.table} = {`, `${area.table} is defined in ${area.file}`)
    t.ok(area.rows.length > 0, `${area.table} has codes`)
  }
})

t.test('every code has what the user sees, a meaning and what to do, once per table', async (t) => {
  for (const area of ERROR_CATALOGUE) {
    const seen = new Set<string>()
    for (const row of area.rows) {
      t.match(row.code, /^[a-z][a-z0-9_]*$/, `${area.table}: ${row.code} is a lower-case wire code`)
      t.notOk(seen.has(row.code), `${area.table}: ${row.code} once`)
      seen.add(row.code)
      for (const field of ['seen', 'meaning', 'action'] as const) t.ok(row[field].trim().length > 0, `${area.table}.${row.code} has ${field}`)
    }
  }
})

t.test('every code is sent by some source file (no unused code)', async (t) => {
  const files = [...sources('lib'), ...sources('server')].filter((file) => file !== join('lib', 'errors.ts'))
  const texts = new Map(files.map((file) => [file, readFileSync(join(ROOT, file), 'utf8')]))
  for (const area of ERROR_CATALOGUE) {
    for (const { code } of area.rows) {
      // A quoted literal ('code', as a typed outcome or argument) or a property access (TABLE.code).
      const reference = new RegExp(`'${code}'|\\.${code}\\b`)
      const users = [...texts].filter(([file, text]) => reference.test(file === area.file ? withoutTable(text, area.table) : text)).map(([file]) => file)
      t.ok(users.length > 0, `${area.table}.${code} is referenced outside its table`)
    }
  }
})

t.test('docs/errors.md is what npm run docs renders, and lists every code', async (t) => {
  const doc = readFileSync(join(ROOT, 'docs/errors.md'), 'utf8')
  t.equal(doc, renderErrorsDoc(), 'docs/errors.md is stale: run npm run docs')
  for (const area of ERROR_CATALOGUE) {
    const section = doc.slice(doc.indexOf(`## ${area.title}\n`))
    for (const { code } of area.rows) t.match(section, `| \`${code}\` |`, `docs/errors.md documents ${area.table}.${code}`)
  }
})
