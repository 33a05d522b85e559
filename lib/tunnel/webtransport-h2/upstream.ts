/**
 * The upstream leg of a WebTransport session: an HTTP/2 connection to the pod's `quic` port
 * number over TCP, TLS with the same server name the Pylon sent, and the extended CONNECT.
 *
 * One connection per session, not a pool: the connection's SETTINGS carry the Pylon's
 * WebTransport flow-control settings (they differ per Pylon), and a session's connection can
 * then be closed with it, or when the trust it was made under is replaced.
 *
 * The dial reports once through its callback: the pod's answer (any status; the relay passes
 * non-2xx through) or why there was none. connectTimeoutMs bounds the whole dial; until the
 * pod's SETTINGS arrived it is a connect timeout (502), after that the pod was reached but did
 * not answer the CONNECT (504).
 */
import http2, {
  type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders, type IncomingHttpStatusHeader, type OutgoingHttpHeaders, type SecureClientSessionOptions, type Settings,
} from 'node:http2'
import type { SecureContext } from 'node:tls'
import type { PodTarget } from '../../discovery/types.ts'
import { WT_SETTING_IDS } from './settings.ts'

export type DialFailure = 'upstream_timeout' | 'upstream_unreachable' | 'upstream_no_webtransport' | 'upstream_no_answer'

export interface DialAnswer {
  readonly session: ClientHttp2Session
  readonly stream: ClientHttp2Stream
  readonly headers: IncomingHttpHeaders & IncomingHttpStatusHeader
  readonly status: number
}

export type DialCallback = (failure: { readonly code: DialFailure, readonly detail: string } | null, answer: DialAnswer | null) => void

export interface DialOptions {
  readonly target: PodTarget
  readonly serverName: string
  readonly headers: OutgoingHttpHeaders
  /** The Pylon's WebTransport SETTINGS, advertised to the pod as ours. */
  readonly wtSettings: Readonly<Record<number, number>>
  /** The leg's upstream trust in force; null with --quic-insecure: the pod's certificate is not verified. */
  readonly secureContext: SecureContext | null
  readonly timeoutMs: number
  readonly settings?: Settings
}

function ignore (): void {
  // Errors after the dial reported are the bridge's to handle; before, onSessionError reports them.
}

function onDialTimeout (dial: UpstreamDial): void {
  dial.timer = null
  if (dial.settingsSeen) dial.fail('upstream_no_answer', 'no response to the CONNECT')
  else dial.fail('upstream_timeout', 'no HTTP/2 SETTINGS from the pod')
}

export class UpstreamDial {
  readonly session: ClientHttp2Session
  stream: ClientHttp2Stream | null = null
  timer: NodeJS.Timeout | null
  settingsSeen = false
  #callback: DialCallback | null
  readonly #headers: OutgoingHttpHeaders

  constructor (options: DialOptions, callback: DialCallback) {
    this.#callback = callback
    this.#headers = options.headers
    const sessionOptions: SecureClientSessionOptions = {
      servername: options.serverName,
      ALPNProtocols: ['h2'],
      settings: { enablePush: false, ...options.settings, customSettings: { ...options.wtSettings } },
      remoteCustomSettings: WT_SETTING_IDS,
      // The pod's address comes from the snapshot, never from the client (SPEC §12).
      // A missing secureContext means --quic-insecure: no verification.
      ...(options.secureContext === null ? { rejectUnauthorized: false } : { secureContext: options.secureContext }),
    }
    this.session = http2.connect(`https://${options.target.host}:${options.target.quicPort}`, sessionOptions)
    this.session.on('error', (err: Error) => { this.fail('upstream_unreachable', err.message) })
    this.session.once('remoteSettings', (settings) => { this.#onRemoteSettings(settings) })
    this.session.once('close', () => { this.fail('upstream_unreachable', 'connection closed before the pod answered') })
    this.timer = setTimeout(onDialTimeout, options.timeoutMs, this)
  }

  #onRemoteSettings (settings: Settings): void {
    this.settingsSeen = true
    if (this.#callback === null) return
    if (settings.enableConnectProtocol !== true) {
      this.fail('upstream_no_webtransport', 'the pod did not send SETTINGS_ENABLE_CONNECT_PROTOCOL')
      return
    }
    let stream: ClientHttp2Stream
    try {
      stream = this.session.request(this.#headers, { endStream: false })
    } catch (err) {
      this.fail('upstream_unreachable', (err as Error).message)
      return
    }
    this.stream = stream
    stream.on('error', ignore)
    stream.once('response', (headers) => { this.#onResponse(headers) })
    stream.once('close', () => { this.fail('upstream_no_answer', `the pod reset the CONNECT stream (code ${stream.rstCode ?? 0})`) })
  }

  #onResponse (headers: IncomingHttpHeaders & IncomingHttpStatusHeader): void {
    const callback = this.#finish()
    if (callback === null || this.stream === null) return
    this.session.on('error', ignore)
    callback(null, { session: this.session, stream: this.stream, headers, status: Number(headers[':status'] ?? 0) })
  }

  /** Reports a failure once and tears the connection down. */
  fail (code: DialFailure, detail: string): void {
    const callback = this.#finish()
    if (callback === null) return
    this.session.on('error', ignore)
    this.session.destroy()
    callback({ code, detail }, null)
  }

  /** The Pylon went away before the pod answered: drop the dial without reporting. */
  cancel (): void {
    if (this.#finish() === null) return
    this.session.on('error', ignore)
    this.session.destroy()
  }

  #finish (): DialCallback | null {
    const callback = this.#callback
    this.#callback = null
    if (this.timer !== null) {
      clearTimeout(this.timer)
      this.timer = null
    }
    return callback
  }
}
