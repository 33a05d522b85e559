/**
 * The engine with quinn 0.11 + rustls 0.23, the stack of the real Pylon and Stargate,
 * configured as they are (test/fixtures/quinn-peer): raw QUIC with no ALPN on either side.
 * quiche could do neither role (BoringSSL refuses QUIC without ALPN); the engine must do both:
 * - as server, to a Pylon-like quinn client offering no ALPN;
 * - as client, to a Stargate-like quinn server that has no ALPN configured (rustls in QUIC
 *   mode refuses a client that offers one) — so the engine must offer nothing at all.
 */
import t from 'tap'
import { randomBytes } from 'node:crypto'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { QuinnPeer, patternBytes, patternSha256, quinnPeerSkip } from '../fixtures/quinn-peer.ts'
import { createQuicTls } from '../fixtures/quic-tls.ts'
import { closed, dial, echoStreams, established, listen, nextStream, readToEnd, sha256, writeAll } from '../fixtures/quic-engine.ts'
import { ClientCredentials, ServerCredentials } from '../../lib/quic/credentials.ts'
import { waitFor } from '../fixtures/wait.ts'

const skip = await quinnPeerSkip(t)

t.test('a Pylon-like quinn client with no ALPN: the engine serves it, streams both ways byte-exact', { skip }, async (t) => {
  const tls = await createQuicTls(t, ['*.stargate.external'])
  const credentials = ServerCredentials.create({ certPem: tls.router.chainPem, keyPem: tls.router.keyPem })
  t.teardown(() => { credentials.release() })
  const server = listen(t, '127.0.88.1', credentials, { onConnection: (conn) => { echoStreams(conn) } })
  const pylon = await QuinnPeer.client(t, { connect: `127.0.88.1:${server.endpoint.port}`, sni: 'stargate-0.stargate.external', caPath: tls.caPath, accept: 'echo' })
  const connected = await pylon.established(1)
  t.equal(connected.alpn, null, 'quinn negotiated no ALPN')
  t.same(server.proposals[0]?.alpn, [], 'the engine saw no ALPN offered')
  t.equal(server.proposals[0]?.sni, 'stargate-0.stargate.external')
  const conn = server.connections[0]
  if (conn === undefined) throw new Error('no connection')
  await established(conn)
  t.equal(conn.alpn, null)
  // The Pylon opens a stream (engine echoes), 8 MiB.
  const up = await pylon.open(1, 'bi')
  await pylon.write(1, up, { bytes: 8 << 20, seed: 3 })
  await pylon.finish(1, up)
  const echoed = await pylon.recvDone(1, up)
  t.equal(echoed.sha256, patternSha256(3, 8 << 20), 'the Pylon reads its 8 MiB back')
  t.ok(echoed.fin)
  // The engine opens a stream to the Pylon (the reverse tunnel's main direction; quinn echoes).
  const down = conn.openStream()
  if (down === null) throw new Error('no stream')
  const payload = randomBytes(4 << 20)
  const back = readToEnd(down)
  await writeAll(down, payload)
  t.equal(sha256((await back).data), sha256(payload), 'the engine reads 4 MiB back from quinn')
  // Close with a code and reason.
  conn.close(0x2a, 'engine done')
  t.match(await pylon.closed(1), { kind: 'application', by: 'peer', code: 0x2a, reason: 'engine done' })
})

t.test('a Stargate-like quinn server with no ALPN: the engine dials it offering none, and takes its streams', { skip }, async (t) => {
  const tls = await createQuicTls(t, ['*.stargate.external'])
  const certPath = join(tls.dir, 'stargate.crt')
  const keyPath = join(tls.dir, 'stargate.key')
  await writeFile(certPath, tls.stargate.chainPem)
  await writeFile(keyPath, tls.stargate.keyPem)
  const stargate = await QuinnPeer.server(t, { listen: '127.0.88.2:0', certPath, keyPath, accept: 'echo' })
  const credentials = ClientCredentials.create({ caPem: tls.ca.certPem, verify: true })
  t.teardown(() => { credentials.release() })
  const conn = dial(t, '127.0.88.2', stargate.port, { credentials, serverName: 'stargate-0.stargate.external', alpn: [] })
  await established(conn)
  t.equal(conn.alpn, null, 'no ALPN negotiated')
  t.same((await stargate.waitEvent('client_hello')).alpn, null, 'the engine offered no ALPN extension at all')
  const { conn: sc } = await stargate.waitEvent('connected')
  // The Stargate opens a bidi stream to us (the engine echoes) — as it proxies an LLM request.
  echoStreams(conn)
  const s = await stargate.open(sc, 'bi')
  await stargate.write(sc, s, { bytes: 2 << 20, seed: 7 })
  await stargate.finish(sc, s)
  t.equal((await stargate.recvDone(sc, s)).sha256, patternSha256(7, 2 << 20), 'its 2 MiB come back intact')
  // A uni stream from the Stargate arrives with its bytes.
  conn.removeAllListeners('stream')
  const atEngine = nextStream(conn)
  const u = await stargate.open(sc, 'uni')
  await stargate.write(sc, u, 'one way')
  await stargate.finish(sc, u)
  t.equal((await readToEnd(await atEngine)).data.toString(), 'one way')
  await stargate.close(sc, 7, 'stargate leaving')
  t.match(await closed(conn), { kind: 'peer', app: true, code: 7, reasonText: 'stargate leaving' })
})

t.test('offering an ALPN to a no-ALPN quinn server fails the handshake, as with the real Stargate', { skip }, async (t) => {
  const tls = await createQuicTls(t, ['*.stargate.external'])
  const certPath = join(tls.dir, 'stargate.crt')
  const keyPath = join(tls.dir, 'stargate.key')
  await writeFile(certPath, tls.stargate.chainPem)
  await writeFile(keyPath, tls.stargate.keyPem)
  const stargate = await QuinnPeer.server(t, { listen: '127.0.88.3:0', certPath, keyPath })
  const credentials = ClientCredentials.create({ caPem: tls.ca.certPem, verify: true })
  t.teardown(() => { credentials.release() })
  const conn = dial(t, '127.0.88.3', stargate.port, { credentials, serverName: 'stargate-0.stargate.external', alpn: ['h3'] })
  const info = await closed(conn)
  t.match(info, { established: false }, 'refused')
  t.equal(info.code, 0x100 + 120, 'with no_application_protocol (0x178)')
  await waitFor(() => stargate.events.some((e) => e.ev === 'client_hello'))
})

/*
 * The engine's packets are a fixed size (1350 bytes by default), and ngtcp2 writes a DATAGRAM
 * frame whole or not at all, answering "0 bytes written" for one that can never fit, as it does
 * under congestion control. The failure mode: the engine queued such a datagram, kept it at the
 * head of the queue for good and, sending queued datagrams before stream data, never sent the
 * connection's stream data again. quinn 0.11 peers grow their own datagram limit to 1406 bytes
 * with path-MTU discovery, so datagrams of that size reach the engine's datagram bridge from a
 * real Pylon or Stargate.
 */
t.test('a datagram larger than the engine\'s packets carry is refused at once and the connection\'s streams go on', { skip }, async (t) => {
  const tls = await createQuicTls(t, ['*.stargate.external'])
  const certPath = join(tls.dir, 'stargate.crt')
  const keyPath = join(tls.dir, 'stargate.key')
  await writeFile(certPath, tls.stargate.chainPem)
  await writeFile(keyPath, tls.stargate.keyPem)
  const stargate = await QuinnPeer.server(t, { listen: '127.0.88.4:0', certPath, keyPath, accept: 'echo' })
  const credentials = ClientCredentials.create({ caPem: tls.ca.certPem, verify: true })
  t.teardown(() => { credentials.release() })
  const payload = 1350
  const conn = dial(t, '127.0.88.4', stargate.port, { credentials, serverName: 'stargate-0.stargate.external', transport: { maxPayload: payload, datagrams: true } })
  await established(conn)
  const { conn: sc } = await stargate.waitEvent('connected')
  t.ok(conn.datagrams, 'datagrams negotiated')
  // A short header with quinn's 8-byte connection ID, a 4-byte packet number and the AEAD tag,
  // then the DATAGRAM frame's type and 2-byte length.
  const largest = payload - (1 + 8 + 4 + 16) - (1 + 2)
  t.equal(conn.sendDatagram(Buffer.alloc(largest + 1)), false, `one byte more than fits (${largest + 1}) is refused`)
  t.equal(conn.sendDatagram(Buffer.alloc(1406)), false, 'so is one at quinn 0.11\'s own limit after path-MTU discovery')
  t.equal(conn.sendDatagram(patternBytes(41, largest)), true, `the largest that fits (${largest}) is queued`)
  const got = await stargate.waitEvent('datagram', { conn: sc })
  t.equal(got.hex, patternBytes(41, largest).toString('hex'), 'and arrives intact')
  const s = conn.openStream()
  if (s === null) throw new Error('no stream')
  const data = randomBytes(1 << 20)
  const back = readToEnd(s)
  await writeAll(s, data)
  t.equal(sha256((await back).data), sha256(data), 'a stream after them is echoed whole')
})

// GnuTLS 3.7 holds at most 8 ALPN protocols of at most 31 bytes and refused the whole list
// beyond either, so a client offering more (quinn sends whatever it is given) was dropped with
// an error log instead of being served from its offer.
t.test('a quinn client offering more ALPN protocols than GnuTLS holds, some too long for it, is served from its first usable one', { skip }, async (t) => {
  const tls = await createQuicTls(t, ['*.stargate.external'])
  const credentials = ServerCredentials.create({ certPem: tls.router.chainPem, keyPem: tls.router.keyPem })
  t.teardown(() => { credentials.release() })
  const server = listen(t, '127.0.88.4', credentials)
  const offer = ['x'.repeat(40), ...Array.from({ length: 11 }, (_, i) => `tunnel-${i}`)]
  const pylon = await QuinnPeer.client(t, { connect: `127.0.88.4:${server.endpoint.port}`, sni: 'stargate-0.stargate.external', caPath: tls.caPath, alpn: offer })
  const connected = await pylon.established(1)
  t.same(server.proposals[0]?.alpn, offer, 'the proposal carries the whole offer')
  t.equal(connected.alpn, 'tunnel-0', 'the first protocol GnuTLS could take was negotiated')
})
