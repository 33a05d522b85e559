/**
 * Reads one document from a peer's health port (SPEC §10): `/debug/snapshot` for divergence,
 * `/debug/load` for replica balancing. Every failure is a value with a bounded reason, never a
 * throw, and everything is bounded: the time (connect, headers and body within timeoutMs) and
 * the body (maxBytes; a peer that is not a router must not make us buffer without bound).
 *
 * Each read opens a fresh connection (`reset: true`): reads are seconds apart, longer than
 * the peer's keep-alive timeout, and reusing a socket the peer is closing at that moment
 * would report a healthy peer as unreachable.
 */
import { Agent, request } from 'undici'
import { formatHost } from '../host-port.ts'
import type { Peer } from './peers.ts'
import type { PeerCheckErrorReason } from './peer-metrics.ts'

export type PeerReadFailure = { readonly ok: false, readonly reason: PeerCheckErrorReason, readonly message: string }
export type PeerReadResult = { readonly ok: true, readonly text: string } | PeerReadFailure

/** One peer document: fetch reads it and gives the parser's result, or why it could not be read. */
export interface PeerDocumentFetcher<R> {
  fetch (peer: Peer): Promise<R | PeerReadFailure>
  /** Aborts reads in flight and releases connections; idempotent. */
  close (): Promise<void>
}

export interface PeerReader {
  /** GET http://<peer>/<path>, its body as UTF-8 text when the answer is 200 and small enough. */
  read (peer: Peer, path: string, maxBytes: number): Promise<PeerReadResult>
  /** Aborts reads in flight and releases connections; idempotent. */
  close (): Promise<void>
}

const TIMEOUT_CODES = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT'])

function ignore (): void {}

export function peerReadFailure (reason: PeerCheckErrorReason, message: string): PeerReadFailure {
  return { ok: false, reason, message }
}

/** A log-safe one-line description of a client error. */
function describe (err: unknown): string {
  const e = err as { code?: unknown, message?: unknown, cause?: { code?: unknown } } | null
  const code = typeof e?.code === 'string' ? e.code : typeof e?.cause?.code === 'string' ? e.cause.code : null
  const message = typeof e?.message === 'string' ? (e.message.split('\n')[0] ?? '') : String(err)
  return code === null ? message : `${message} (${code})`
}

function classify (err: unknown, timedOut: boolean, timeoutMs: number): PeerReadFailure {
  if (timedOut) return peerReadFailure('timeout', `no answer within ${timeoutMs} ms`)
  const code = (err as { code?: unknown } | null)?.code
  if (typeof code === 'string' && TIMEOUT_CODES.has(code)) return peerReadFailure('timeout', describe(err))
  // undici's HTTPParserError (its code is often unset): the peer answered, but not with HTTP.
  if ((err as { name?: unknown } | null)?.name === 'HTTPParserError' || (typeof code === 'string' && code.startsWith('HPE_'))) {
    return peerReadFailure('invalid_response', `not an HTTP response: ${describe(err)}`)
  }
  return peerReadFailure('unreachable', describe(err))
}

/** Parses a body as a JSON object, or says why it is not one. */
export function parseJsonObject (text: string): { readonly ok: true, readonly doc: Record<string, unknown> } | PeerReadFailure {
  let doc: unknown
  try {
    doc = JSON.parse(text)
  } catch {
    return peerReadFailure('invalid_response', 'body is not JSON')
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) return peerReadFailure('invalid_response', 'body is not a JSON object')
  return { ok: true, doc: doc as Record<string, unknown> }
}

export function createPeerReader (options: { timeoutMs: number }): PeerReader {
  const { timeoutMs } = options
  const agent = new Agent({ connect: { timeout: timeoutMs } })
  const closing = new AbortController()
  let closed: Promise<void> | null = null

  async function read (peer: Peer, path: string, maxBytes: number): Promise<PeerReadResult> {
    const timeout = AbortSignal.timeout(timeoutMs)
    const signal = AbortSignal.any([timeout, closing.signal])
    const url = `http://${formatHost(peer.address)}:${peer.port}${path}`
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
        return peerReadFailure('http_status', `HTTP ${res.statusCode} from ${path}`)
      }
      const declared = Number(res.headers['content-length'])
      if (Number.isFinite(declared) && declared > maxBytes) {
        res.body.destroy()
        return peerReadFailure('too_large', `body of ${declared} bytes, over the ${maxBytes}-byte limit`)
      }
      const chunks: Buffer[] = []
      let length = 0
      for await (const chunk of res.body) {
        length += (chunk as Buffer).length
        if (length > maxBytes) {
          res.body.destroy()
          return peerReadFailure('too_large', `body over the ${maxBytes}-byte limit`)
        }
        chunks.push(chunk as Buffer)
      }
      return { ok: true, text: Buffer.concat(chunks, length).toString('utf8') }
    } catch (err) {
      return classify(err, timeout.aborted, timeoutMs)
    }
  }

  return {
    read,
    close (): Promise<void> {
      closed ??= (async () => {
        closing.abort()
        await agent.destroy()
      })()
      return closed
    },
  }
}

/** A fetcher of one document (path, at most maxBytes) from any peer, parsed by parse. */
export function createPeerDocumentFetcher<R> (options: { timeoutMs: number }, path: string, maxBytes: number, parse: (text: string) => R): PeerDocumentFetcher<R> {
  const reader = createPeerReader(options)
  return {
    async fetch (peer: Peer): Promise<R | PeerReadFailure> {
      const body = await reader.read(peer, path, maxBytes)
      return body.ok ? parse(body.text) : body
    },
    close: () => reader.close(),
  }
}
