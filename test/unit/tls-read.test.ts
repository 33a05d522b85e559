// SPEC §8 "Read one generation": the certificate and key come from the same kubelet
// generation even when `..data` is swapped or the old generation deleted in the middle of the
// read, files are capped at 1 MiB (exactly 1 MiB allowed), and failures are clean values, never
// crashes. The projected-volume fixture writes directories exactly as kubelet's atomic writer.
import t, { type Test } from 'tap'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createSecureContext } from 'node:tls'
import { MATERIAL_MAX_BYTES, readMaterialFiles } from '../../lib/tls/read.ts'
import { validateServerIdentity } from '../../lib/tls/validate.ts'
import { ProjectedVolume, writePlainFiles } from '../fixtures/projected-volume.ts'
import { createCa, createLeaf, type Leaf } from '../fixtures/certs.ts'

const ca = await createCa({ name: 'read test ca' })
const first = await createLeaf(ca, { dnsNames: ['gen1.example'] })
const second = await createLeaf(ca, { dnsNames: ['gen2.example'] })

function filesOf (leaf: Leaf): Record<string, string> {
  return { 'tls.crt': leaf.chainPem, 'tls.key': leaf.keyPem }
}

async function tempDir (t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'stargate-tls-read-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

/** PEM text padded with a trailing comment and newlines to exactly size bytes. */
function paddedTo (pem: string, size: number): string {
  const filler = size - Buffer.byteLength(pem) - 2
  if (filler < 0) throw new Error('pem is larger than the target size')
  const out = pem + '#' + ' '.repeat(filler) + '\n'
  if (Buffer.byteLength(out) !== size) throw new Error('padding is off')
  return out
}

t.test('a projected volume is read through its current generation', async (t) => {
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'tls'), filesOf(first))
  const result = await readMaterialFiles([volume.path('tls.crt'), volume.path('tls.key')])
  if (!result.ok) return t.fail(result.detail)
  t.equal(result.contents[0]?.toString(), first.chainPem)
  t.equal(result.contents[1]?.toString(), first.keyPem)
  t.same(result.generations, { [volume.dir]: volume.generation })
  t.equal(result.attempts, 1)
})

t.test('a swap between reading the certificate and the key is retried and returns one consistent pair', async (t) => {
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'tls'), filesOf(first))
  let swapped = false
  const result = await readMaterialFiles([volume.path('tls.crt'), volume.path('tls.key')], {
    afterFileRead: async (path) => {
      if (!swapped && path.endsWith('tls.crt')) {
        swapped = true
        await volume.swap(filesOf(second))
      }
    },
  })
  if (!result.ok) return t.fail(result.detail)
  t.equal(result.attempts, 2, 'the torn first attempt was thrown away')
  t.equal(result.contents[0]?.toString(), second.chainPem)
  t.equal(result.contents[1]?.toString(), second.keyPem)
  const text = result.contents.map(String)
  t.ok(validateServerIdentity(text[0] ?? '', text[1] ?? '', new Date()).ok, 'the pair validates')
})

t.test('a generation directory deleted while it is read is retried through the new generation', async (t) => {
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'tls'), filesOf(first))
  let swapped = false
  const result = await readMaterialFiles([volume.path('tls.crt'), volume.path('tls.key')], {
    afterFileRead: async (path) => {
      if (!swapped && path.endsWith('tls.crt')) {
        swapped = true
        // The old generation disappears before ..data moves: the key read hits ENOENT.
        await volume.swap(filesOf(second), { deleteOld: 'before' })
      }
    },
  })
  if (!result.ok) return t.fail(result.detail)
  t.equal(result.contents[0]?.toString(), second.chainPem)
  t.equal(result.contents[1]?.toString(), second.keyPem)
})

t.test('a generation directory deleted for good ends in a clean unreadable failure', async (t) => {
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'tls'), filesOf(first))
  let deleted = false
  const result = await readMaterialFiles([volume.path('tls.crt'), volume.path('tls.key')], {
    retryDelayMs: 1,
    afterFileRead: async () => {
      if (!deleted) {
        deleted = true
        await volume.deleteGeneration()
      }
    },
  })
  if (result.ok) return t.fail('read a deleted generation')
  t.equal(result.reason, 'unreadable')
  t.match(result.detail, /generation directory \.\.\S+ of .* was deleted while it was read \(gave up after 5 attempts\)/)
})

t.test('a file of 1 MiB + 1 byte is rejected as too_large', async (t) => {
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'tls'), {
    'tls.crt': paddedTo(first.chainPem, MATERIAL_MAX_BYTES + 1),
    'tls.key': first.keyPem,
  })
  const result = await readMaterialFiles([volume.path('tls.crt'), volume.path('tls.key')])
  if (result.ok) return t.fail('accepted')
  t.equal(result.reason, 'too_large')
  t.match(result.detail, `${volume.path('tls.crt')} is 1048577 bytes, over the 1048576-byte limit`)
})

t.test('a file of exactly 1 MiB is read, validated and served', async (t) => {
  // OpenSSL skips text outside PEM blocks, so a comment pads a valid chain to the limit.
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'tls'), {
    'tls.crt': paddedTo(first.chainPem, MATERIAL_MAX_BYTES),
    'tls.key': paddedTo(first.keyPem, MATERIAL_MAX_BYTES),
  })
  const result = await readMaterialFiles([volume.path('tls.crt'), volume.path('tls.key')])
  if (!result.ok) return t.fail(result.detail)
  t.equal(result.contents[0]?.length, MATERIAL_MAX_BYTES)
  const [cert, key] = result.contents.map(String)
  const validated = validateServerIdentity(cert ?? '', key ?? '', new Date())
  if (!validated.ok) return t.fail(validated.detail)
  t.doesNotThrow(() => createSecureContext({ cert, key }))
})

t.test('an empty file is read as empty content, for validation to reject', async (t) => {
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'tls'), { 'ca.crt': '' })
  const result = await readMaterialFiles([volume.path('ca.crt')])
  if (!result.ok) return t.fail(result.detail)
  t.equal(result.contents[0]?.length, 0)
})

t.test('plain files beside no ..data are read directly', async (t) => {
  const dir = await tempDir(t)
  await writePlainFiles(dir, filesOf(first))
  const result = await readMaterialFiles([join(dir, 'tls.crt'), join(dir, 'tls.key')])
  if (!result.ok) return t.fail(result.detail)
  t.equal(result.contents[1]?.toString(), first.keyPem)
  t.same(result.generations, {})
})

t.test('the same bytes give the same fingerprint and different bytes a different one', async (t) => {
  const dir = await tempDir(t)
  await writePlainFiles(dir, filesOf(first))
  const paths = [join(dir, 'tls.crt'), join(dir, 'tls.key')]
  const a = await readMaterialFiles(paths)
  const b = await readMaterialFiles(paths)
  await writeFile(paths[1] ?? '', second.keyPem)
  const c = await readMaterialFiles(paths)
  if (!a.ok || !b.ok || !c.ok) return t.fail('read failed')
  t.equal(a.fingerprint, b.fingerprint)
  t.not(a.fingerprint, c.fingerprint)
})

t.test('a missing mount directory is reported as such', async (t) => {
  const dir = join(await tempDir(t), 'not-mounted')
  const result = await readMaterialFiles([join(dir, 'tls.crt'), join(dir, 'tls.key')])
  if (result.ok) return t.fail('read a missing directory')
  t.equal(result.reason, 'unreadable')
  t.equal(result.detail, `mount directory ${dir} does not exist (is the secret mounted there, as a directory and not with subPath?)`)
})

t.test('a key missing from a stable projected volume fails at once, naming the file', async (t) => {
  const volume = await ProjectedVolume.create(join(await tempDir(t), 'tls'), { 'tls.crt': first.chainPem })
  const result = await readMaterialFiles([volume.path('tls.crt'), volume.path('tls.key')], { retryDelayMs: 1000 })
  if (result.ok) return t.fail('read a missing file')
  t.equal(result.reason, 'unreadable')
  t.match(result.detail, `${volume.path('tls.key')} does not exist in generation ${volume.generation}`)
})
