/**
 * The WebTransport test fixtures load @fails-components/webtransport's internal modules by file
 * URL (test/fixtures/webtransport-engine.ts): files outside the package's exports, which any
 * release may move or change. A range in package.json would let `npm install` pick such a
 * release and break the fixtures far from the cause, so the version is pinned exactly and must
 * be the one installed.
 */
import t from 'tap'
import { readFile } from 'node:fs/promises'

const root = new URL('../../', import.meta.url)

t.test('the package whose internal files the fixtures load is pinned to one exact version, the installed one', async (t) => {
  const pkg = JSON.parse(await readFile(new URL('package.json', root), 'utf8')) as { devDependencies: Record<string, string> }
  const wanted = pkg.devDependencies['@fails-components/webtransport']
  t.match(wanted, /^\d+\.\d+\.\d+$/, `package.json pins an exact version, got '${String(wanted)}'`)
  const installed = JSON.parse(await readFile(new URL('node_modules/@fails-components/webtransport/package.json', root), 'utf8')) as { version: string }
  t.equal(installed.version, wanted, 'and that version is installed')
  const fixture = await readFile(new URL('test/fixtures/webtransport-engine.ts', root), 'utf8')
  for (const file of ['./session.js', './http2/session.js', './http2/node/capsuleparser.js']) {
    t.ok(fixture.includes(`'${file}'`), `the fixture loads ${file}`)
    await t.resolves(readFile(new URL(file, import.meta.resolve('@fails-components/webtransport'))), `${file} exists next to the entry point`)
  }
})
