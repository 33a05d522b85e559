/**
 * The WebTransport reverse-tunnel relay (SPEC §7): WebTransport over HTTP/2 on the TCP port
 * with the tunnel port number.
 *
 *   Pylon ──TLS(SNI) h2 extended CONNECT /_stargate/webtransport──▶ relay
 *     check the request (400) → route by SNI, else :authority (400/404/503)
 *     → dial the pod's quic port over TCP: TLS with the same server name, h2, the same
 *       CONNECT with every header (502 unreachable / 504 no answer within the connect timeout)
 *     → answer the Pylon with the pod's status: 2xx bridges (bridge.ts),
 *       anything else is passed through with its body.
 *
 * The relay terminates TLS and HTTP/2 on both legs but not WebTransport: the session's
 * capsules pass through unchanged (see lib/quic/h3/capsule.ts), so it never holds per-stream
 * state, and a malformed or hostile session can only break its own two legs.
 *
 * Bridged sessions follow the snapshot as every tunnel does (lib/drain/pod-drain.ts): a pod
 * that starts terminating, leaves the Service or moves has its sessions closed with `target
 * stargate left the ready set` after --drain-grace-ms, unless it comes back first.
 *
 * Lifecycle: listen() → stopAccepting() (listener closed, GOAWAY to Pylon connections, sessions
 * waiting for their pod refused; bridged sessions are drainable connections of the registry,
 * lib/drain: drain capsules, new streams refused, closed once their last stream ended) →
 * close(reason) (every session left gets a close capsule with the reason, what has not
 * finished CLOSE_GRACE_MS later is reset). close() is idempotent.
 *
 * Caps: every session has an upstream connection of its
 * own (its SETTINGS carry the Pylon's flow control, see upstream.ts), so the
 * sessions a Pylon connection may hold at once (--webtransport-max-sessions-per-connection,
 * 429 above it) and the sessions of the whole relay (--webtransport-max-sessions, 503), pending
 * and bridged alike, bound the upstream connections too.
 *
 * Liveness (--relay-idle-timeout-ms, --relay-keep-alive-ms): one coarse tick for all
 * sessions (1 s, shorter for short timeouts; times are read from it, not per chunk). With keep-alive on, both legs' connections are PINGed every keep-alive interval
 * and a PING answer counts as a sign of life; a session closes with reason `idle timeout`
 * once either side showed none for the idle timeout.
 */
import type { AddressInfo } from 'node:net'
import http2, {
  constants, type IncomingHttpHeaders, type SecureServerOptions, type ServerHttp2Session, type ServerHttp2Stream,
} from 'node:http2'
import type { SecureContext, SecureContextOptions, TLSSocket } from 'node:tls'
import type { BuiltSecureContext } from '../../tls/secure-context-consumer.ts'
import type { TlsFollower } from '../../tls/tls-follower.ts'
import type { UpstreamTrustFollower } from '../../tls/upstream-trust-consumer.ts'
import type { PodTarget, SnapshotReader } from '../../discovery/types.ts'
import { PodDrain } from '../../drain/pod-drain.ts'
import type { HostnameTemplate } from '../../routing/hostname-template.ts'
import type { Logger } from '../../log.ts'
import type { TrustBundle } from '../../tls/types.ts'
import { peerChainOf } from '../../tls/client-cert.ts'
import { untrustedConnections } from '../../tls/trust-policy.ts'
import { Http2StreamGuard, hardenedHttp2Options } from '../../http2-admission.ts'
import { respondIfOpen, type RespondOutcome } from '../../safe-io.ts'
import { DEFAULT_WT_SETTINGS, WT_SETTING_IDS, pickWtSettings } from './settings.ts'
import { TUNNEL_CLOSE_REASONS, WEBTRANSPORT_CLOSE_REASONS } from '../errors.ts'
import { REJECTIONS, checkConnect, downstreamResponseHeaders, routeSession, upstreamHeaders, type RejectionCode } from '../webtransport-connect.ts'
import { UpstreamDial, type DialAnswer, type DialFailure } from './upstream.ts'
import { CLOSE_GRACE_MS, WebTransportBridge, type BridgeEnd, type CoarseClock } from './bridge.ts'
import type { WebTransportMetrics } from '../webtransport-metrics.ts'
import { GraceCloser } from '../grace-closer.ts'
import type { TunnelKind, TunnelRelay } from '../relay.ts'
import type { ConnectionRegistry } from '../../drain/connection-registry.ts'
import { TunnelHandle } from '../tunnel-handle.ts'
import { tunnelCloseReasonOf } from '../../drain/drain-reasons.ts'
import type { DrainMetrics } from '../../drain/drain-metrics.ts'

export interface WebTransportRelayOptions {
  readonly host: string
  readonly port: number
  readonly snapshot: SnapshotReader
  readonly template: HostnameTemplate
  /** The server context of new handshakes (cert, key, and ca when verifying clients); reloads reach setSecureContext(). */
  readonly serverContext: TlsFollower<BuiltSecureContext>
  /** Ask for and verify client certificates (mTLS for Pylons). */
  readonly requireClientCert: boolean
  /** How to verify pods: the HTTP/2 leg's upstream trust, followed through reloads (its key names it); read per dial. */
  readonly upstream: UpstreamTrustFollower<SecureContext | null>
  readonly connectTimeoutMs: number
  /** How long a bridged session outlives its pod terminating, leaving the Service or moving. */
  readonly drainGraceMs: number
  readonly idleTimeoutMs: number
  /** 0 disables keep-alive PINGs. */
  readonly keepAliveMs: number
  readonly maxConcurrentStreams: number
  readonly maxHeaderListSize: number
  /** Sessions (pending and bridged) one Pylon connection may hold at once. */
  readonly maxSessionsPerConnection: number
  /** Sessions (pending and bridged) the relay holds at once. */
  readonly maxSessions: number
  /** Advertised to Pylons as the initial WebTransport flow control (default: the library's). */
  readonly wtSettings?: Readonly<Record<number, number>>
  readonly metrics: WebTransportMetrics
  readonly logger: Logger
  readonly onTlsError?: (err: Error) => void
  /** Time for a client to complete the TLS handshake (the front door's --tls-handshake-timeout-ms). */
  readonly tlsHandshakeTimeoutMs?: number
  /** Open TCP connections beyond which new ones are closed at accept (the front door's cap). */
  readonly maxConnections?: number
  readonly onRefused?: () => void
  readonly onRapidReset?: () => void
  /** Where bridged sessions are registered to be drained (shutdown, replica balancing); null: nowhere. */
  readonly connections?: ConnectionRegistry | null
  readonly drainMetrics?: DrainMetrics | null
}

/** The coarse tick: at most this, and a quarter of the idle timeout or half the keep-alive interval below that. */
const MAX_TICK_MS = 1000
const MIN_TICK_MS = 20
/** A pod's non-2xx answer is passed through with at most this much body. */
const MAX_REJECTION_BODY = 64 * 1024

/** A Pylon connection: its streams, since when it has had none, and its sessions (pending and bridged). */
interface DownstreamConnection {
  streams: number
  idleSince: number
  sessions: number
}

interface PendingSession {
  readonly stream: ServerHttp2Stream
  readonly target: PodTarget
  readonly connection: DownstreamConnection
  readonly dial: UpstreamDial
  readonly trustKey: string
  /** Set once the dial reported or the Pylon left; the other event is then ignored. */
  settled: boolean
  readonly onStreamClose: () => void
}

/** A session request a Pylon opened on one of its HTTP/2 connections (past the stream guard). */
export interface H2SessionRequest {
  readonly stream: ServerHttp2Stream
  readonly headers: IncomingHttpHeaders
  readonly rawHeaders: readonly string[]
}

function ignore (): void {
  // Stream errors show up as 'close' with an rstCode; the owner handles that.
}

export class WebTransportRelay implements TunnelRelay<H2SessionRequest> {
  readonly kind: TunnelKind = 'webtransport_h2'
  readonly #options: WebTransportRelayOptions
  readonly #server: http2.Http2SecureServer
  readonly #guard: Http2StreamGuard
  /** Pylon connections: session requests open on each, and since when it has had none. */
  readonly #sessions = new Map<ServerHttp2Session, DownstreamConnection>()
  /** Pods whose WebTransport SETTINGS differ from what Pylons are told (warned once each). */
  readonly #settingsWarned = new Set<string>()
  readonly #bridges = new Set<WebTransportBridge>()
  /** Bridges waiting out the grace of a trust-change close (SPEC §8). */
  readonly #grace = new GraceCloser<WebTransportBridge>((bridge, reason) => { bridge.close(0, reason, 'trust_replaced') })
  /** Bridged sessions follow the snapshot: closed when their pod leaves the ready set, as every tunnel is. */
  readonly #drain: PodDrain<WebTransportBridge>
  /** The Pylon connection each bridge's session counts against. */
  readonly #bridgeConnections = new Map<WebTransportBridge, DownstreamConnection>()
  readonly #pending = new Set<PendingSession>()
  /** Bridged sessions in the connection registry. */
  readonly #handles = new Map<WebTransportBridge, TunnelHandle>()
  readonly #clock: CoarseClock = { now: Date.now() }
  #tick: NodeJS.Timeout | null = null
  #accepting = true
  #closing: Promise<void> | null = null
  #address: AddressInfo | null = null
  #onDrained: (() => void) | null = null

  constructor (options: WebTransportRelayOptions) {
    this.#options = options
    this.#drain = new PodDrain({ snapshot: options.snapshot, graceMs: options.drainGraceMs, bound: 'address', onDrained: (bridge) => { bridge.close(0, TUNNEL_CLOSE_REASONS.target_left, 'completed') } })
    this.#guard = new Http2StreamGuard({
      maxHeaderListSize: options.maxHeaderListSize,
      onRapidReset: (session, resets, opened) => {
        options.onRapidReset?.()
        options.logger.warn({ resets, opened, remote: session.socket?.remoteAddress }, 'closing webtransport http2 connection: rapid stream resets (GOAWAY ENHANCE_YOUR_CALM)')
      },
    })
    const serverOptions: SecureServerOptions = {
      ...options.serverContext.current().options,
      ...hardenedHttp2Options(options, { enableConnectProtocol: true, customSettings: { ...(options.wtSettings ?? DEFAULT_WT_SETTINGS) } }),
      ALPNProtocols: ['h2'],
      requestCert: options.requireClientCert,
      rejectUnauthorized: options.requireClientCert,
      remoteCustomSettings: WT_SETTING_IDS,
      // A client that does not negotiate h2 (ALPN) gets nothing here; Node would hold its
      // socket for 100 s by default.
      unknownProtocolTimeout: 1000,
      // Node's default is 120 s: 1,000 clients dripping a ClientHello a byte a second held
      // their sockets that long.
      handshakeTimeout: options.tlsHandshakeTimeoutMs ?? 10_000,
    }
    this.#server = http2.createSecureServer(serverOptions)
    // Without a cap, idle connections are accepted until the descriptors run out.
    this.#server.maxConnections = options.maxConnections ?? 10_000
    this.#server.on('drop', () => { options.onRefused?.() })
    this.#server.on('session', (session) => { this.#onSession(session) })
    this.#server.on('tlsClientError', (err, socket) => {
      // With a listener Node leaves the socket to it: a handshake timeout alone closes nothing.
      socket.destroy()
      options.onTlsError?.(err)
      options.logger.debug({ err: err.message }, 'webtransport tls handshake failed')
    })
    this.#server.on('unknownProtocol', (socket) => { socket.destroy() })
    this.#server.on('sessionError', (err) => { options.logger.debug({ err: err.message }, 'webtransport http2 session error') })
  }

  /** Sessions bridged now. */
  get activeSessions (): number {
    return this.#bridges.size
  }

  /** Session requests waiting for the pod's answer. */
  get pendingSessions (): number {
    return this.#pending.size
  }

  /** Pylon HTTP/2 connections open now. */
  get downstreamConnections (): number {
    return this.#sessions.size
  }

  get address (): AddressInfo | null {
    return this.#address
  }

  /** Listens on port (default: the option), e.g. the number the HTTP/3 listener got on UDP. */
  async listen (port: number = this.#options.port): Promise<AddressInfo> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', reject)
      this.#server.listen(port, this.#options.host, () => {
        this.#server.off('error', reject)
        resolve()
      })
    })
    this.#server.on('error', (err) => { this.#options.logger.error({ err: err.message }, 'webtransport listener error') })
    this.#address = this.#server.address() as AddressInfo
    const { idleTimeoutMs, keepAliveMs } = this.#options
    const tickMs = Math.max(MIN_TICK_MS, Math.min(MAX_TICK_MS, idleTimeoutMs / 4, keepAliveMs > 0 ? keepAliveMs / 2 : MAX_TICK_MS))
    this.#tick = setInterval(() => { this.#onTick() }, tickMs)
    this.#tick.unref()
    return this.#address
  }

  /** New handshakes use these options (server identity hot reload); open connections keep theirs. */
  setSecureContext (options: SecureContextOptions): void {
    this.#server.setSecureContext(options)
  }

  /**
   * Shutdown has begun: no new connections or sessions; a session still waiting for its pod is
   * refused (503 shutting_down); bridged ones are drained through the connection registry.
   */
  stopAccepting (): void {
    if (!this.#accepting) return
    this.#accepting = false
    if (this.#server.listening) this.#server.close()
    for (const pending of [...this.#pending]) this.#settlePending(pending, 'shutting_down', 'router shutdown')
    // GOAWAY: the Pylon opens no new session on this connection; the open ones continue.
    for (const session of this.#sessions.keys()) if (!session.closed) session.close()
  }

  /** Bridged sessions verified under another trust close after graceMs (outcome trust_replaced). */
  closeTrust (key: string, graceMs: number): number {
    return this.#grace.closeTrust(this.#bridges, (bridge) => bridge.trustKey, key, graceMs).length
  }

  /**
   * Pylon connections whose certificate no longer verifies get a GOAWAY now (no new session)
   * and their bridged sessions close after graceMs. Returns how many connections.
   */
  closeUntrustedClients (bundle: TrustBundle, graceMs: number, now: Date = new Date()): number {
    const open = [...this.#sessions.keys()].filter((session) => session.socket !== undefined && !session.socket.destroyed)
    const untrusted = untrustedConnections(open, (session) => peerChainOf(session.socket as TLSSocket), bundle, now)
    for (const session of untrusted) {
      for (const bridge of this.#bridges) {
        if (bridge.downstreamSession === session) this.#grace.closeLater(bridge, TUNNEL_CLOSE_REASONS.client_trust_replaced, graceMs)
      }
      session.close()
    }
    return untrusted.length
  }

  /** Closes every session with the reason and stops listening. Idempotent. */
  close (reason: string = TUNNEL_CLOSE_REASONS.shutdown): Promise<void> {
    this.#closing ??= this.#close(reason)
    return this.#closing
  }

  async #close (reason: string): Promise<void> {
    this.stopAccepting()
    this.#grace.clear()
    this.#drain.dispose()
    for (const pending of [...this.#pending]) this.#settlePending(pending, 'shutting_down', 'router shutdown')
    for (const bridge of this.#bridges) bridge.close(0, reason, 'completed')
    if (this.#bridges.size > 0) {
      // Bridges reset themselves CLOSE_GRACE_MS after a close began; the margin covers that.
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, CLOSE_GRACE_MS + 500)
        this.#onDrained = () => {
          clearTimeout(timer)
          resolve()
        }
      })
      this.#onDrained = null
    }
    for (const bridge of [...this.#bridges]) bridge.destroy()
    if (this.#tick !== null) {
      clearInterval(this.#tick)
      this.#tick = null
    }
    for (const session of this.#sessions.keys()) session.destroy()
    if (this.#server.listening) await new Promise<void>((resolve) => { this.#server.close(() => { resolve() }) })
  }

  #onSession (session: ServerHttp2Session): void {
    if (!this.#accepting) {
      session.destroy()
      return
    }
    const state: DownstreamConnection = { streams: 0, idleSince: this.#clock.now, sessions: 0 }
    this.#sessions.set(session, state)
    session.on('stream', (stream, headers, _flags, rawHeaders) => {
      state.streams++
      stream.once('close', () => {
        if (--state.streams === 0) state.idleSince = this.#clock.now
      })
      const admission = this.#guard.admit(session, stream, rawHeaders)
      stream.on('error', ignore)
      if (admission === 'reset') return
      if (admission === 'headers_too_large') {
        // Nothing of it is routed, dialled or sent to a pod.
        this.#reject(stream, 'headers_too_large', null)
        return
      }
      this.propose({ stream, headers, rawHeaders })
    })
    session.on('close', () => { this.#sessions.delete(session) })
    session.on('error', (err) => { this.#options.logger.debug({ err: err.message }, 'webtransport http2 session error') })
  }

  /**
   * A session request on a Pylon connection: checked, capped, routed by SNI (else :authority),
   * then dialled to its pod and bridged once the pod accepts; refused with a REJECTIONS answer.
   */
  propose (request: H2SessionRequest): void {
    const { stream, headers, rawHeaders } = request
    const session = stream.session as ServerHttp2Session | undefined
    const connection = session === undefined ? undefined : this.#sessions.get(session)
    if (session === undefined || connection === undefined) {
      // Its connection is gone already.
      if (!stream.destroyed) stream.close(constants.NGHTTP2_REFUSED_STREAM)
      return
    }
    if (!this.#accepting) {
      this.#reject(stream, 'shutting_down', null)
      return
    }
    const check = checkConnect(headers)
    if (!check.ok) {
      this.#reject(stream, check.code, null)
      return
    }
    if (connection.sessions >= this.#options.maxSessionsPerConnection) {
      this.#options.metrics.sessionsRefused.labels('connection_limit').inc()
      this.#reject(stream, 'connection_session_limit', null)
      return
    }
    if (this.#pending.size + this.#bridges.size >= this.#options.maxSessions) {
      this.#options.metrics.sessionsRefused.labels('total_limit').inc()
      this.#reject(stream, 'total_session_limit', null)
      return
    }
    const socket = session.socket as TLSSocket
    const route = routeSession(socket.servername, headers[':authority'], this.#options.snapshot.current(), this.#options.template)
    if (!route.ok) {
      this.#reject(stream, route.code, null)
      return
    }
    // Counted once routing succeeded, before the upstream session, as the Rust router counts it.
    this.#options.metrics.sessions.labels('accepted').inc()
    const trust = this.#options.upstream.current()
    // Session setup runs once per session request, next to a TLS handshake and a new upstream
    // connection; the closures here cost nothing by comparison. Per-chunk paths have none.
    let pending: PendingSession | null = null
    const dial = new UpstreamDial({
      target: route.target,
      serverName: route.serverName,
      headers: upstreamHeaders(rawHeaders),
      wtSettings: pickWtSettings(session.remoteSettings.customSettings) ?? DEFAULT_WT_SETTINGS,
      secureContext: trust.runtime,
      timeoutMs: this.#options.connectTimeoutMs,
    }, (failure, answer) => {
      // Reported from the dial's events, after `pending` was set below.
      if (pending === null || pending.settled) return
      if (failure !== null) this.#onDialFailure(pending, route.target.identity, failure.code, failure.detail)
      else if (answer !== null) this.#onAnswer(pending, route.target.identity, answer)
    })
    const created: PendingSession = {
      stream,
      target: route.target,
      connection,
      dial,
      trustKey: trust.trust.key,
      settled: false,
      onStreamClose: () => { this.#onPendingAbandoned(created) },
    }
    pending = created
    this.#pending.add(created)
    connection.sessions++
    stream.once('close', created.onStreamClose)
  }

  /** The Pylon reset or lost the request before the pod answered. */
  #onPendingAbandoned (pending: PendingSession): void {
    if (!this.#unpend(pending)) return
    pending.dial.cancel()
    this.#options.metrics.sessions.labels('relay_error').inc()
  }

  /** Marks a pending session settled; false when it already was. */
  #unpend (pending: PendingSession): boolean {
    if (pending.settled) return false
    pending.settled = true
    this.#pending.delete(pending)
    pending.connection.sessions--
    pending.stream.off('close', pending.onStreamClose)
    return true
  }

  #onDialFailure (pending: PendingSession, target: string, code: DialFailure, detail: string): void {
    this.#options.logger.info({ target, code, detail }, `webtransport session to ${target} failed: ${REJECTIONS[code].message}`)
    this.#settlePending(pending, code, detail)
  }

  #onAnswer (pending: PendingSession, target: string, answer: DialAnswer): void {
    const { stream } = pending
    if (!this.#unpend(pending)) {
      answer.session.destroy()
      return
    }
    if (stream.closed || stream.destroyed) {
      // The Pylon left while the pod answered.
      answer.session.destroy()
      this.#options.metrics.sessions.labels('relay_error').inc()
      return
    }
    if (pending.trustKey !== this.#options.upstream.current().trust.key) {
      answer.session.destroy()
      this.#reject(stream, 'upstream_unreachable', null)
      return
    }
    if (answer.status >= 200 && answer.status < 300) {
      this.#checkPodSettings(target, answer.session.remoteSettings.customSettings)
      const sent = respondIfOpen(stream, downstreamResponseHeaders(answer.headers), { endStream: false })
      if (!sent.ok) {
        this.#answerNotSent(stream, target, answer, sent)
        return
      }
      this.#bridge(stream, answer, pending)
      return
    }
    this.#passThroughRejection(stream, target, answer)
  }

  /**
   * The pod's answer could not be given to the Pylon: its stream is gone (counted as the
   * Pylon leaving), or Node refused the pod's status or fields (a pod may send :status 600,
   * which nghttp2 accepts and respond() throws on): 502 upstream_invalid_response.
   */
  #answerNotSent (stream: ServerHttp2Stream, target: string, answer: DialAnswer, outcome: Exclude<RespondOutcome, { ok: true }>): void {
    answer.session.destroy()
    if (outcome.reason === 'stream_gone') {
      this.#options.metrics.sessions.labels('relay_error').inc()
      return
    }
    const err = outcome.err.code ?? outcome.err.message
    this.#options.logger.warn({ target, status: answer.status, err }, 'stargate target sent an invalid response')
    this.#reject(stream, 'upstream_invalid_response', err)
  }

  /**
   * Capsules pass end to end, so the flow-control credit a Pylon assumes (what the relay
   * advertised) should be what the pod grants. A pod configured otherwise still works for
   * small transfers but may stall or break streams: say so once per pod and values.
   */
  #checkPodSettings (target: string, custom: Readonly<Record<number, number>> | undefined): void {
    const advertised = this.#options.wtSettings ?? DEFAULT_WT_SETTINGS
    const pod = pickWtSettings(custom)
    if (pod === null) return
    const differs = Object.keys(pod).some((id) => pod[Number(id)] !== advertised[Number(id)])
    if (!differs) return
    const key = `${target} ${JSON.stringify(pod)}`
    if (this.#settingsWarned.has(key) || this.#settingsWarned.size >= 1000) return
    this.#settingsWarned.add(key)
    this.#options.logger.warn({ target, pod, advertised }, `stargate ${target} advertises WebTransport flow-control settings that differ from the ones the router gives Pylons; large transfers may stall`)
  }

  #bridge (stream: ServerHttp2Stream, answer: DialAnswer, pending: PendingSession): void {
    const { connection, target } = pending
    const bridge = new WebTransportBridge({
      downstream: stream,
      upstream: answer.stream,
      upstreamSession: answer.session,
      trustKey: pending.trustKey,
      target: target.identity,
      clock: this.#clock,
      keepAlive: this.#options.keepAliveMs > 0,
      metrics: this.#options.metrics,
      onEnd: (ended, end) => { this.#onBridgeEnd(ended, end) },
      onRefused: (side) => { this.#options.drainMetrics?.streamsRefused.labels('webtransport_h2', side).inc() },
    })
    this.#bridges.add(bridge)
    this.#drain.follow(bridge, target)
    const registry = this.#options.connections ?? null
    if (registry !== null) {
      // Draining: the Pylon's HTTP/2 connection gets GOAWAY (no new session on it), the session
      // drains (bridge.ts), done when the bridge ended.
      const handle = new TunnelHandle(this.kind, registry.now(), {
        drain: (reason) => {
          const session = bridge.downstreamSession
          if (session !== undefined && !session.closed && !session.destroyed) session.close()
          bridge.drain(tunnelCloseReasonOf(reason))
        },
        abort: () => { bridge.destroy() },
      })
      this.#handles.set(bridge, handle)
      handle.register(registry)
    }
    this.#bridgeConnections.set(bridge, connection)
    connection.sessions++
    this.#options.metrics.activeSessions.inc()
    this.#options.logger.debug({ target: target.identity }, 'webtransport session bridged')
  }

  #onBridgeEnd (bridge: WebTransportBridge, end: BridgeEnd): void {
    if (!this.#bridges.delete(bridge)) return
    this.#handles.get(bridge)?.gone()
    this.#handles.delete(bridge)
    this.#grace.forget(bridge)
    this.#drain.forget(bridge)
    const connection = this.#bridgeConnections.get(bridge)
    this.#bridgeConnections.delete(bridge)
    if (connection !== undefined) connection.sessions--
    this.#options.metrics.sessions.labels(end).inc()
    this.#options.metrics.activeSessions.dec()
    if (this.#bridges.size === 0) this.#onDrained?.()
    this.#options.logger.debug({ target: bridge.target, end, seconds: Math.round((this.#clock.now - bridge.startedAt) / 1000) }, 'webtransport session ended')
  }

  /** A pod that refused the session: its status, fields and (bounded) body reach the Pylon. */
  #passThroughRejection (stream: ServerHttp2Stream, target: string, answer: DialAnswer): void {
    const answered = respondIfOpen(stream, downstreamResponseHeaders(answer.headers), { endStream: false })
    if (!answered.ok) {
      this.#answerNotSent(stream, target, answer, answered)
      return
    }
    this.#options.metrics.sessions.labels('upstream_rejected').inc()
    let sent = 0
    const upstream = answer.stream
    upstream.on('data', (chunk: Buffer) => {
      if (sent >= MAX_REJECTION_BODY || stream.closed) return
      const part = chunk.length + sent > MAX_REJECTION_BODY ? chunk.subarray(0, MAX_REJECTION_BODY - sent) : chunk
      sent += part.length
      stream.write(part)
    })
    const finish = (): void => {
      if (!stream.closed && !stream.writableEnded) stream.end(() => { if (!stream.closed) stream.close() })
      if (!answer.session.closed) answer.session.close()
    }
    upstream.once('end', finish)
    upstream.once('close', finish)
  }

  #settlePending (pending: PendingSession, code: RejectionCode, detail: string | null): void {
    if (!this.#unpend(pending)) return
    pending.dial.cancel()
    this.#reject(pending.stream, code, detail)
  }

  #reject (stream: ServerHttp2Stream, code: RejectionCode, detail: string | null): void {
    const rejection = REJECTIONS[code]
    if (rejection.outcome !== null) this.#options.metrics.sessions.labels(rejection.outcome).inc()
    if (!respondIfOpen(stream, { ':status': rejection.status, 'content-type': 'text/plain; charset=utf-8', 'x-stargate-error-code': code }, { endStream: false }).ok) return
    // The message is the table's; the detail (an upstream error) goes to the log only.
    stream.end(rejection.message + '\n', () => { if (!stream.closed) stream.close(constants.NGHTTP2_NO_ERROR) })
    if (detail === null) this.#options.logger.debug({ code, status: rejection.status }, `webtransport session request rejected: ${rejection.message}`)
  }

  #onTick (): void {
    const now = Date.now()
    this.#clock.now = now
    const { idleTimeoutMs, keepAliveMs } = this.#options
    // A Pylon connection that carries no session request for the idle timeout is closed
    // (a connection that only ever completes TLS would otherwise be held forever).
    for (const [session, state] of this.#sessions) {
      if (state.streams === 0 && now - state.idleSince > idleTimeoutMs && !session.closed) session.close()
    }
    for (const bridge of this.#bridges) {
      bridge.flushBytes()
      if (now - Math.min(bridge.lastFromDownstream, bridge.lastFromUpstream) > idleTimeoutMs) {
        bridge.close(0, WEBTRANSPORT_CLOSE_REASONS.idle_timeout.reason, 'completed')
        continue
      }
      if (keepAliveMs > 0 && now - bridge.lastPing >= keepAliveMs) bridge.ping()
    }
  }
}
