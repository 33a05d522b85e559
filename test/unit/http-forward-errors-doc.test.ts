// STYLE "a test keeps codes, docs and types in step": every LLM client error code of
// lib/http-forward/errors.ts is in the table of docs/reliability.md with its status, and the
// table lists no code the router does not send.
import t from 'tap'
import { readFile } from 'node:fs/promises'
import { HTTP_ERRORS } from '../../lib/http-forward/errors.ts'

t.test('docs/reliability.md lists every LLM client error code with its status, and only those', async (t) => {
  const text = await readFile(new URL('../../docs/reliability.md', import.meta.url), 'utf8')
  const section = text.slice(text.indexOf('### LLM client errors'), text.indexOf('## Shutdown'))
  const documented: Record<string, number> = {}
  for (const line of section.split('\n')) {
    const match = /^\| `([a-z_]+)` \| (\d{3}) \|/.exec(line)
    if (match !== null) documented[match[1] as string] = Number(match[2])
  }
  const actual = Object.fromEntries(Object.entries(HTTP_ERRORS).map(([code, { status }]) => [code, status]))
  t.same(documented, actual)
})
