/**
 * SPEC §3 rule 8: targets from a YAML or JSON file, for runs without Kubernetes. The file
 * is `{ targets: [...] }` or a bare list; each entry names a pod:
 *
 *   targets:
 *     - identity: stargate-0        # pod name, a DNS label
 *       address: 10.0.0.12          # IPv4 or IPv6
 *       grpcPort: 50051
 *       quicPort: 50052
 *       httpPort: 8000              # optional
 *       namespace: stargate         # optional, default --target-namespace
 *
 * Bad entries are skipped and logged; a file that cannot be used at all (too large, not
 * YAML/JSON, wrong shape) keeps the last good snapshot.
 */
import { isIP } from 'node:net'
import { parseYamlList, portOf } from './yaml-list.ts'
import { WatchedFile } from './watched-file.ts'
import type { ReadFailure } from '../read-capped.ts'
import type { SnapshotStore } from './snapshot-store.ts'
import type { DiscoveryStatus, PodTarget } from './types.ts'
import { formatHost } from '../host-port.ts'
import { isRoutableIdentity } from '../routing/hostname-template.ts'
import type { RouterMetrics } from '../metrics/metrics.ts'
import type { Logger } from '../log.ts'

export const TARGETS_FILE_MAX_BYTES = 1024 * 1024

export type TargetsFileResult =
  | { readonly ok: true, readonly targets: readonly PodTarget[], readonly problems: readonly string[] }
  | { readonly ok: false, readonly error: string }

/** Pure: file text to targets plus one problem line per skipped entry. */
export function parseTargetsFile (text: string, defaultNamespace: string): TargetsFileResult {
  const parsed = parseYamlList(text, 'targets')
  if (!parsed.ok) return parsed
  const list = parsed.list
  const targets: PodTarget[] = []
  const problems: string[] = []
  const seen = new Set<string>()
  list.forEach((raw: unknown, i: number) => {
    const where = `targets[${i}]`
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) { problems.push(`${where}: not an object`); return }
    const e = raw as Record<string, unknown>
    const identity = e.identity
    if (typeof identity !== 'string' || !isRoutableIdentity(identity)) { problems.push(`${where}: identity must be a pod name (lower-case DNS label)`); return }
    if (seen.has(identity)) { problems.push(`${where}: duplicate identity ${identity}; the first entry is kept`); return }
    const address = e.address
    if (typeof address !== 'string' || isIP(address) === 0) { problems.push(`${where} (${identity}): address must be an IPv4 or IPv6 address`); return }
    const grpcPort = portOf(e.grpcPort)
    const quicPort = portOf(e.quicPort)
    if (grpcPort === null || quicPort === null) { problems.push(`${where} (${identity}): grpcPort and quicPort must be 1..65535`); return }
    const httpPort = e.httpPort === undefined || e.httpPort === null ? null : portOf(e.httpPort)
    if (httpPort === null && e.httpPort !== undefined && e.httpPort !== null) { problems.push(`${where} (${identity}): httpPort must be 1..65535`); return }
    seen.add(identity)
    targets.push({
      identity,
      namespace: typeof e.namespace === 'string' && e.namespace !== '' ? e.namespace : defaultNamespace,
      address,
      host: formatHost(address),
      grpcPort,
      quicPort,
      httpPort,
      nodeName: typeof e.nodeName === 'string' ? e.nodeName : null,
      zone: typeof e.zone === 'string' ? e.zone : null,
    })
  })
  return { ok: true, targets, problems }
}

export interface FileTargetSourceOptions {
  readonly path: string
  readonly namespace: string
  readonly store: SnapshotStore
  readonly metrics: RouterMetrics
  readonly logger: Logger
  readonly pollMs?: number
  readonly debounceMs?: number
  readonly now?: () => number
}

export class FileTargetSource implements DiscoveryStatus {
  readonly #options: FileTargetSourceOptions
  readonly #file: WatchedFile
  readonly #now: () => number
  #identities = new Set<string>()
  #failingSince: number | null
  #lastError = 'targets file not read yet'

  constructor (options: FileTargetSourceOptions) {
    this.#options = options
    this.#now = options.now ?? Date.now
    this.#failingSince = this.#now()
    this.#file = new WatchedFile({
      path: options.path,
      maxBytes: TARGETS_FILE_MAX_BYTES,
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

  stalenessMs (): number {
    return this.#failingSince === null ? 0 : this.#now() - this.#failingSince
  }

  /** Why the file is not in use, or null when the last read was applied. */
  lastError (): string | null {
    return this.#failingSince === null ? null : this.#lastError
  }

  #apply (content: Buffer): void {
    const result = parseTargetsFile(content.toString('utf8'), this.#options.namespace)
    if (!result.ok) {
      this.#reject('invalid', result.error)
      return
    }
    for (const problem of result.problems) this.#options.logger.warn({ file: this.#options.path, problem }, 'targets file entry skipped')
    const next = new Set<string>()
    for (const target of result.targets) {
      next.add(target.identity)
      this.#options.store.stage(target.identity, target)
    }
    for (const identity of this.#identities) if (!next.has(identity)) this.#options.store.stage(identity, null)
    this.#identities = next
    this.#options.store.markInitialized()
    this.#failingSince = null
    this.#options.metrics.targetsFileReloads.labels('success').inc()
    this.#options.logger.info({ file: this.#options.path, targets: result.targets.length, skipped: result.problems.length }, 'targets file applied')
  }

  #reject (failure: ReadFailure | 'invalid', detail: string): void {
    this.#failingSince ??= this.#now()
    this.#lastError = `targets file ${failure}: ${detail}`
    this.#options.metrics.targetsFileReloads.labels('rejected').inc()
    this.#options.logger.error({ file: this.#options.path, failure, detail }, 'targets file rejected; keeping the last good targets')
  }
}
