/**
 * The QUIC engine addon (lib/quic/native/, C over Debian's ngtcp2 0.12 + GnuTLS), typed. Its
 * surface is documented in one place, the header comment of native/src/addon.c; this file
 * mirrors it for TypeScript. Only engine.ts calls it; everything else uses the objects of
 * engine.ts, endpoint.ts, connection.ts and stream.ts.
 *
 * Built by `npm ci` (lib/quic/native/install.mjs); loaded on first use, so a process that never
 * speaks QUIC never loads it.
 */
import { createRequire } from 'node:module'

/** Event record types (addon.c, quic.h `enum qevent_type`). */
export const EV = {
  PROPOSED: 1,
  ESTABLISHED: 2,
  CLOSED: 3,
  STREAM_OPENED: 4,
  STREAM_READABLE: 5,
  STREAM_WRITABLE: 6,
  STREAM_RESET: 7,
  STREAM_STOP: 8,
  STREAM_CLOSED: 9,
  STREAMS_AVAILABLE: 10,
  DATAGRAM: 11,
  SPLICE_DONE: 12,
  ENDPOINT_ERROR: 13,
  PENDING_EXPIRED: 14,
  DRAINED: 15,
} as const

/** Numbers per event record in the shared Float64Array. */
export const EVENT_STRIDE = 6

/** How a connection ended (EV.CLOSED `a`), quic.h `enum qclose_kind`. */
export const CLOSE_KINDS = [
  'unknown', 'peer', 'local', 'error', 'idle', 'handshake_timeout', 'stateless_reset', 'unreachable', 'destroyed',
] as const
export type QuicCloseKind = Exclude<typeof CLOSE_KINDS[number], 'unknown'>

/** streamRead results that are not bytes. */
export const READ_NONE = 0
export const READ_FIN = 1
export const READ_RESET = 2
export const READ_GONE = 3

/** streamOpen results that are not stream ids. */
export const OPEN_BLOCKED = -1
export const OPEN_FAILED = -2

export interface NativeTransport {
  readonly idleTimeoutMs?: number
  /** 0: none. */
  readonly handshakeTimeoutMs?: number
  /** PING after this long without sending (0 disables). */
  readonly keepAliveMs?: number
  readonly initialMaxData?: number
  readonly maxWindow?: number
  /** Each stream's receive window, whole from the start (no auto-tuning: lib/quic/native/src/conn.c). */
  readonly maxStreamWindow?: number
  readonly maxStreamsBidi?: number
  readonly maxStreamsUni?: number
  /** UDP payload we send (1200–1452, default 1350). */
  readonly maxPayload?: number
  readonly datagrams?: boolean
  /** Unacknowledged bytes a TypeScript writer may queue per stream (default 256 KiB). */
  readonly streamSendLimit?: number
}

export interface NativeListenOptions {
  readonly recvBuffer?: number
  readonly sendBuffer?: number
  readonly maxConnections?: number
  readonly maxHalfOpenPerAddress?: number
  readonly retryThreshold?: number
  readonly retry?: boolean
  readonly pendingTimeoutMs?: number
  readonly resetSecret?: Uint8Array | null
  readonly accepting?: boolean
  readonly transport?: NativeTransport
}

export interface NativeProposal {
  readonly sni: string | null
  readonly alpn: string[]
  readonly address: string
  readonly port: number
  readonly validated: boolean
}

export interface NativeCloseInfo {
  readonly reason: Buffer
  readonly app: boolean
  readonly established: boolean
  readonly alert: number
  readonly liberr: number
}

export interface NativeConnInfo {
  readonly alpn: string | null
  readonly sni: string | null
  readonly datagrams: boolean
  readonly established: boolean
  readonly remoteAddress: string
  readonly remotePort: number
  readonly localPort: number
}

export interface NativeConnStats {
  readonly rttUs: number
  readonly cwnd: number
  readonly bytesInFlight: number
  readonly txBytes: number
  readonly rxBytes: number
  readonly txPackets: number
  readonly rxPackets: number
  readonly splicedBytes: number
  readonly bridgedBytes: number
  readonly datagramsDropped: number
  readonly openStreams: number
  /** Streams the peer opened that streamBridge paired and spliced in the addon. */
  readonly bridgedStreams: number
  /** Streams the peer opened while the connection drained, refused (connDrain). */
  readonly refusedStreams: number
  /** The highest bidirectional stream id the peer has opened, -1 for none. */
  readonly peerMaxBidiStream: number
}

/**
 * Why an endpoint dropped a received datagram before it reached a connection: not QUIC (or
 * truncated, or an Initial that does not parse), for no connection (and no stateless reset
 * owed), over the connection limit, a bad Retry token, over the bound on Initials waiting for
 * routing, or once the endpoint stopped accepting. The addon's table (quic.h Q_DROP_REASONS)
 * has the same strings, in this order; they are the label values of
 * quic_datagrams_dropped_total.
 */
export const ENDPOINT_DROP_REASONS = ['malformed', 'unknown_connection', 'connection_limit', 'invalid_token', 'pending_limit', 'closing'] as const
export type EndpointDropReason = typeof ENDPOINT_DROP_REASONS[number]

/** Packets an endpoint answers without connection state (quic.h Q_STATELESS_PACKETS, SPEC §12). */
export const STATELESS_PACKET_TYPES = ['retry', 'stateless_reset', 'version_negotiation'] as const
export type StatelessPacketType = typeof STATELESS_PACKET_TYPES[number]

/** Datagram I/O of one endpoint, or of the engine in total (addon.c set_io). */
export interface NativeIo {
  readonly rxDatagrams: number
  readonly rxBytes: number
  readonly txDatagrams: number
  readonly txBytes: number
  /** Sends the socket refused or that found no room to wait (a GSO batch counts once): lost, QUIC recovers. */
  readonly txDropped: number
}

export interface NativeEndpointStats extends NativeIo {
  readonly connections: number
  readonly pending: number
  readonly halfOpen: number
  /** Bytes the pending Initials hold: their datagrams and ClientHello reassembly (an incomplete first flight waits in them). */
  readonly pendingBytes: number
  readonly dropped: Readonly<Record<EndpointDropReason, number>>
  readonly stateless: Readonly<Record<StatelessPacketType, number>>
  readonly proposed: number
  readonly rejected: number
  readonly accepted: number
  readonly gso: number
}

export interface NativeCounters extends NativeIo {
  readonly connections: number
  readonly streams: number
  readonly pending: number
  readonly bufferedBytes: number
  readonly datagramsQueued: number
  readonly endpoints: number
  readonly credentials: number
  readonly sendCalls: number
  readonly recvCalls: number
  /** Engine turns (writes of dirty connections + event delivery). */
  readonly turns: number
  readonly writes: number
  /** Socket readiness callbacks. */
  readonly polls: number
  readonly timers: number
  /** Thread CPU nanoseconds in the engine's libuv callbacks, JavaScript excluded: estimated from a random 1 in 16 of them (benchmarks, metrics). */
  readonly busyNs: number
  /** Streams streamBridge paired and spliced, all connections (monotonic). */
  readonly bridgedStreams: number
}

/** The process's malloc heap (glibc mallinfo2), bytes. */
export interface NativeHeapStats {
  /** Allocated: what leak checks compare after equal work. */
  readonly inUse: number
  /** In free chunks, resident or already given back (malloc_trim does not lower it). */
  readonly free: number
}

export interface NativeQuic {
  init (onEvents: (count: number, objects: unknown[] | undefined) => void): Float64Array
  credServer (certPem: string, keyPem: string, clientCaPem: string | null): number
  credClient (caPem: string | null, verify: boolean, certPem: string | null, keyPem: string | null): number
  credRelease (id: number): void
  listen (host: string, port: number, options: NativeListenOptions): [number, string, number]
  endpointConfigure (endpoint: number, options: NativeListenOptions): void
  endpointStats (endpoint: number): NativeEndpointStats | undefined
  endpointClose (endpoint: number): void
  accept (pending: number, cred: number, alpn: Buffer | null, transport: NativeTransport | null): number
  reject (pending: number, code: number): void
  connect (address: string, port: number, cred: number, sni: string | null, alpn: Buffer | null, transport: NativeTransport, options: { recvBuffer?: number, sendBuffer?: number }): number
  close (conn: number, app: boolean, code: number, reason: string | Buffer): void
  /** close() once every stream's bytes, FIN and reset reached the peer, timeoutMs at the latest. */
  closeFlushed (conn: number, app: boolean, code: number, reason: string | Buffer, timeoutMs: number): void
  destroy (conn: number): void
  /** scope 1 every peer stream, 2 the bridged WebTransport session's; the streams of work open now, -1 when not open. */
  connDrain (conn: number, scope: 1 | 2, code: number): number
  connInfo (conn: number): NativeConnInfo | undefined
  connStats (conn: number): NativeConnStats | undefined
  peerCertificates (conn: number): Buffer[]
  streamOpen (conn: number, bidi: boolean): number
  streamsLeft (conn: number, bidi: boolean): number
  streamRead (conn: number, stream: number, max: number): Buffer | number
  streamWrite (conn: number, stream: number, data: Uint8Array, fin: boolean): number
  streamReset (conn: number, stream: number, code: number): void
  streamStop (conn: number, stream: number, code: number): void
  splice (connA: number, streamA: number, connB: number, streamB: number): boolean
  /** mode 0 off, 1 raw (every stream, same ids), 2 WebTransport (sessionA on connA, sessionB on connB). */
  streamBridge (connA: number, connB: number, mode: 0 | 1 | 2, sessionA: number, sessionB: number): boolean
  datagramSend (conn: number, data: Uint8Array): boolean
  datagramBridge (connA: number, connB: number, mode: 0 | 1 | 2): boolean
  datagramMap (conn: number, fromQuarterId: number, toQuarterId: number): boolean
  counters (): NativeCounters
  heapStats (): NativeHeapStats
  /** malloc_trim(0); true when any page went back to the kernel. */
  heapTrim (): boolean
}

/** Where the build puts the addon (node-gyp's default output). */
const ADDON_PATH = new URL('./native/build/Release/quic.node', import.meta.url)

let addon: NativeQuic | null = null

/** The addon, loaded on first use. */
export function loadNative (): NativeQuic {
  if (addon === null) {
    const require = createRequire(import.meta.url)
    try {
      addon = require(ADDON_PATH.pathname) as NativeQuic
    } catch (err) {
      throw new Error(`the QUIC engine addon is not built (${ADDON_PATH.pathname}): run npm ci with the Debian packages libngtcp2-dev libngtcp2-crypto-gnutls-dev libgnutls28-dev installed`, { cause: err })
    }
  }
  return addon
}
