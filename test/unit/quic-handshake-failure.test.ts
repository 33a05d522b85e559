/**
 * A failed QUIC handshake is reported with one bounded reason, from the engine's close
 * info and the side we played (lib/quic/handshake-failure.ts). Table-driven.
 */
import t from 'tap'
import { handshakeFailure } from '../../lib/quic/handshake-failure.ts'
import type { QuicCloseInfo, QuicRole } from '../../lib/quic/connection.ts'

function info (fields: Partial<QuicCloseInfo>): QuicCloseInfo {
  return { kind: 'error', app: false, code: 0, reason: Buffer.alloc(0), reasonText: '', established: false, alert: 0, liberr: 0, ...fields }
}

const cases: Array<{ name: string, role: QuicRole, info: QuicCloseInfo, want: string | null }> = [
  { name: 'established connections are no handshake failure', role: 'server', info: info({ kind: 'peer', established: true }), want: null },
  { name: 'our own close before the handshake is no failure', role: 'server', info: info({ kind: 'local' }), want: null },
  { name: 'destroyed is no failure', role: 'client', info: info({ kind: 'destroyed' }), want: null },
  { name: 'handshake timeout', role: 'server', info: info({ kind: 'handshake_timeout' }), want: 'timeout' },
  { name: 'ICMP unreachable on a dial', role: 'client', info: info({ kind: 'unreachable' }), want: 'unreachable' },
  { name: 'we sent no_application_protocol', role: 'server', info: info({ alert: 120 }), want: 'alpn' },
  { name: 'the peer sent no_application_protocol (0x178)', role: 'client', info: info({ kind: 'peer', code: 0x178 }), want: 'alpn' },
  { name: 'server: we required a client certificate (116)', role: 'server', info: info({ alert: 116 }), want: 'client_certificate' },
  { name: 'server: we refused the client certificate', role: 'server', info: info({ alert: 42 }), want: 'client_certificate' },
  { name: 'server: the client refused our certificate', role: 'server', info: info({ kind: 'peer', code: 0x100 + 48 }), want: 'certificate' },
  { name: 'client: we refused the server certificate', role: 'client', info: info({ alert: 46 }), want: 'certificate' },
  { name: 'client: the server refused our certificate', role: 'client', info: info({ kind: 'peer', code: 0x100 + 42 }), want: 'client_certificate' },
  { name: 'client: the server wanted a certificate', role: 'client', info: info({ kind: 'peer', code: 0x100 + 116 }), want: 'client_certificate' },
  { name: 'another TLS alert we sent', role: 'server', info: info({ alert: 40 }), want: 'tls' },
  { name: 'a protocol error without an alert', role: 'server', info: info({ liberr: -205 }), want: 'protocol' },
  { name: 'the peer closed with APPLICATION_ERROR (quinn 0.9 refusing a certificate)', role: 'server', info: info({ kind: 'peer', code: 0x0c }), want: 'peer_refused' },
  { name: 'a stateless reset during the handshake', role: 'client', info: info({ kind: 'stateless_reset' }), want: 'peer_refused' },
]

for (const c of cases) {
  t.test(c.name, async (t) => {
    t.equal(handshakeFailure(c.info, c.role), c.want)
  })
}
