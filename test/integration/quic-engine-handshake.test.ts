/**
 * The engine (ngtcp2 + GnuTLS) completes handshakes with no ALPN at all in both roles
 * — what real Pylons (quinn + rustls, raw QUIC) offer and real Stargate listeners expect — and
 * with whatever ALPN the server side accepts, chosen per connection from the client's offer.
 * A connection refused at the proposal costs no handshake: the client gets a CONNECTION_CLOSE
 * in an Initial packet with the reason.
 */
import t from 'tap'
import { randomBytes } from 'node:crypto'
import { createSocket } from 'node:dgram'
import { clientHello, connectionClose, openInitial, scatteredHello } from '../fixtures/quic-initial.ts'
import { waitFor } from '../fixtures/wait.ts'
import { closed, dial, engine, engineTls, established, listen, readToEnd } from '../fixtures/quic-engine.ts'
import { rawSocket, sendRaw } from '../fixtures/quic-raw.ts'
import type { QuicStream } from '../../lib/quic/stream.ts'
import { APPLICATION_ERROR } from '../../lib/quic/endpoint.ts'
import { ClientCredentials } from '../../lib/quic/credentials.ts'
import { ENDPOINT_DROP_REASONS, STATELESS_PACKET_TYPES } from '../../lib/quic/native.ts'

t.test('a client offering no ALPN reaches a server that accepts none: both sides see no protocol', async (t) => {
  const tls = await engineTls(t)
  const server = listen(t, '127.0.80.1', tls.serverCredentials)
  const client = dial(t, '127.0.80.1', server.endpoint.port, { credentials: tls.clientCredentials, alpn: [] })
  await established(client)
  const proposal = server.proposals[0]
  t.equal(proposal?.sni, 'pod.stargate.test', 'the proposal carries the SNI from the Initial')
  t.same(proposal?.alpn, [], 'and the (empty) ALPN offer')
  t.equal(client.alpn, null, 'the client negotiated no ALPN')
  const accepted = server.connections[0]
  if (accepted === undefined) throw new Error('no server connection')
  await established(accepted)
  t.equal(accepted.alpn, null, 'the server negotiated no ALPN')
  t.equal(accepted.serverName, 'pod.stargate.test')
  t.ok(client.datagrams && accepted.datagrams, 'datagrams negotiated both ways')
})

t.test('an offered ALPN list is seen in order and the server picks from exactly that offer', async (t) => {
  const tls = await engineTls(t)
  const server = listen(t, '127.0.80.2', tls.serverCredentials)
  const client = dial(t, '127.0.80.2', server.endpoint.port, { credentials: tls.clientCredentials, alpn: ['h3', 'stargate-tunnel'] })
  await established(client)
  t.same(server.proposals[0]?.alpn, ['h3', 'stargate-tunnel'])
  t.equal(client.alpn, 'h3', 'the first offered protocol was negotiated')
})

t.test('a ClientHello spread over several Initial packets, its CRYPTO frames out of order, is reassembled before the proposal', async (t) => {
  const tls = await engineTls(t)
  const server = listen(t, '127.0.80.3', tls.serverCredentials, {
    decide: (proposal) => {
      proposal.reject()
      return null
    },
  })
  // ~2,600 bytes, like Chromium's ClientHello with a post-quantum key share.
  const hello = clientHello({ sni: 'Pod.Stargate.Test', alpn: ['h3', 'stargate'], padding: 2400 })
  const dcid = randomBytes(16)
  const datagrams = scatteredHello(hello, { dcid, scid: randomBytes(8), piece: 333 })
  t.ok(datagrams.length >= 3, `the hello takes ${datagrams.length} Initial packets`)
  const socket = createSocket('udp4')
  await new Promise<void>((resolve) => { socket.bind(0, '127.0.80.3', resolve) })
  t.teardown(() => { socket.close() })
  const answered = new Promise<Buffer>((resolve) => { socket.once('message', resolve) })
  // Last packet first: the endpoint cannot rely on order either.
  for (const d of [...datagrams].reverse()) socket.send(d, server.endpoint.port, '127.0.80.3')
  await waitFor(() => server.proposals.length === 1, { message: 'the proposal' })
  t.equal(server.proposals[0]?.sni, 'pod.stargate.test', 'the SNI, lower-cased')
  t.same(server.proposals[0]?.alpn, ['h3', 'stargate'], 'the ALPN offer')
  const reply = await answered
  t.equal((reply[0] as number) & 0xf0, 0xc0, 'the rejection is a long-header Initial packet')
  // RFC 9000 §10.2.3: in an Initial, a transport close (0x1c) with APPLICATION_ERROR, no reason.
  t.same(connectionClose(openInitial(reply, dcid).payload), { type: 0x1c, code: APPLICATION_ERROR, reason: Buffer.alloc(0) }, 'a transport CONNECTION_CLOSE, APPLICATION_ERROR, empty reason phrase')
})

// RFC 9000 §10.2.3: anyone on the path reads an Initial, so an application's refusal sent in
// one is a transport close with APPLICATION_ERROR and the reason phrase cleared.
t.test('a proposal rejected by the server closes the client from an Initial: APPLICATION_ERROR, no reason phrase, no handshake', async (t) => {
  const tls = await engineTls(t)
  const server = listen(t, '127.0.80.4', tls.serverCredentials, {
    decide: (proposal) => {
      proposal.reject()
      return null
    },
  })
  const client = dial(t, '127.0.80.4', server.endpoint.port, { credentials: tls.clientCredentials, serverName: 'nobody.example' })
  const info = await closed(client)
  t.match(info, { kind: 'peer', app: false, code: APPLICATION_ERROR, established: false })
  t.equal(info.reasonText, '', 'the close carries no reason phrase')
  t.equal(server.connections.length, 0)
  const stats = server.endpoint.stats()
  t.equal(stats?.rejected, 1, 'counted as rejected')
  t.equal(stats?.accepted, 0)
})

t.test('a client without SNI is proposed with sni null', async (t) => {
  const tls = await engineTls(t)
  const server = listen(t, '127.0.80.5', tls.serverCredentials, {
    decide: (proposal) => {
      proposal.reject()
      return null
    },
  })
  const insecure = ClientCredentials.create({ caPem: null, verify: false })
  t.teardown(() => { insecure.release() })
  const client = dial(t, '127.0.80.5', server.endpoint.port, { credentials: insecure, serverName: null })
  t.match(await closed(client), { kind: 'peer', app: false, code: APPLICATION_ERROR, reasonText: '' })
  t.equal(server.proposals[0]?.sni, null)
})

t.test('a server certificate the client does not trust fails the handshake on the client with a certificate alert', async (t) => {
  const tls = await engineTls(t)
  const other = await engineTls(t)
  const server = listen(t, '127.0.80.6', tls.serverCredentials)
  const client = dial(t, '127.0.80.6', server.endpoint.port, { credentials: other.clientCredentials })
  const info = await closed(client)
  t.match(info, { kind: 'error', established: false })
  t.ok([42, 43, 44, 45, 46, 48].includes(info.alert), `a certificate alert (${info.alert})`)
  const accepted = server.connections[0]
  if (accepted !== undefined) {
    const atServer = await closed(accepted)
    t.match(atServer, { kind: 'peer', app: false, established: false }, 'the server hears the alert as a transport close')
    t.equal(atServer.code, 0x100 + info.alert, 'crypto error = 0x100 + alert')
  }
})

t.test('a name the certificate does not cover fails verification; verify off accepts it', async (t) => {
  const tls = await engineTls(t)
  const server = listen(t, '127.0.80.7', tls.serverCredentials)
  const wrong = dial(t, '127.0.80.7', server.endpoint.port, { credentials: tls.clientCredentials, serverName: 'other.stargate.test' })
  t.match(await closed(wrong), { kind: 'error', established: false })
  const insecure = ClientCredentials.create({ caPem: null, verify: false })
  t.teardown(() => { insecure.release() })
  const ok = dial(t, '127.0.80.7', server.endpoint.port, { credentials: insecure, serverName: 'other.stargate.test' })
  await established(ok)
  t.pass('established without verification')
})

t.test('mTLS: a server requiring client certificates refuses a client without one and accepts one with a valid one', async (t) => {
  const tls = await engineTls(t)
  const { ServerCredentials } = await import('../../lib/quic/credentials.ts')
  const { createLeaf } = await import('../fixtures/certs.ts')
  const strict = ServerCredentials.create({ certPem: tls.server.chainPem, keyPem: tls.server.keyPem, clientCaPem: tls.ca.certPem })
  t.teardown(() => { strict.release() })
  const server = listen(t, '127.0.80.8', strict)
  const anonymous = dial(t, '127.0.80.8', server.endpoint.port, { credentials: tls.clientCredentials })
  // TLS 1.3: the client's handshake is complete once it sent Finished; the server's refusal
  // (certificate_required, alert 116) arrives after that as a crypto error close.
  t.match(await closed(anonymous), { kind: 'peer', app: false, code: 0x100 + 116 }, 'the client is closed with certificate_required')
  const refusedAtServer = server.connections[0]
  if (refusedAtServer === undefined) throw new Error('no server connection')
  t.match(await closed(refusedAtServer), { kind: 'error', established: false, alert: 116 }, 'the server never established it')
  const pylon = await createLeaf(tls.ca, { dnsNames: ['pylon.test'], clientAuth: true })
  const withCert = ClientCredentials.create({ caPem: tls.ca.certPem, verify: true, certPem: pylon.chainPem, keyPem: pylon.keyPem })
  t.teardown(() => { withCert.release() })
  const client = dial(t, '127.0.80.8', server.endpoint.port, { credentials: withCert })
  await established(client)
  const accepted = server.connections.at(-1)
  if (accepted === undefined) throw new Error('no connection')
  await established(accepted)
  const chain = accepted.peerCertificates()
  t.equal(chain.length, 1, 'the server sees the client certificate chain')
  t.ok(chain[0]?.equals(Buffer.from(pylon.x509.raw)), 'the leaf, as DER')
})

t.test('after a restart with the same reset secret, a client of the old process gets a stateless reset and learns at once', async (t) => {
  const tls = await engineTls(t)
  const resetSecret = randomBytes(32)
  const first = listen(t, '127.0.3.52', tls.serverCredentials, { resetSecret })
  const port = first.endpoint.port
  const client = dial(t, '127.0.3.52', port, { credentials: tls.clientCredentials, transport: { idleTimeoutMs: 60_000 } })
  await established(client)
  // One round trip on a stream first, so the handshake is confirmed on both sides (a client
  // that still sends Handshake packets is not in the state a long-lived tunnel is in).
  const server = first.connections[0]
  if (server === undefined) return t.fail('no server connection')
  server.on('stream', (s: QuicStream) => { readToEnd(s).then(({ data }) => { s.end(data) }, () => {}) })
  const ping = client.openStream(true)
  if (ping === null) return t.fail('no stream')
  ping.end(Buffer.from('ping'))
  t.equal((await readToEnd(ping)).data.toString(), 'ping', 'the old process answered')
  // The old process ends without a word: its connections forgotten, its socket closed.
  for (const conn of first.connections) conn.destroy()
  first.endpoint.close()
  const second = listen(t, '127.0.3.52', tls.serverCredentials, { resetSecret, port })
  // Big enough that a reset (smaller than its trigger, RFC 9000 §10.3) can carry its token.
  client.openStream(true)?.write(randomBytes(1000))
  const info = await closed(client)
  t.equal(info.kind, 'stateless_reset', 'the client closed on a stateless reset, not after its 60 s idle timeout')
  t.ok((second.endpoint.stats()?.stateless.stateless_reset ?? 0) >= 1, 'sent by the new endpoint')
})

// The metrics pass these objects on as they come (lib/tunnel/tunnel-port.ts), so the addon's
// names must be the label values of quic_datagrams_dropped_total and quic_stateless_packets_total.
t.test('the endpoint counts drops and stateless answers by reason under the metrics\' label values', async (t) => {
  const server = listen(t, '127.0.80.9', (await engineTls(t)).serverCredentials)
  const socket = await rawSocket(t, '127.0.80.9')
  const before = engine().counters()
  // One byte is not QUIC; an HTTP request reads as a short header for no connection, too small
  // to be owed a stateless reset.
  await sendRaw(socket, server.endpoint.port, Buffer.alloc(1), '127.0.80.9')
  await sendRaw(socket, server.endpoint.port, Buffer.from('GET / HTTP/1.1\r\n\r\n'), '127.0.80.9')
  // A long header of a version nobody speaks, padded to 1200 bytes: Version Negotiation answers it.
  const unknownVersion = Buffer.concat([Buffer.from([0xc0, 0x1a, 0x2a, 0x3a, 0x4a, 8]), randomBytes(8), Buffer.from([8]), randomBytes(8)])
  await sendRaw(socket, server.endpoint.port, Buffer.concat([unknownVersion, Buffer.alloc(1200 - unknownVersion.length)]), '127.0.80.9')
  await waitFor(() => (server.endpoint.stats()?.stateless.version_negotiation ?? 0) > 0, { message: 'the version negotiation' })
  const stats = server.endpoint.stats()
  if (stats === null) return t.fail('no endpoint stats')
  t.same(Object.keys(stats.dropped), ENDPOINT_DROP_REASONS, 'drops by every reason the metric lists, in its order')
  t.same(Object.keys(stats.stateless), STATELESS_PACKET_TYPES, 'stateless packets by every type the metric lists')
  t.same(stats.dropped, { malformed: 1, unknown_connection: 1, connection_limit: 0, invalid_token: 0, pending_limit: 0, closing: 0 })
  t.same(stats.stateless, { retry: 0, stateless_reset: 0, version_negotiation: 1 })
  t.match(stats, { rxDatagrams: 3, txDatagrams: 1, txDropped: 0 }, 'the endpoint read three datagrams and sent one')
  const after = engine().counters()
  t.ok(after.rxDatagrams - before.rxDatagrams >= 3 && after.txDatagrams - before.txDatagrams >= 1, 'the engine total counts them too')
})
