// SPEC §5: the generated protobuf code is committed and must match the .proto. This test
// regenerates it with the pinned buf and protoc-gen-es from node_modules into a temporary
// copy and fails on any difference (as fastify's test:validator:integrity does).
import t from 'tap'
import { execFile } from 'node:child_process'
import { cp, mkdtemp, readdir, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { delimiter, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'

const run = promisify(execFile)
const root = fileURLToPath(new URL('../../', import.meta.url))
const bin = join(root, 'node_modules', '.bin')
const committed = join(root, 'lib', 'control-plane', 'gen')

async function filesUnder (dir: string): Promise<Map<string, string>> {
  const files = new Map<string, string>()
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue
    const path = join(entry.parentPath, entry.name)
    files.set(relative(dir, path), await readFile(path, 'utf8'))
  }
  return files
}

t.test('the committed generated code is what buf generate produces from the .proto', async (t) => {
  const work = await mkdtemp(join(tmpdir(), 'stargate-buf-'))
  t.teardown(() => rm(work, { recursive: true, force: true }))
  await cp(join(root, 'lib', 'control-plane', 'proto'), join(work, 'proto'), { recursive: true })
  // buf.gen.yaml writes to ../gen, so the copy's output lands in work/gen.
  await run(join(bin, 'buf'), ['generate'], {
    cwd: join(work, 'proto'),
    // protoc-gen-es and the node it runs on (Node 24) come from node_modules/.bin.
    env: { ...process.env, PATH: `${bin}${delimiter}${process.env.PATH ?? ''}`, BUF_CACHE_DIR: join(work, 'cache') },
    timeout: 60_000,
  })
  const fresh = await filesUnder(join(work, 'gen'))
  const current = await filesUnder(committed)
  t.ok(fresh.size > 0, 'buf generated files')
  t.strictSame([...current.keys()].sort(), [...fresh.keys()].sort(), 'the same files are generated (if not, the committed code is stale: run npm run generate)')
  for (const [path, content] of fresh) {
    t.equal(current.get(path), content, `lib/control-plane/gen/${path} is current (if not: run npm run generate)`)
  }
})
