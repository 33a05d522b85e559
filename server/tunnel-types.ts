/**
 * What the tunnel wiring files share with server/tunnels.ts, which picks one of them: the
 * context each is started with and the handle each returns. A module of its own so that the
 * wiring files do not import the module that imports them (issue 17: no import cycle).
 */
import type { AddressInfo } from 'node:net'
import type { Config } from '../lib/config/config.ts'
import type { SnapshotReader } from '../lib/discovery/types.ts'
import type { HostnameTemplate } from '../lib/routing/hostname-template.ts'
import type { TlsMaterialManager } from '../lib/tls/manager.ts'
import type { RouterMetrics } from '../lib/metrics/metrics.ts'
import type { Logger } from '../lib/log.ts'
import type { ConnectionRegistry } from '../lib/drain/connection-registry.ts'

export interface TunnelContext {
  readonly config: Config
  readonly snapshot: SnapshotReader
  readonly template: HostnameTemplate
  readonly tls: TlsMaterialManager
  readonly metrics: RouterMetrics
  readonly logger: Logger
  /** Tunnels are registered here to be drained (shutdown, replica balancing). */
  readonly connections: ConnectionRegistry | null
}

export interface RunningTunnel {
  /** The UDP address (raw QUIC, or WebTransport over HTTP/3), when listening. */
  readonly udp: AddressInfo | null
  /** The TCP address (WebTransport over HTTP/2), when listening. */
  readonly tcp: AddressInfo | null
  /** Shutdown has begun: refuse new tunnels; open ones are drained through the connection registry. */
  stopAccepting (): void
  /** Closes every tunnel still open with reason `router shutdown` and stops listening. Idempotent. */
  close (): Promise<void>
}
