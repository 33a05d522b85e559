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
 *       serving: false              # optional, default true: a warming pod (no LLM client HTTP)
 *
 * Bad entries are skipped and logged; a file that cannot be used at all (too large, not
 * YAML/JSON, wrong shape) keeps the last good snapshot.
 */
import { WatchedListSource, addressOf, namespaceOf, portOf, type EntryCheck, type ListShape, type WatchedFileSettings } from './watched-list.ts'
import type { SnapshotStore } from './snapshot-store.ts'
import { podTarget, type DiscoveryStatus, type PodTarget } from './types.ts'
import { isRoutableIdentity } from '../routing/hostname-template.ts'
import type { RouterMetrics } from '../metrics/metrics.ts'

function checkTarget (e: Readonly<Record<string, unknown>>, where: string, defaultNamespace: string): EntryCheck<PodTarget> {
  const identity = e.identity
  if (typeof identity !== 'string' || !isRoutableIdentity(identity)) return { ok: false, problem: `${where}: identity must be a pod name (lower-case DNS label)` }
  const address = addressOf(e.address)
  if (address === null) return { ok: false, problem: `${where} (${identity}): address must be an IPv4 or IPv6 address` }
  const grpcPort = portOf(e.grpcPort)
  const quicPort = portOf(e.quicPort)
  if (grpcPort === null || quicPort === null) return { ok: false, problem: `${where} (${identity}): grpcPort and quicPort must be 1..65535` }
  const httpPort = e.httpPort === undefined || e.httpPort === null ? null : portOf(e.httpPort)
  if (httpPort === null && e.httpPort !== undefined && e.httpPort !== null) return { ok: false, problem: `${where} (${identity}): httpPort must be 1..65535` }
  const namespace = namespaceOf(e.namespace, defaultNamespace)
  if (namespace === null) return { ok: false, problem: `${where} (${identity}): namespace must be a lower-case DNS label` }
  const nodeName = typeof e.nodeName === 'string' ? e.nodeName : null
  const zone = typeof e.zone === 'string' ? e.zone : null
  if (e.serving !== undefined && e.serving !== null && typeof e.serving !== 'boolean') return { ok: false, problem: `${where} (${identity}): serving must be true or false` }
  const value = podTarget({ identity, namespace, address, grpcPort, quicPort, httpPort, nodeName, zone, serving: e.serving !== false })
  return { ok: true, id: identity, value }
}

/** The targets file's list (parseWatchedList reads it; its defaults: the target namespace). */
export const TARGETS_FILE: ListShape<PodTarget, string> = { key: 'targets', idName: 'identity', checkEntry: checkTarget }

export interface FileTargetSourceOptions extends WatchedFileSettings {
  readonly namespace: string
  readonly store: SnapshotStore
  readonly metrics: RouterMetrics
  readonly now?: () => number
}

/** Stages the file's targets into the snapshot store; identities the new file lacks leave it. */
export class FileTargetSource extends WatchedListSource<PodTarget, string> implements DiscoveryStatus {
  constructor (options: FileTargetSourceOptions) {
    const { store, metrics } = options
    let identities = new Set<string>()
    super({
      ...options,
      shape: TARGETS_FILE,
      defaults: options.namespace,
      apply: (targets) => {
        const next = new Set<string>()
        for (const target of targets) {
          next.add(target.identity)
          store.stage(target.identity, target)
        }
        for (const identity of identities) if (!next.has(identity)) store.stage(identity, null)
        identities = next
        store.markInitialized()
        metrics.targetsFileReloads.labels('success').inc()
        return targets.length
      },
      onRejected: () => { metrics.targetsFileReloads.labels('rejected').inc() },
    })
  }
}
