// The flag table, .env.example and the metric table are generated from the code; a change to
// flags or metrics without `npm run docs` leaves them stale and fails here.
import t from 'tap'
import { readFileSync } from 'node:fs'
import { renderAll } from '../../scripts/docs.ts'
import { FLAGS } from '../../lib/config/flags.ts'
import { helpText } from '../../lib/config/config.ts'

t.test('generated docs match the flag table and the metrics registry', async (t) => {
  for (const { path, content } of await renderAll()) {
    t.equal(readFileSync(path, 'utf8'), content, `${path} is stale: run npm run docs`)
  }
})

t.test('every flag appears in --help, .env.example and docs/configuration.md', async (t) => {
  const env = readFileSync(new URL('../../.env.example', import.meta.url), 'utf8')
  const doc = readFileSync(new URL('../../docs/configuration.md', import.meta.url), 'utf8')
  const help = helpText()
  for (const spec of FLAGS) {
    t.match(help, `--${spec.name}`, `--help lists --${spec.name}`)
    for (const name of spec.env) t.match(env, name, `.env.example lists ${name}`)
    t.match(doc, `\`--${spec.name}\``, `docs/configuration.md lists --${spec.name}`)
  }
})

t.test('the migration guide maps every flag, by name or by a family written `--prefix-*`', async (t) => {
  const guide = readFileSync(new URL('../../docs/migrating-from-stargate-k8s-router.md', import.meta.url), 'utf8')
  const families = [...guide.matchAll(/`--([a-z0-9-]+)-\*`/g)].map((m) => `${m[1] as string}-`)
  for (const spec of FLAGS) {
    const named = new RegExp(`--${spec.name}(?![a-z0-9-])`).test(guide)
    t.ok(named || families.some((prefix) => spec.name.startsWith(prefix)), `docs/migrating-from-stargate-k8s-router.md maps --${spec.name}`)
  }
})
