/**
 * The balancing loop's two ports on the connection registry (lib/drain, SPEC §10, §11): this
 * replica's load, and the connections it may move. A Pylon-facing kind of the loop is one or
 * more kinds of the registry (WebTransport: sessions over HTTP/3 and over HTTP/2). Both read
 * only connections that are not draining already: a connection being moved (or shut down) is
 * leaving, and counting it would make the replica move more than its excess.
 *
 * Moving a connection is draining it with the reason `rebalance`: registrations end with
 * UNAVAILABLE `router is moving this connection to another replica` and the connection gets
 * GOAWAY; a tunnel refuses new streams, finishes its open ones and closes with `router
 * rebalancing`. The registry counts it (connections_drained_total{reason="rebalance"}). A
 * moved connection whose open work has not ended after deadlineMs (the shutdown's drain
 * timeout) is closed then: while it drains it takes no new work, and its Pylon re-dials only
 * once it is closed, so a stream that never ends must not keep the Pylon unreachable.
 */
import type { ConnectionRegistry } from '../drain/connection-registry.ts'
import type { ConnectionKind, DrainableConnection } from '../drain/connection-kinds.ts'
import { PYLON_LOAD_KINDS, type PylonLoad, type PylonLoadKind, type PylonLoadSource } from './load.ts'
import type { ConnectionMover, MovableConnection } from './rebalancer.ts'

const REGISTRY_KINDS: { readonly [K in PylonLoadKind]: readonly ConnectionKind[] } = {
  registration: ['registration'],
  raw_quic: ['raw_quic'],
  webtransport: ['webtransport_h3', 'webtransport_h2'],
}

/** The live connections of a kind that are not draining, oldest first. */
function movableOf (registry: ConnectionRegistry, kind: PylonLoadKind): DrainableConnection[] {
  const kinds = REGISTRY_KINDS[kind]
  if (kinds.length === 1) return registry.list(kinds[0] as ConnectionKind)
  return kinds.flatMap((k) => registry.list(k)).sort((a, b) => a.openedAt - b.openedAt)
}

export function registryLoadSource (registry: ConnectionRegistry): PylonLoadSource {
  return {
    load (): PylonLoad {
      const load = {} as Record<PylonLoadKind, number>
      for (const kind of PYLON_LOAD_KINDS) {
        let n = 0
        for (const k of REGISTRY_KINDS[kind]) n += registry.list(k).length
        load[kind] = n
      }
      return load
    },
  }
}

function abortMove (connection: DrainableConnection): void {
  try {
    connection.abort('rebalance')
  } catch {
    // Gone meanwhile: nothing left to close.
  }
}

export function registryMover (registry: ConnectionRegistry, options: { readonly deadlineMs: number }): ConnectionMover {
  const { deadlineMs } = options
  return {
    movable (kind: PylonLoadKind): readonly MovableConnection[] {
      return movableOf(registry, kind).map((connection): MovableConnection => ({
        openedAt: connection.openedAt,
        move: () => {
          // The drain reports its own failures; a connection already gone resolves at once.
          const timer = setTimeout(abortMove, deadlineMs, connection)
          timer.unref()
          void registry.drain(connection, 'rebalance').then(() => { clearTimeout(timer) })
        },
      }))
    },
  }
}
