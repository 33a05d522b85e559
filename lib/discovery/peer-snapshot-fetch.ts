/**
 * Reads one peer's `/debug/snapshot` (SPEC §9: `{ initialized, generation, digest, ... }`)
 * from its health port with undici. Every failure is a value with a bounded reason, never a
 * throw: the divergence checker counts them and they are not divergence.
 *
 * Each check opens a fresh connection (`reset: true`): checks are seconds apart, longer than
 * the peer's keep-alive timeout, and reusing a socket the peer is closing at that moment
 * would report a healthy peer as unreachable. The body is read up to maxBytes: the snapshot
 * lists every target, and a peer that is not a router must not make us buffer without bound.
 */
import { Agent, request } from 'undici'
import { formatHost } from '../host-port.ts'
import type { Peer } from './peers.ts'
import type { PeerCheckErrorReason } from './peer-metrics.ts'

/** About 20,000 targets of /debug/snapshot JSON. */
const PEER_SNAPSHOT_MAX_BYTES = 4 * 1024 * 1024

export interface PeerSnapshot {
  readonly initialized: boolean
  readonly generation: number
  readonly digest: string
}

export type PeerSnapshotResult =
  | { readonly ok: true, readonly snapshot: PeerSnapshot }
  | { readonly ok: false, readonly reason: PeerCheckErrorReason, readonly message: string }

export interface PeerSnapshotFetcher {
  fetch (peer: Peer): Promise<PeerSnapshotResult>
  /** Aborts checks in flight and releases connections; idempotent. */
  close (): Promise<void>
}

const TIMEOUT_CODES = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT'])

function ignore (): void {}

function failure (reason: PeerCheckErrorReason, message: string): PeerSnapshotResult {
  return { ok: false, reason, message }
}

/** A log-safe one-line description of a client error. */
function describe (err: unknown): string {
  const e = err as { code?: unknown, message?: unknown, cause?: { code?: unknown } } | null
  const code = typeof e?.code === 'string' ? e.code : typeof e?.cause?.code === 'string' ? e.cause.code : null
  const message = typeof e?.message === 'string' ? (e.message.split('\n')[0] ?? '') : String(err)
  return code === null ? message : `${message} (${code})`
}

function classify (err: unknown, timedOut: boolean, timeoutMs: number): PeerSnapshotResult {
  if (timedOut) return failure('timeout', `no answer within ${timeoutMs} ms`)
  const code = (err as { code?: unknown } | null)?.code
  if (typeof code === 'string' && TIMEOUT_CODES.has(code)) return failure('timeout', describe(err))
  // undici's HTTPParserError (its code is often unset): the peer answered, but not with HTTP.
  if ((err as { name?: unknown } | null)?.name === 'HTTPParserError' || (typeof code === 'string' && code.startsWith('HPE_'))) {
    return failure('invalid_response', `not an HTTP response: ${describe(err)}`)
  }
  return failure('unreachable', describe(err))
}

/** Pure: the parsed body of /debug/snapshot to what the checker compares. */
export function parsePeerSnapshot (text: string): PeerSnapshotResult {
  let doc: unknown
  try {
    doc = JSON.parse(text)
  } catch {
    return failure('invalid_response', 'body is not JSON')
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) return failure('invalid_response', 'body is not a JSON object')
  const { generation, digest, initialized } = doc as Record<string, unknown>
  if (typeof generation !== 'number' || !Number.isSafeInteger(generation) || generation < 0) return failure('invalid_response', 'body has no generation (a whole number)')
  if (typeof digest !== 'string' || digest.length > 256) return failure('invalid_response', 'body has no digest (a string)')
  return { ok: true, snapshot: { initialized: initialized === true, generation, digest } }
}

export function createPeerSnapshotFetcher (options: { timeoutMs: number, maxBytes?: number }): PeerSnapshotFetcher {
  const { timeoutMs } = options
  const maxBytes = options.maxBytes ?? PEER_SNAPSHOT_MAX_BYTES
  const agent = new Agent({ connect: { timeout: timeoutMs } })
  const closing = new AbortController()
  let closed: Promise<void> | null = null

  async function fetchSnapshot (peer: Peer): Promise<PeerSnapshotResult> {
    const timeout = AbortSignal.timeout(timeoutMs)
    const signal = AbortSignal.any([timeout, closing.signal])
    const url = `http://${formatHost(peer.address)}:${peer.port}/debug/snapshot`
    try {
      const res = await request(url, {
        dispatcher: agent,
        signal,
        reset: true,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
        headers: { accept: 'application/json' },
      })
      // undici destroys an unfinished body with RequestAbortedError, emitted as 'error': with
      // no listener that is an uncaught exception (a peer answering 503 while it shuts down).
      res.body.on('error', ignore)
      if (res.statusCode !== 200) {
        res.body.destroy()
        return failure('http_status', `HTTP ${res.statusCode} from /debug/snapshot`)
      }
      const declared = Number(res.headers['content-length'])
      if (Number.isFinite(declared) && declared > maxBytes) {
        res.body.destroy()
        return failure('too_large', `body of ${declared} bytes, over the ${maxBytes}-byte limit`)
      }
      const chunks: Buffer[] = []
      let length = 0
      for await (const chunk of res.body) {
        length += (chunk as Buffer).length
        if (length > maxBytes) {
          res.body.destroy()
          return failure('too_large', `body over the ${maxBytes}-byte limit`)
        }
        chunks.push(chunk as Buffer)
      }
      return parsePeerSnapshot(Buffer.concat(chunks, length).toString('utf8'))
    } catch (err) {
      return classify(err, timeout.aborted, timeoutMs)
    }
  }

  return {
    fetch: fetchSnapshot,
    close (): Promise<void> {
      closed ??= (async () => {
        closing.abort()
        await agent.destroy()
      })()
      return closed
    },
  }
}
