/**
 * Router peers from a YAML or JSON file (`--peers-file`), for runs without Kubernetes. Same
 * rules as the targets file (file.ts, SPEC §3 rule 8): at most 1 MiB, `{ peers: [...] }` or a
 * bare list, watched through atomic renames and ConfigMap `..data` swaps (WatchedFile); bad
 * entries are skipped and logged, and a file that cannot be used at all keeps the last good
 * peer set. Each entry names one router replica:
 *
 *   peers:
 *     - name: stargate-router-0     # optional; the id is namespace/name, else namespace/address
 *       address: 10.0.0.21          # IPv4 or IPv6
 *       port: 8080                  # optional health port, default --peer-health-port
 *       namespace: stargate         # optional, default the router's namespace
 *
 * The file may list this replica too (one file for all of them): POD_IP or POD_NAME, when
 * set, leave it out.
 */
import { isIP } from 'node:net'
import { parseYamlList, portOf } from './yaml-list.ts'
import { WatchedFile } from './watched-file.ts'
import type { ReadFailure } from '../read-capped.ts'
import type { Peer, PeerSet } from './peers.ts'
import type { Logger } from '../log.ts'
import { isDnsLabel, isDnsSubdomain } from '../dns-name.ts'

export const PEERS_FILE_MAX_BYTES = 1024 * 1024

export type PeersFileResult =
  | { readonly ok: true, readonly peers: readonly Peer[], readonly problems: readonly string[] }
  | { readonly ok: false, readonly error: string }

/** Pure: file text to peers plus one problem line per skipped entry. */
export function parsePeersFile (text: string, defaults: { namespace: string, port: number }): PeersFileResult {
  const parsed = parseYamlList(text, 'peers')
  if (!parsed.ok) return parsed
  const list = parsed.list
  const peers: Peer[] = []
  const problems: string[] = []
  const seen = new Set<string>()
  list.forEach((raw: unknown, i: number) => {
    const where = `peers[${i}]`
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) { problems.push(`${where}: not an object`); return }
    const e = raw as Record<string, unknown>
    const address = e.address
    if (typeof address !== 'string' || isIP(address) === 0) { problems.push(`${where}: address must be an IPv4 or IPv6 address`); return }
    const name = e.name === undefined || e.name === null ? null : e.name
    if (name !== null && (typeof name !== 'string' || !isDnsSubdomain(name))) { problems.push(`${where} (${address}): name must be a pod name (lower-case DNS name)`); return }
    const namespace = e.namespace === undefined || e.namespace === null ? defaults.namespace : e.namespace
    if (typeof namespace !== 'string' || !isDnsLabel(namespace)) { problems.push(`${where} (${address}): namespace must be a lower-case DNS label`); return }
    const peerPort = e.port === undefined || e.port === null ? defaults.port : portOf(e.port)
    if (peerPort === null) { problems.push(`${where} (${address}): port must be 1..65535`); return }
    const id = `${namespace}/${name ?? address}`
    if (seen.has(id)) { problems.push(`${where}: duplicate peer ${id}; the first entry is kept`); return }
    seen.add(id)
    peers.push({ id, address, port: peerPort })
  })
  return { ok: true, peers, problems }
}

export interface FilePeerSourceOptions {
  readonly path: string
  /** Default namespace of entries (the router's own). */
  readonly namespace: string
  /** --peer-health-port, for entries without a port. */
  readonly defaultPort: number
  readonly peers: PeerSet
  readonly logger: Logger
  readonly pollMs?: number
  readonly debounceMs?: number
}

export class FilePeerSource {
  readonly #options: FilePeerSourceOptions
  readonly #file: WatchedFile
  #lastError: string | null = 'peers file not read yet'

  constructor (options: FilePeerSourceOptions) {
    this.#options = options
    this.#file = new WatchedFile({
      path: options.path,
      maxBytes: PEERS_FILE_MAX_BYTES,
      pollMs: options.pollMs,
      debounceMs: options.debounceMs,
      onContent: (content) => { this.#apply(content) },
      onFailure: (failure, detail) => { this.#reject(failure, detail) },
    })
  }

  /** Resolves after the first read, whatever its outcome. */
  start (): Promise<void> {
    return this.#file.start()
  }

  stop (): Promise<void> {
    this.#file.close()
    return Promise.resolve()
  }

  /** Why the file is not in use, or null when the last read was applied. */
  lastError (): string | null {
    return this.#lastError
  }

  #apply (content: Buffer): void {
    const result = parsePeersFile(content.toString('utf8'), { namespace: this.#options.namespace, port: this.#options.defaultPort })
    if (!result.ok) {
      this.#reject('invalid', result.error)
      return
    }
    for (const problem of result.problems) this.#options.logger.warn({ file: this.#options.path, problem }, 'peers file entry skipped')
    this.#options.peers.replace(result.peers)
    this.#lastError = null
    this.#options.logger.info({ file: this.#options.path, peers: this.#options.peers.size, skipped: result.problems.length }, 'peers file applied')
  }

  #reject (failure: ReadFailure | 'invalid', detail: string): void {
    this.#lastError = `peers file ${failure}: ${detail}`
    this.#options.logger.error({ file: this.#options.path, failure, detail }, 'peers file rejected; keeping the last good peers')
  }
}
