/**
 * quiche Configs (TLS context + transport parameters) for the driver. A Config is built once
 * per TLS material generation and ALPN set and shared by every connection made with it;
 * quiche copies what it needs into each connection, so swapping the Config used for new
 * connections (hot reload) never touches open ones.
 *
 * quiche over BoringSSL requires ALPN on QUIC connections (both roles fail the handshake
 * without it, RFC 9001 §8.1), so every Config carries a protocol list.
 */
import { quiche, type NativeConfig } from './native.ts'

export interface TransportOptions {
  /** max_idle_timeout (ms, > 0). */
  readonly idleTimeoutMs: number
  /** UDP payload we send and accept (default 1350, quiche's default). */
  readonly maxPayload?: number
  /**
   * Initial connection flow-control window (default 2 MiB) and per-stream window (default
   * 512 KiB). What the peer may send before we read: a relay that cannot forward holds up to
   * this much per connection, so it starts small; quiche grows the windows of connections
   * that are read quickly, up to maxStreamWindow / maxConnectionWindow.
   */
  readonly initialMaxData?: number
  readonly initialMaxStreamData?: number
  /** Auto-tuning ceilings (defaults 16 MiB stream, 24 MiB connection). */
  readonly maxStreamWindow?: number
  readonly maxConnectionWindow?: number
  readonly maxStreamsBidi?: number
  readonly maxStreamsUni?: number
  /** Accept and send QUIC datagrams (RFC 9221) (default true). */
  readonly datagrams?: boolean
  /** Congestion control: 'cubic' (default), 'reno', 'bbr', 'bbr2'. */
  readonly congestionControl?: string
}

export interface ServerConfigOptions extends TransportOptions {
  readonly certPem: string
  readonly keyPem: string
  readonly alpn: readonly string[]
}

export interface ClientConfigOptions extends TransportOptions {
  /** Trusted CA bundle (PEM); with verifyPeer and null, nothing is trusted. */
  readonly caPem: string | null
  readonly verifyPeer: boolean
  readonly alpn: readonly string[]
}

const DATAGRAM_QUEUE = 1024

function applyTransport (config: NativeConfig, options: TransportOptions, alpn: readonly string[]): NativeConfig {
  if (alpn.length === 0) throw new Error('quic needs at least one ALPN protocol')
  const payload = options.maxPayload ?? 1350
  const streamData = options.initialMaxStreamData ?? 512 * 1024
  config.setApplicationProtos([...alpn])
  config.setMaxIdleTimeout(options.idleTimeoutMs)
  config.setMaxRecvUdpPayloadSize(payload)
  config.setMaxSendUdpPayloadSize(payload)
  config.setInitialMaxData(options.initialMaxData ?? 2 * 1024 * 1024)
  config.setInitialMaxStreamDataBidiLocal(streamData)
  config.setInitialMaxStreamDataBidiRemote(streamData)
  config.setInitialMaxStreamDataUni(streamData)
  config.setInitialMaxStreamsBidi(options.maxStreamsBidi ?? 1000)
  config.setInitialMaxStreamsUni(options.maxStreamsUni ?? 100)
  config.setMaxStreamWindow(options.maxStreamWindow ?? 16 * 1024 * 1024)
  config.setMaxConnectionWindow(options.maxConnectionWindow ?? 24 * 1024 * 1024)
  config.setDisableActiveMigration(false)
  config.setCcAlgorithmName(options.congestionControl ?? 'cubic')
  if (options.datagrams ?? true) config.enableDgram(true, DATAGRAM_QUEUE, DATAGRAM_QUEUE)
  return config
}

/** A server Config presenting certPem/keyPem and accepting the given ALPN protocols. */
export function buildServerConfig (options: ServerConfigOptions): NativeConfig {
  const config = quiche().Config.withBoringSslCtx(false, false, null, [Buffer.from(options.keyPem)], [Buffer.from(options.certPem)], null)
  return applyTransport(config, options, options.alpn)
}

/**
 * A client Config verifying the server against caPem (and the SNI) unless verifyPeer is
 * false. verifyPeer with no caPem trusts nothing: every handshake fails verification (never
 * a silent fallback to no verification).
 */
export function buildClientConfig (options: ClientConfigOptions): NativeConfig {
  const verify = options.verifyPeer
  const config = quiche().Config.withBoringSslCtx(verify, false, verify && options.caPem !== null ? Buffer.from(options.caPem) : null, null, null, null)
  config.verifyPeer(verify)
  return applyTransport(config, options, options.alpn)
}

/** Caches Configs by a key (e.g. the ALPN list) for one TLS generation. */
export class ConfigCache {
  readonly #build: (alpn: readonly string[]) => NativeConfig
  readonly #byKey = new Map<string, NativeConfig>()
  readonly #limit: number

  constructor (build: (alpn: readonly string[]) => NativeConfig, limit = 64) {
    this.#build = build
    this.#limit = limit
  }

  get (alpn: readonly string[]): NativeConfig {
    const key = alpn.join('\u0000')
    let config = this.#byKey.get(key)
    if (config === undefined) {
      config = this.#build(alpn)
      // Bounded: a client offering ever new ALPN lists cannot grow the cache.
      if (this.#byKey.size >= this.#limit) this.#byKey.clear()
      this.#byKey.set(key, config)
    }
    return config
  }
}
