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
import { WatchedListSource, addressOf, namespaceOf, portOf, type EntryCheck, type ListShape, type WatchedFileSettings } from './watched-list.ts'
import type { Peer, PeerSet } from './peers.ts'
import { isDnsSubdomain } from '../dns-name.ts'

interface PeerDefaults { readonly namespace: string, readonly port: number }

function checkPeer (e: Readonly<Record<string, unknown>>, where: string, defaults: PeerDefaults): EntryCheck<Peer> {
  const address = addressOf(e.address)
  if (address === null) return { ok: false, problem: `${where}: address must be an IPv4 or IPv6 address` }
  const name = e.name === undefined || e.name === null ? null : e.name
  if (name !== null && (typeof name !== 'string' || !isDnsSubdomain(name))) return { ok: false, problem: `${where} (${address}): name must be a pod name (lower-case DNS name)` }
  const namespace = namespaceOf(e.namespace, defaults.namespace)
  if (namespace === null) return { ok: false, problem: `${where} (${address}): namespace must be a lower-case DNS label` }
  const port = e.port === undefined || e.port === null ? defaults.port : portOf(e.port)
  if (port === null) return { ok: false, problem: `${where} (${address}): port must be 1..65535` }
  const id = `${namespace}/${name ?? address}`
  return { ok: true, id, value: { id, address, port } }
}

/** The peers file's list (parseWatchedList reads it). */
export const PEERS_FILE: ListShape<Peer, PeerDefaults> = { key: 'peers', idName: 'peer', checkEntry: checkPeer }

export interface FilePeerSourceOptions extends WatchedFileSettings {
  /** Default namespace of entries (the router's own). */
  readonly namespace: string
  /** --peer-health-port, for entries without a port. */
  readonly defaultPort: number
  readonly peers: PeerSet
}

/** Replaces the peer set with the file's peers (PeerSet leaves this replica out). */
export class FilePeerSource extends WatchedListSource<Peer, PeerDefaults> {
  constructor (options: FilePeerSourceOptions) {
    const { peers } = options
    super({
      ...options,
      shape: PEERS_FILE,
      defaults: { namespace: options.namespace, port: options.defaultPort },
      apply: (list) => {
        peers.replace(list)
        return peers.size
      },
    })
  }
}
