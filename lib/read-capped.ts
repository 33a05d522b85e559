/**
 * Reads a whole file with a byte cap, refusing anything but a regular file. Shared by the
 * watched discovery files and the TLS material reader (both read paths a mounted volume
 * controls, so both need the same guards against a hostile or broken mount).
 */
import { constants as fsConstants } from 'node:fs'
import { open } from 'node:fs/promises'

export type ReadFailure = 'missing' | 'unreadable' | 'too_large'

/**
 * Opened non-blocking: open(2) of a FIFO with no writer blocks, which would hang a
 * libuv thread, every later read, and shutdown (which waits for a read in progress); with
 * O_NONBLOCK it returns at once and the fstat below refuses anything but a regular file (FIFO,
 * socket, device). O_NONBLOCK changes nothing for regular files.
 */
const OPEN_FLAGS = fsConstants.O_RDONLY | fsConstants.O_NONBLOCK | fsConstants.O_NOCTTY

export interface ReadCappedOptions {
  /** Refuse a symlink as the last path component (the caller resolved and checked it). */
  readonly noFollow?: boolean
}

export async function readCapped (path: string, maxBytes: number, options: ReadCappedOptions = {}): Promise<{ ok: true, content: Buffer } | { ok: false, failure: ReadFailure, detail: string }> {
  let handle
  try {
    handle = await open(path, options.noFollow === true ? OPEN_FLAGS | fsConstants.O_NOFOLLOW : OPEN_FLAGS)
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOENT') return { ok: false, failure: 'missing', detail: `${path} does not exist` }
    if (code === 'ELOOP') return { ok: false, failure: 'unreadable', detail: `${path} became a symlink while it was read` }
    return { ok: false, failure: 'unreadable', detail: `${path}: ${code ?? (err as Error).message}` }
  }
  try {
    const info = await handle.stat()
    if (!info.isFile()) return { ok: false, failure: 'unreadable', detail: `${path} is not a regular file (${kindOf(info)})` }
    const size = info.size
    if (size > maxBytes) return { ok: false, failure: 'too_large', detail: `${path} is ${size} bytes, over the ${maxBytes}-byte limit` }
    // Read one byte past the limit: the file may grow between stat and read.
    const buffer = Buffer.allocUnsafe(maxBytes + 1)
    let length = 0
    for (;;) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, length)
      if (bytesRead === 0) break
      length += bytesRead
      if (length > maxBytes) return { ok: false, failure: 'too_large', detail: `${path} is over the ${maxBytes}-byte limit` }
    }
    return { ok: true, content: Buffer.from(buffer.subarray(0, length)) }
  } catch (err) {
    return { ok: false, failure: 'unreadable', detail: `${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` }
  } finally {
    await handle.close()
  }
}

function kindOf (info: { isFIFO (): boolean, isSocket (): boolean, isCharacterDevice (): boolean, isBlockDevice (): boolean, isDirectory (): boolean }): string {
  if (info.isFIFO()) return 'a FIFO'
  if (info.isSocket()) return 'a socket'
  if (info.isCharacterDevice() || info.isBlockDevice()) return 'a device'
  if (info.isDirectory()) return 'a directory'
  return 'not a file'
}
