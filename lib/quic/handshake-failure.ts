/**
 * Why a QUIC handshake failed, as one of a few bounded reasons (a refused handshake is
 * counted by reason and logged, never silent). Pure: it reads the engine's close info.
 *
 * TLS alerts (RFC 8446 §6.2) arrive two ways: one we sent (kind 'error', alert set) or one the
 * peer sent (kind 'peer', transport code 0x100 + alert, RFC 9001 §4.8). Which side's
 * certificate was refused depends on who sent the alert and on the role:
 *   we are the server, we refused the client's certificate   -> client_certificate
 *   we are the server, the client refused ours               -> certificate
 *   we are the client, we refused the server's certificate   -> certificate
 *   we are the client, the server refused ours (or wanted one) -> client_certificate
 * A peer that closes during the handshake without an alert is peer_refused: quinn 0.9 (older
 * Pylons' stack) refusing the router's certificate sends APPLICATION_ERROR (0x0c), not its
 * alert, in the Initial/Handshake packet (measured here; its own log says bad_certificate).
 * quinn 0.11 + rustls 0.23 (today's Pylon) sends its alert (unknown_ca): certificate.
 */
import type { QuicCloseInfo, QuicRole } from './connection.ts'
import type { ErrorDoc } from '../error-catalogue.ts'

/**
 * Each reason with what it means and what to do: an operator sees them as the `reason` label of
 * stargate_router_quic_handshake_failures_total and in the warn log (docs/errors.md).
 */
export const HANDSHAKE_FAILURES_DOC = {
  alpn: {
    meaning: 'the two sides share no ALPN protocol (TLS alert no_application_protocol)',
    action: 'the router relays the Pylon\'s own offer: check that the Pylon and the stargate agree on ALPN',
  },
  certificate: {
    meaning: 'the server\'s certificate was refused: the router\'s by the Pylon, or (upstream_) the stargate\'s by the router',
    action: 'check --tls-cert-path against the Pylon\'s trust, or the stargate\'s certificate against --upstream-tls-cert-path',
  },
  client_certificate: {
    meaning: 'the client\'s certificate was refused or missing: the Pylon\'s by the router (--client-ca-path), or (upstream_) the router\'s by the stargate',
    action: 'give the Pylon a certificate --client-ca-path trusts, or check what the stargate requires',
  },
  timeout: {
    meaning: 'the handshake did not complete in time (packets lost or the peer stopped answering)',
    action: 'check the network path (UDP allowed both ways) and the peer\'s load',
  },
  tls: {
    meaning: 'another TLS alert ended the handshake (version, cipher, a missing certificate request)',
    action: 'the warn log carries the alert number (RFC 8446 §6.2); compare both sides\' TLS settings',
  },
  protocol: {
    meaning: 'the router closed the handshake on a QUIC protocol error from the peer',
    action: 'the warn log carries the transport error code; check the peer\'s QUIC stack',
  },
  peer_refused: {
    meaning: 'the peer closed without a TLS alert, or sent a stateless reset (quinn 0.9 refusing a certificate does this)',
    action: 'read the peer\'s own log: it names what it refused',
  },
  unreachable: {
    meaning: 'ICMP said the peer cannot be reached',
    action: 'check that the peer listens on that address and port',
  },
} as const satisfies Record<string, ErrorDoc>

export type HandshakeFailureReason = keyof typeof HANDSHAKE_FAILURES_DOC
export const HANDSHAKE_FAILURE_REASONS: readonly HandshakeFailureReason[] = Object.keys(HANDSHAKE_FAILURES_DOC) as HandshakeFailureReason[]

/** RFC 8446 §6.2 alerts about certificates. */
const CERTIFICATE_ALERTS: ReadonlySet<number> = new Set([
  42, // bad_certificate
  43, // unsupported_certificate
  44, // certificate_revoked
  45, // certificate_expired
  46, // certificate_unknown
  48, // unknown_ca
  49, // access_denied
])
const CERTIFICATE_REQUIRED = 116
const NO_APPLICATION_PROTOCOL = 120
const CRYPTO_ERROR_BASE = 0x100

function byAlert (alert: number, refusedByUs: boolean, role: QuicRole): HandshakeFailureReason {
  if (alert === NO_APPLICATION_PROTOCOL) return 'alpn'
  if (alert === CERTIFICATE_REQUIRED) return role === 'server' ? (refusedByUs ? 'client_certificate' : 'tls') : 'client_certificate'
  if (CERTIFICATE_ALERTS.has(alert)) {
    // The refused certificate is the other side's when we refused, ours when the peer did.
    const theirs = refusedByUs
    if (role === 'server') return theirs ? 'client_certificate' : 'certificate'
    return theirs ? 'certificate' : 'client_certificate'
  }
  return 'tls'
}

/**
 * The reason a connection closed before its handshake completed, or null when it was
 * established or ended without a failure (closed by us, or destroyed).
 */
export function handshakeFailure (info: QuicCloseInfo, role: QuicRole): HandshakeFailureReason | null {
  if (info.established) return null
  switch (info.kind) {
    case 'handshake_timeout':
    case 'idle':
      return 'timeout'
    case 'unreachable':
      return 'unreachable'
    case 'error':
      return info.alert !== 0 ? byAlert(info.alert, true, role) : 'protocol'
    case 'peer':
      if (!info.app && info.code >= CRYPTO_ERROR_BASE && info.code < CRYPTO_ERROR_BASE + 0x100) return byAlert(info.code - CRYPTO_ERROR_BASE, false, role)
      return 'peer_refused'
    case 'stateless_reset':
      return 'peer_refused'
    case 'local':
    case 'destroyed':
      return null
    default: {
      const never: never = info.kind
      return never
    }
  }
}
