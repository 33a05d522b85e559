/**
 * The quiche native binding that @matrixai/quic ships prebuilt (@matrixai/quic-linux-x64),
 * loaded directly: the package's JavaScript layer (QUICServer/QUICConnection/QUICStream) is
 * not used (measured here at ~2 MiB/s, and it kills the process when a peer opens streams
 * during the handshake). Only the calls the driver makes are typed here.
 *
 * quiche errors surface as thrown Errors whose message is the Rust Debug form of
 * quiche::Error: "Done", "StreamReset(77)", "StreamStopped(99)", "InvalidStreamState(0)",
 * "StreamLimit", "FinalSize", "TlsFail"... `Done` is mapped to a null return by the binding
 * for send/streamRecv/streamSend/dgramRecv; parseQuicheError() reads the rest.
 */
import { createRequire } from 'node:module'

export interface HostPort {
  host: string
  port: number
}

export interface RecvInfo {
  from: HostPort
  to: HostPort
}

export interface SendInfo {
  readonly from: HostPort
  readonly to: HostPort
}

export interface ConnectionError {
  readonly isApp: boolean
  readonly errorCode: number
  readonly reason: Uint8Array
}

export interface NativeStats {
  readonly recv: number
  readonly sent: number
  readonly lost: number
  readonly sentBytes: number
  readonly recvBytes: number
  readonly peerMaxDatagramFrameSize?: number
}

export interface NativeConfig {
  verifyPeer (verify: boolean): void
  grease (grease: boolean): void
  setApplicationProtos (protos: string[]): void
  setMaxIdleTimeout (ms: number): void
  setMaxRecvUdpPayloadSize (size: number): void
  setMaxSendUdpPayloadSize (size: number): void
  setInitialMaxData (v: number): void
  setInitialMaxStreamDataBidiLocal (v: number): void
  setInitialMaxStreamDataBidiRemote (v: number): void
  setInitialMaxStreamDataUni (v: number): void
  setInitialMaxStreamsBidi (v: number): void
  setInitialMaxStreamsUni (v: number): void
  setDisableActiveMigration (v: boolean): void
  setCcAlgorithmName (name: string): void
  enableDgram (enabled: boolean, recvQueueLen: number, sendQueueLen: number): void
  enablePacing (v: boolean): void
  setMaxStreamWindow (v: number): void
  setMaxConnectionWindow (v: number): void
  setTicketKey (key: Uint8Array): void
}

export interface NativeConnection {
  recv (data: Uint8Array, info: RecvInfo): number
  send (data: Uint8Array): [number, SendInfo] | null
  streamRecv (streamId: number, data: Uint8Array): [number, boolean] | null
  streamSend (streamId: number, data: Uint8Array, fin: boolean): number | null
  streamShutdown (streamId: number, direction: 0 | 1, err: number): void | null
  streamCapacity (streamId: number): number
  streamReadable (streamId: number): boolean
  readable (): Iterable<number>
  isReadable (): boolean
  peerStreamsLeftBidi (): number
  peerStreamsLeftUni (): number
  dgramRecv (data: Uint8Array): number | null
  dgramSend (data: Uint8Array): void | null
  dgramMaxWritableLen (): number | null
  timeout (): number | null
  onTimeout (): void
  close (app: boolean, err: number, reason: Uint8Array): void | null
  applicationProto (): Uint8Array
  serverName (): string | null
  peerCertChain (): Uint8Array[] | null
  isEstablished (): boolean
  isDraining (): boolean
  isClosed (): boolean
  isTimedOut (): boolean
  peerError (): ConnectionError | null
  localError (): ConnectionError | null
  stats (): NativeStats
  pathStats (): Array<{ rtt: number, cwnd: number, deliveryRate: number }>
  sendAckEliciting (): void
  sourceId (): Uint8Array
}

export interface Quiche {
  readonly Config: {
    new (): NativeConfig
    withBoringSslCtx (verifyPeer: boolean, verifyAllowFail: boolean, ca: Uint8Array | null, key: Uint8Array[] | null, cert: Uint8Array[] | null, sigalgs: string | null): NativeConfig
  }
  readonly Connection: {
    connect (serverName: string | null, scid: Uint8Array, local: HostPort, remote: HostPort, config: NativeConfig): NativeConnection
    accept (scid: Uint8Array, odcid: Uint8Array | null, local: HostPort, remote: HostPort, config: NativeConfig): NativeConnection
  }
  retry (scid: Uint8Array, dcid: Uint8Array, newScid: Uint8Array, token: Uint8Array, version: number, out: Uint8Array): number
  negotiateVersion (scid: Uint8Array, dcid: Uint8Array, out: Uint8Array): number
  versionIsSupported (version: number): boolean
  readonly PROTOCOL_VERSION: number
  readonly MAX_CONN_ID_LEN: number
  readonly MIN_CLIENT_INITIAL_LEN: number
}

export const SHUTDOWN_READ = 0
export const SHUTDOWN_WRITE = 1

let binding: Quiche | null = null

/** The binding, loaded on first use (so importing the driver costs nothing until QUIC is used). */
export function quiche (): Quiche {
  if (binding === null) {
    const require = createRequire(import.meta.url)
    binding = require(`@matrixai/quic-${process.platform}-${process.arch}`) as Quiche
  }
  return binding
}

export interface QuicheError {
  /** The quiche::Error variant name, e.g. "StreamReset". */
  readonly kind: string
  /** The code carried by StreamReset/StreamStopped/InvalidStreamState, else null. */
  readonly code: number | null
}

/** Reads a thrown quiche error ("StreamReset(77)" -> { kind: 'StreamReset', code: 77 }). */
export function parseQuicheError (err: unknown): QuicheError {
  const message = err instanceof Error ? err.message : String(err)
  const open = message.indexOf('(')
  if (open < 0) return { kind: message, code: null }
  const code = Number(message.slice(open + 1, message.indexOf(')', open)))
  return { kind: message.slice(0, open), code: Number.isFinite(code) ? code : null }
}
