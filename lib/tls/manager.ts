/**
 * Owns the active TLS material and every runtime object built from it (SPEC §8).
 *
 *   watcher/poll ──maybe changed──▶ reload(type) ──▶ read one generation ──▶ fingerprint seen? stop
 *        ──▶ validate(now) ──▶ build a candidate from EVERY consumer of that type (new state)
 *        ──▶ all built? commit all, publish state, notify onChange : keep last-known-good, reject
 *
 * Invariants:
 * - Reloads run one at a time (a queue of material types); the steps from reading #state to
 *   the last commit are synchronous, so a consumer added meanwhile (addConsumer is synchronous)
 *   never sees a half-applied generation.
 * - Published states are immutable; a change makes a new object with that type's generation + 1.
 * - A rejected generation is logged and counted once per distinct content (the fingerprint of
 *   the bytes, or the failure for unreadable material), not once per fs event or poll.
 *
 * Callers: the composition root starts it and adds consumers (front door, QUIC, WebTransport,
 * upstream dialers) and onChange listeners (connection closing); /readyz calls readinessCheck().
 */
import { dirname } from 'node:path'
import type { Logger } from '../log.ts'
import { DirectoryWatcher } from './directory-watcher.ts'
import { setCertificateExpiry, type TlsMetrics } from './metrics.ts'
import { readMaterialFiles, type ReadOptions } from './read.ts'
import { generateSelfSignedIdentity } from './self-signed.ts'
import { validateServerIdentity, validateTrustBundle } from './validate.ts'
import {
  MATERIAL_TYPES, describeMaterial,
  type MaterialType, type RejectionReason, type ServerIdentity, type TlsConsumer, type TlsState, type TrustBundle, type Validated,
} from './types.ts'

export interface TlsManagerOptions {
  readonly serverIdentity: { readonly certPath: string, readonly keyPath: string } | null
  readonly upstreamTrust: { readonly path: string } | null
  readonly clientTrust: { readonly path: string } | null
  /** Generate a self-signed identity for these hosts when serverIdentity is null. */
  readonly selfSignedHosts?: readonly string[]
  readonly debounceMs: number
  /** Reconciliation poll (SPEC default 5 minutes); 0 disables it. */
  readonly pollMs: number
  /** fs.watch the mount directories (default true); false leaves only the poll. */
  readonly watch?: boolean
  readonly now?: () => Date
  readonly metrics: TlsMetrics
  readonly logger: Logger
  /** Read tuning and test hooks. */
  readonly read?: ReadOptions
}

export type ChangeListener = (changed: MaterialType, previous: TlsState, next: TlsState) => void

/** Configured material could not be loaded at start-up; the router must not start. */
export class TlsStartupError extends Error {
  readonly materialType: MaterialType
  readonly path: string
  readonly reason: RejectionReason

  constructor (materialType: MaterialType, path: string, reason: RejectionReason, detail: string) {
    super(`cannot load the ${describeMaterial(materialType)} from ${path}: ${reason}: ${detail}`)
    this.name = 'TlsStartupError'
    this.materialType = materialType
    this.path = path
    this.reason = reason
  }
}

interface Source {
  readonly type: MaterialType
  readonly paths: readonly string[]
}

type Material = ServerIdentity | TrustBundle

/** A TlsState under construction. */
interface DraftState {
  serverIdentity: ServerIdentity | null
  upstreamTrust: TrustBundle | null
  clientTrust: TrustBundle | null
  generations: Record<MaterialType, number>
}

const STATE_KEYS = { server_identity: 'serverIdentity', upstream_trust: 'upstreamTrust', client_trust: 'clientTrust' } as const

export class TlsMaterialManager {
  readonly #options: TlsManagerOptions
  readonly #now: () => Date
  readonly #sources: Source[]
  readonly #consumers: TlsConsumer<unknown>[] = []
  readonly #listeners = new Set<ChangeListener>()
  readonly #watchers: DirectoryWatcher[] = []
  /** Per type: the fingerprint (or failure) last acted on, accepted or rejected. */
  readonly #lastSeen: Record<MaterialType, string> = { server_identity: '', upstream_trust: '', client_trust: '' }
  /** Per type: the reason the last seen content was rejected, if it was. */
  readonly #lastRejection: Record<MaterialType, RejectionReason | null> = { server_identity: null, upstream_trust: null, client_trust: null }
  readonly #pending = new Set<MaterialType>()
  #tail: Promise<void> = Promise.resolve()
  #state: TlsState = { serverIdentity: null, upstreamTrust: null, clientTrust: null, generations: { server_identity: 0, upstream_trust: 0, client_trust: 0 } }
  #closing: Promise<void> | null = null

  private constructor (options: TlsManagerOptions) {
    this.#options = options
    this.#now = options.now ?? (() => new Date())
    this.#sources = []
    if (options.serverIdentity !== null) this.#sources.push({ type: 'server_identity', paths: [options.serverIdentity.certPath, options.serverIdentity.keyPath] })
    if (options.upstreamTrust !== null) this.#sources.push({ type: 'upstream_trust', paths: [options.upstreamTrust.path] })
    if (options.clientTrust !== null) this.#sources.push({ type: 'client_trust', paths: [options.clientTrust.path] })
  }

  /** Loads and validates all configured material, then watches it. Throws TlsStartupError. */
  static async start (options: TlsManagerOptions): Promise<TlsMaterialManager> {
    const manager = new TlsMaterialManager(options)
    await manager.#load()
    await manager.#watch()
    return manager
  }

  /** The active material. Immutable; a change publishes a new object. */
  state (): TlsState {
    return this.#state
  }

  /**
   * Builds and commits the consumer with the current state at once; throws if it cannot build.
   * Returns how to remove it (it is built for no later change; what it built is its owner's).
   */
  addConsumer<C> (consumer: TlsConsumer<C>): () => void {
    let candidate: C
    try {
      candidate = consumer.build(this.#state)
    } catch (err) {
      throw new Error(`tls consumer ${consumer.name} cannot build from the active material: ${messageOf(err)}`, { cause: err })
    }
    consumer.commit(candidate, this.#state, null)
    const added = consumer as TlsConsumer<unknown>
    this.#consumers.push(added)
    return () => {
      const at = this.#consumers.indexOf(added)
      if (at >= 0) this.#consumers.splice(at, 1)
    }
  }

  /** Called after each committed change; returns an unsubscribe function. */
  onChange (listener: ChangeListener): () => void {
    this.#listeners.add(listener)
    return () => { this.#listeners.delete(listener) }
  }

  /** Consumers and change listeners added and not removed (what a stopped component must have given back). */
  get followers (): { readonly consumers: number, readonly listeners: number } {
    return { consumers: this.#consumers.length, listeners: this.#listeners.size }
  }

  /** For /readyz: fails once the active server identity has expired. */
  readinessCheck (): () => string | null {
    return () => {
      const identity = this.#state.serverIdentity
      if (identity === null || identity.notAfter.getTime() >= this.#now().getTime()) return null
      return `server certificate expired at ${identity.notAfter.toISOString()}`
    }
  }

  /** Re-reads every configured material now (what the poll does); resolves when done. */
  reloadNow (): Promise<void> {
    return this.#request(this.#sources.map((source) => source.type))
  }

  /** Stops watching; waits for a reload in progress. Idempotent. */
  close (): Promise<void> {
    this.#closing ??= (async () => {
      for (const watcher of this.#watchers) watcher.close()
      this.#pending.clear()
      await this.#tail
    })()
    return this.#closing
  }

  async #load (): Promise<void> {
    const next: DraftState = { ...this.#state, generations: { ...this.#state.generations } }
    for (const source of this.#sources) {
      const read = await readMaterialFiles(source.paths, this.#options.read)
      if (!read.ok) throw new TlsStartupError(source.type, source.paths.join(' and '), read.reason, read.detail)
      const validated = this.#validate(source.type, read.contents, read.fingerprint)
      if (!validated.ok) throw new TlsStartupError(source.type, source.paths.join(' and '), validated.reason, validated.detail)
      setMaterial(next, source.type, validated.value)
      next.generations[source.type] = 1
      this.#lastSeen[source.type] = read.fingerprint
      this.#options.logger.info({ material_type: source.type, path: source.paths.join(' and '), fingerprint: short(read.fingerprint), notAfter: validated.value.notAfter.toISOString() },
        `loaded the ${describeMaterial(source.type)}`)
    }
    const hosts = this.#options.selfSignedHosts ?? []
    if (this.#options.serverIdentity === null && hosts.length > 0) {
      const now = this.#now()
      const generated = await generateSelfSignedIdentity(hosts, now)
      const validated = validateServerIdentity(generated.certPem, generated.keyPem, now)
      if (!validated.ok) throw new Error(`generated self-signed identity is invalid: ${validated.detail}`)
      next.serverIdentity = { ...validated.value, generated: true }
      next.generations.server_identity = 1
      this.#options.logger.warn({ material_type: 'server_identity', hosts, notAfter: validated.value.notAfter.toISOString() },
        `no tls certificate configured: generated a self-signed server identity for ${hosts.join(', ')}; clients cannot verify it, configure --tls-cert-path and --tls-key-path for production`)
    }
    this.#state = next
    for (const type of MATERIAL_TYPES) setCertificateExpiry(this.#options.metrics, type, materialOf(next, type)?.notAfter ?? null)
  }

  async #watch (): Promise<void> {
    for (const source of this.#sources) {
      const watcher = new DirectoryWatcher({
        directories: source.paths.map((path) => dirname(path)),
        debounceMs: this.#options.debounceMs,
        pollMs: this.#options.pollMs,
        watch: this.#options.watch,
        onMaybeChanged: () => { void this.#request([source.type]) },
        onWatchError: (directory, err) => {
          this.#options.logger.warn({ material_type: source.type, directory, err: err.message }, 'tls mount directory watch failed; re-arming, the poll still runs')
        },
      })
      this.#watchers.push(watcher)
      await watcher.start()
    }
  }

  /**
   * Queues reloads of these types behind any reload in progress; the promise settles once they
   * have been handled. Each call appends one drain to a chain, so a request can never slip in
   * between a finished drain and its bookkeeping; drains that find the queue empty cost nothing.
   */
  #request (types: readonly MaterialType[]): Promise<void> {
    if (this.#closing !== null) return Promise.resolve()
    for (const type of types) this.#pending.add(type)
    this.#tail = this.#tail.then(() => this.#drain())
    return this.#tail
  }

  async #drain (): Promise<void> {
    for (const type of this.#pending) {
      this.#pending.delete(type)
      if (this.#closing !== null) return
      try {
        await this.#reload(type)
      } catch (err) {
        this.#options.logger.error({ material_type: type, err: messageOf(err) }, 'tls reload failed unexpectedly; keeping the active material')
      }
    }
  }

  async #reload (type: MaterialType): Promise<void> {
    const source = this.#sources.find((s) => s.type === type)
    if (source === undefined) return
    const read = await readMaterialFiles(source.paths, this.#options.read)
    if (this.#closing !== null) return
    if (!read.ok) {
      const key = `${read.reason}:${read.detail}`
      if (key === this.#lastSeen[type]) return
      this.#lastSeen[type] = key
      this.#reject(source, read.reason, read.detail, null)
      return
    }
    const seen = read.fingerprint === this.#lastSeen[type]
    // Content rejected as not yet valid is re-checked each time: it may have become valid.
    if (seen && this.#lastRejection[type] !== 'not_yet_valid') return
    this.#lastSeen[type] = read.fingerprint
    if (read.fingerprint === materialOf(this.#state, type)?.fingerprint) {
      this.#lastRejection[type] = null
      return
    }
    const validated = this.#validate(type, read.contents, read.fingerprint)
    if (!validated.ok) {
      if (!seen) this.#reject(source, validated.reason, validated.detail, read.fingerprint)
      return
    }
    const previous = this.#state
    const draft: DraftState = { ...previous, generations: { ...previous.generations, [type]: previous.generations[type] + 1 } }
    setMaterial(draft, type, validated.value)
    const next: TlsState = draft
    const affected = this.#consumers.filter((consumer) => consumer.dependsOn.includes(type))
    const candidates: unknown[] = []
    for (const consumer of affected) {
      try {
        candidates.push(consumer.build(next))
      } catch (err) {
        this.#reject(source, 'parse', `${consumer.name} could not be built from it: ${messageOf(err)}`, read.fingerprint)
        return
      }
    }
    for (const [index, consumer] of affected.entries()) {
      try {
        consumer.commit(candidates[index], next, type)
      } catch (err) {
        this.#options.logger.error({ material_type: type, consumer: consumer.name, err: messageOf(err) }, 'tls consumer failed to commit a built candidate')
      }
    }
    this.#state = next
    this.#lastRejection[type] = null
    this.#options.metrics.tlsReloads.inc({ material_type: type, result: 'success' })
    setCertificateExpiry(this.#options.metrics, type, validated.value.notAfter)
    this.#options.logger.info({
      material_type: type, fingerprint: short(read.fingerprint), generation: next.generations[type], mount_generations: read.generations,
      notAfter: validated.value.notAfter.toISOString(), consumers: affected.map((consumer) => consumer.name),
    }, `reloaded the ${describeMaterial(type)}`)
    for (const listener of this.#listeners) {
      try {
        listener(type, previous, next)
      } catch (err) {
        this.#options.logger.error({ material_type: type, err: messageOf(err) }, 'tls change listener failed')
      }
    }
  }

  #validate (type: MaterialType, contents: readonly Buffer[], fingerprint: string): Validated<Material> {
    const now = this.#now()
    const text = contents.map((content) => content.toString('utf8'))
    const validated = type === 'server_identity'
      ? validateServerIdentity(text[0] ?? '', text[1] ?? '', now)
      : validateTrustBundle(text[0] ?? '', now)
    // The fingerprint of the bytes read, so that later reads compare equal.
    return validated.ok ? { ok: true, value: { ...validated.value, fingerprint } } : validated
  }

  #reject (source: Source, reason: RejectionReason, detail: string, fingerprint: string | null): void {
    this.#lastRejection[source.type] = reason
    this.#options.metrics.tlsReloads.inc({ material_type: source.type, result: 'rejected' })
    this.#options.metrics.tlsReloadRejections.inc({ material_type: source.type, reason })
    this.#options.logger.warn({
      material_type: source.type, reason, detail, path: source.paths.join(' and '), fingerprint: fingerprint === null ? null : short(fingerprint),
    }, `rejected new ${describeMaterial(source.type)} (${reason}): ${detail}; keeping the active material`)
  }
}

function materialOf (state: TlsState, type: MaterialType): Material | null {
  return state[STATE_KEYS[type]]
}

function setMaterial (state: DraftState, type: MaterialType, material: Material): void {
  if (type === 'server_identity') state.serverIdentity = material as ServerIdentity
  else if (type === 'upstream_trust') state.upstreamTrust = material as TrustBundle
  else state.clientTrust = material as TrustBundle
}

function short (fingerprint: string): string {
  return fingerprint.slice(0, 16)
}

function messageOf (err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}

