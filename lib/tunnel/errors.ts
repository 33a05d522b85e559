/**
 * What a Pylon sees when the router ends or refuses a reverse tunnel (SPEC §7): the reasons of
 * raw QUIC CONNECTION_CLOSE frames (application error code 0) and of WebTransport close capsules.
 * The routing refusals are one condition on both tunnel kinds, so their wording is defined once
 * (SNI_REFUSALS) and used by the raw QUIC reasons here and WebTransport's REJECTIONS
 * (webtransport-connect.ts), which answer the session request with an HTTP status instead.
 * A tunnel refused from its Initial packet gets no reason on the wire (RFC 9000 §10.2.3), only
 * APPLICATION_ERROR: those rows say so (`initial`), and the router's log and metrics keep the code.
 * Indexed with the other areas in lib/errors.ts and documented in docs/errors.md.
 */
import { catalogueArea, type ErrorDoc } from '../error-catalogue.ts'

/** The SPEC §7 wire strings of a tunnel that cannot be routed. */
export const SNI_REFUSALS = {
  missing_sni: 'missing target SNI',
  unknown_sni: 'unknown target SNI',
  target_unavailable: 'target stargate not ready',
} as const

/**
 * How a close reaches the Pylon besides its reason: `only` refused from the Initial packet (no
 * reason on the wire), `also` the reason on open tunnels and the Initial refusal for new ones.
 */
type InitialRefusal = 'only' | 'also'

interface QuicCloseDoc extends ErrorDoc {
  readonly reason: string
  readonly initial?: InitialRefusal
}

/**
 * The tunnel port's close reasons, all with application error code 0: raw QUIC CONNECTION_CLOSE
 * and WebTransport (over HTTP/3, and the HTTP/2 relay's close capsules) use the same ones
 * (TUNNEL_CLOSE_REASONS below).
 */
export const QUIC_CLOSE_REASONS = {
  missing_sni: {
    reason: SNI_REFUSALS.missing_sni,
    initial: 'only',
    meaning: 'the Pylon\'s Initial carries no server name, so it names no stargate; refused before the handshake',
    action: 'configure the Pylon to dial the advertised stargate host name (not an address)',
  },
  unknown_sni: {
    reason: SNI_REFUSALS.unknown_sni,
    initial: 'only',
    meaning: 'the server name does not render from --advertised-hostname-template (a name that does but names no ready pod is `target_unavailable`); refused before the handshake',
    action: 'check the Pylon\'s target against WatchStargates and --advertised-hostname-template',
  },
  target_unavailable: {
    reason: SNI_REFUSALS.target_unavailable,
    initial: 'also',
    meaning: 'the server name renders from the template but names no ready pod: one that is not ready, has no quic port, or does not exist; refused before the handshake, or closed with the reason when the pod left the ready set during it',
    action: 'none: the Pylon retries; if it persists, check the pod\'s readiness and its quic port (--quic-port-name)',
  },
  shutdown: {
    reason: 'router shutdown',
    initial: 'also',
    meaning: 'the router is shutting down (SIGTERM): new tunnels are refused; an open tunnel takes no new stream and is closed with this reason once its last stream ended (at --shutdown-drain-timeout-ms at the latest)',
    action: 'none: the Pylon re-registers and opens its tunnel through another replica',
  },
  rebalancing: {
    reason: 'router rebalancing',
    meaning: 'replica balancing (--rebalance) moves this tunnel off a replica above the mean: it takes no new stream, the open ones finish, then it closes with this reason',
    action: 'none: the Pylon opens its tunnel again through the load balancer, which places it afresh',
  },
  trust_replaced: {
    reason: 'upstream trust changed',
    meaning: 'the trust for stargate certificates changed (the --upstream-tls-cert-path bundle, or the router certificate file when it is the trust); tunnels dialled under the old one close (raw QUIC 5 s later)',
    action: 'none: the Pylon reconnects and the new tunnel uses the new trust',
  },
  client_trust_replaced: {
    reason: 'client trust changed',
    meaning: '--client-ca-path changed and no longer trusts this Pylon\'s certificate; its tunnels close (raw QUIC 5 s later)',
    action: 'give the Pylon a certificate the new bundle trusts',
  },
  target_left: {
    reason: 'target stargate left the ready set',
    meaning: 'the tunnel\'s pod started terminating, left the Service or moved, and did not come back within --drain-grace-ms (a pod that only turns unready keeps its tunnels)',
    action: 'none: the Pylon reconnects to a ready stargate',
  },
  leg_idle: {
    reason: '{side} connection idle timeout',
    meaning: 'the other leg (`pylon` or `stargate`) was silent for --relay-idle-timeout-ms, so the relay closed this one too',
    action: 'keep --relay-keep-alive-ms below --relay-idle-timeout-ms; check the side named',
  },
  leg_failed: {
    reason: '{side} connection failed: {kind}',
    meaning: 'the other leg ended without a close from its peer (handshake timeout, stateless reset, unreachable, a protocol error)',
    action: 'check the side named: its network, its QUIC stack or its certificate',
  },
} as const satisfies Record<string, QuicCloseDoc>

/** WebTransport over HTTP/2: close capsule reasons (code 0) of its own, besides the tunnel port's. */
export const WEBTRANSPORT_CLOSE_REASONS = {
  idle_timeout: {
    reason: 'idle timeout',
    meaning: 'the session carried no stream and no sign of life for --relay-idle-timeout-ms',
    action: 'keep --relay-keep-alive-ms below --relay-idle-timeout-ms',
  },
  downstream_aborted: {
    reason: 'downstream session aborted',
    meaning: 'the Pylon\'s session stream was reset or its connection died; the stargate gets this',
    action: 'check the Pylon\'s side',
  },
  upstream_aborted: {
    reason: 'upstream session aborted',
    meaning: 'the stargate\'s session stream was reset or its connection died; the Pylon gets this',
    action: 'check the stargate\'s logs',
  },
} as const satisfies Record<string, ErrorDoc & { readonly reason: string }>

export type QuicCloseCode = keyof typeof QUIC_CLOSE_REASONS

/**
 * The close table of every tunnel relay: QUIC_CLOSE_REASONS' wire strings by code (application
 * error code 0), what raw QUIC, WebTransport over HTTP/3 and over HTTP/2 close with.
 */
export const TUNNEL_CLOSE_REASONS: { readonly [K in QuicCloseCode]: typeof QUIC_CLOSE_REASONS[K]['reason'] } = Object.fromEntries(
  Object.entries(QUIC_CLOSE_REASONS).map(([code, { reason }]) => [code, reason])
) as { [K in QuicCloseCode]: typeof QUIC_CLOSE_REASONS[K]['reason'] }

/** A refusal from the Initial packet, as the Pylon's QUIC stack reads it. */
const INITIAL_CLOSE = 'CONNECTION_CLOSE APPLICATION_ERROR (0x0c), no reason'

function closeSeen (entry: QuicCloseDoc, code: string): string {
  switch (entry.initial) {
    case 'only': return `${INITIAL_CLOSE} (the router's log and metrics: \`${code}\`)`
    case 'also': return `close reason \`${entry.reason}\`; a new tunnel: ${INITIAL_CLOSE}`
    default: return `close reason \`${entry.reason}\``
  }
}

/**
 * The stream error code of a stream refused by a draining tunnel (SPEC §11): raw QUIC sends it
 * as the application code of STOP_SENDING and RESET_STREAM, WebTransport as the stream's error
 * code (over HTTP/3 mapped into the WebTransport range of HTTP/3 codes, so the application
 * reads this number). 32 bits, as WebTransport codes are; "DRN" in ASCII.
 */
export const STREAM_REFUSALS = {
  draining: {
    code: 0x44524e,
    meaning: 'the tunnel is draining (the router is shutting down, or replica balancing moves the tunnel): it takes no new bidirectional stream from either side; streams opened before run to completion and the tunnel then closes with `router shutdown` (or `router rebalancing`). The stream was not relayed (over WebTransport over HTTP/2 its first bytes reached the other end, which was told the stream was reset with this code)',
    action: 'open it again on another tunnel: the Pylon re-registers through another replica and opens a new tunnel there; retrying is safe, no application saw the stream complete',
  },
} as const satisfies Record<string, ErrorDoc & { readonly code: number }>

export const QUIC_CLOSE_AREA = catalogueArea(QUIC_CLOSE_REASONS, 'QUIC_CLOSE_REASONS', 'lib/tunnel/errors.ts', closeSeen, {
  title: 'Tunnel closes (tunnel port: raw QUIC, WebTransport)',
  where: 'The reason (application error code 0) of the CONNECTION_CLOSE frame or WebTransport close the router sends a Pylon or a stargate; `leg_idle` and `leg_failed` are raw QUIC\'s. ' +
    'A tunnel refused from its Initial packet, before any handshake work (SNI routing, shutdown), is closed with a transport CONNECTION_CLOSE carrying APPLICATION_ERROR (0x0c) and no reason phrase, as RFC 9000 §10.2.3 requires of a close sent before the handshake ' +
    '(quinn reports `aborted by peer: the application or application protocol caused the connection to be closed during the handshake`); ' +
    'the router counts an SNI refusal under its code (`stargate_k8s_router_quic_connections_total{outcome}` or `stargate_k8s_router_webtransport_sessions_total{outcome}`, and `stargate_k8s_router_quic_handshake_failures_total{reason}`) and logs it as `raw quic handshake refused` / `webtransport http/3 handshake refused` with `reason` and `sni`.',
})

export const STREAM_REFUSAL_AREA = catalogueArea(STREAM_REFUSALS, 'STREAM_REFUSALS', 'lib/tunnel/errors.ts', (e) => `stream error code \`0x${e.code.toString(16)}\` (${e.code})`, {
  title: 'Streams refused by a draining tunnel (tunnel port)',
  where: 'The error code of a bidirectional stream the Pylon or the stargate opens on a tunnel the router drains: raw QUIC STOP_SENDING and RESET_STREAM, WebTransport stream errors (over HTTP/3 mapped into the WebTransport range, over HTTP/2 in WT_STOP_SENDING and WT_RESET_STREAM capsules).',
})

export const WEBTRANSPORT_CLOSE_AREA = catalogueArea(WEBTRANSPORT_CLOSE_REASONS, 'WEBTRANSPORT_CLOSE_REASONS', 'lib/tunnel/errors.ts', (e) => `close reason \`${e.reason}\``, {
  title: 'WebTransport over HTTP/2: closes',
  where: 'The reason of the CLOSE_WEBTRANSPORT_SESSION capsule (code 0) the router sends on a session it ends.',
})
