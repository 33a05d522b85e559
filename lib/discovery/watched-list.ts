/**
 * One watched YAML-list source (SPEC §3 rule 8): the targets file and the peers file
 * are both a YAML or JSON list (bare, or under one key) of entries, read capped at 1 MiB and
 * followed through atomic renames and ConfigMap `..data` swaps (WatchedFile). The rules they
 * share live here once:
 *
 * - a file that cannot be used at all (unreadable, too large, not YAML/JSON, wrong shape)
 *   keeps the last good list and is logged once per distinct failure;
 * - a bad entry is skipped and logged with its index (`targets[2]: …`), the rest are used;
 * - of two entries with the same id the first is kept;
 * - addresses are IP literals, ports 1..65535, namespaces DNS labels (lib/dns-name.ts).
 *
 * The callers say what an entry is (checkEntry) and what to do with a good list (apply).
 */
import { parse as parseYaml } from 'yaml'
import { WatchedFile } from './watched-file.ts'
import { podAddressFamily } from './pod-address.ts'
import { isDnsLabel } from '../dns-name.ts'
import type { ReadFailure } from '../read-capped.ts'
import type { Logger } from '../log.ts'

export const WATCHED_LIST_MAX_BYTES = 1024 * 1024

/** One entry checked: its id (for the duplicate rule) and value, or why it is skipped. */
export type EntryCheck<T> =
  | { readonly ok: true, readonly id: string, readonly value: T }
  | { readonly ok: false, readonly problem: string }

export type ListResult<T> =
  | { readonly ok: true, readonly items: readonly T[], readonly problems: readonly string[] }
  | { readonly ok: false, readonly error: string }

export interface ListShape<T, D> {
  /** Names the list in an object (`{ targets: [...] }`), in problem lines and in logs. */
  readonly key: 'targets' | 'peers'
  /** What the id of an entry is called in the duplicate problem line. */
  readonly idName: string
  /** `where` is `key[index]`; problems start with it. `defaults` fill what an entry leaves out. */
  readonly checkEntry: (entry: Readonly<Record<string, unknown>>, where: string, defaults: D) => EntryCheck<T>
}

/** Pure: file text to the good entries plus one problem line per skipped entry. */
export function parseWatchedList<T, D> (text: string, shape: ListShape<T, D>, defaults: D): ListResult<T> {
  const { key } = shape
  let doc: unknown
  try {
    doc = parseYaml(text)
  } catch (err) {
    // The yaml library's first line ends with ':' before a source excerpt on the next lines.
    return { ok: false, error: `not valid YAML or JSON: ${((err as Error).message.split('\n')[0] ?? '').replace(/:$/, '')}` }
  }
  const list: unknown = Array.isArray(doc) ? doc : (typeof doc === 'object' && doc !== null ? (doc as Record<string, unknown>)[key] : undefined)
  if (!Array.isArray(list)) return { ok: false, error: `expected a list of ${key} or an object with a "${key}" list` }
  const items: T[] = []
  const problems: string[] = []
  const seen = new Set<string>()
  list.forEach((raw: unknown, i: number) => {
    const where = `${key}[${i}]`
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) { problems.push(`${where}: not an object`); return }
    const checked = shape.checkEntry(raw as Record<string, unknown>, where, defaults)
    if (!checked.ok) { problems.push(checked.problem); return }
    if (seen.has(checked.id)) { problems.push(`${where}: duplicate ${shape.idName} ${checked.id}; the first entry is kept`); return }
    seen.add(checked.id)
    items.push(checked.value)
  })
  return { ok: true, items, problems }
}

/** A port number from a parsed file entry, or null when it is not an integer in 1..65535. */
export function portOf (value: unknown): number | null {
  return typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= 65535 ? value : null
}

/** An IPv4 or IPv6 literal from a parsed file entry (pod-address.ts), or null. */
export function addressOf (value: unknown): string | null {
  return typeof value === 'string' && podAddressFamily(value) !== 0 ? value : null
}

/** The entry's namespace (absent, null or empty: the default), or null when it is not a DNS label. */
export function namespaceOf (value: unknown, defaultNamespace: string): string | null {
  const namespace = value === undefined || value === null || value === '' ? defaultNamespace : value
  return typeof namespace === 'string' && isDnsLabel(namespace) ? namespace : null
}

/** Where the file is and how it is followed, as the caller configures it. */
export interface WatchedFileSettings {
  readonly path: string
  readonly logger: Logger
  readonly pollMs?: number
  readonly debounceMs?: number
}

export interface WatchedListOptions<T, D> extends WatchedFileSettings {
  readonly shape: ListShape<T, D>
  readonly defaults: D
  /** Takes a good list; returns how many entries are in use, for the log line. */
  readonly apply: (items: readonly T[]) => number
  /** Called for each rejected file (after the log line). */
  readonly onRejected?: () => void
  readonly now?: () => number
}

export class WatchedListSource<T, D> {
  readonly #options: WatchedListOptions<T, D>
  readonly #file: WatchedFile
  readonly #now: () => number
  #failingSince: number | null
  #lastError: string

  constructor (options: WatchedListOptions<T, D>) {
    this.#options = options
    this.#now = options.now ?? Date.now
    this.#failingSince = this.#now()
    this.#lastError = `${options.shape.key} file not read yet`
    this.#file = new WatchedFile({
      path: options.path,
      maxBytes: WATCHED_LIST_MAX_BYTES,
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

  /** How long the file has been unusable (since start, before the first good read); 0 when in use. */
  stalenessMs (): number {
    return this.#failingSince === null ? 0 : this.#now() - this.#failingSince
  }

  /** Why the file is not in use, or null when the last read was applied. */
  lastError (): string | null {
    return this.#failingSince === null ? null : this.#lastError
  }

  #apply (content: Buffer): void {
    const { path, shape, logger } = this.#options
    const result = parseWatchedList(content.toString('utf8'), shape, this.#options.defaults)
    if (!result.ok) {
      this.#reject('invalid', result.error)
      return
    }
    for (const problem of result.problems) logger.warn({ file: path, problem }, `${shape.key} file entry skipped`)
    const inUse = this.#options.apply(result.items)
    this.#failingSince = null
    logger.info({ file: path, [shape.key]: inUse, skipped: result.problems.length }, `${shape.key} file applied`)
  }

  #reject (failure: ReadFailure | 'invalid', detail: string): void {
    const { path, shape, logger } = this.#options
    this.#failingSince ??= this.#now()
    this.#lastError = `${shape.key} file ${failure}: ${detail}`
    logger.error({ file: path, failure, detail }, `${shape.key} file rejected; keeping the last good ${shape.key}`)
    this.#options.onRejected?.()
  }
}
