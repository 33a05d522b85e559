/**
 * The quinn + rustls peers (test/fixtures/quinn-peer) work, against each other and
 * against an implementation of neither this project nor quinn: Debian's ngtcp2 examples
 * (gtlsserver / gtlsclient, GnuTLS, ALPN h3). The router's raw QUIC tests build on these
 * peers, so this file checks what they report before anything depends on it: a Pylon-like
 * client and a Stargate-like server with no ALPN (as the real ones), streams either side
 * opens, 64 MiB byte-exact each way, FIN / RESET_STREAM / STOP_SENDING codes, datagrams,
 * close codes and reasons, and the TLS refusals (ALPN offered to a no-ALPN server, unknown
 * CA, missing client certificate).
 */
import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { createSocket } from 'node:dgram'
import { access, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createCa, createLeaf } from '../fixtures/certs.ts'
import { QuinnPeer, patternSha256, quinnPeerSkip, type AcceptMode, type ClientOptions, type QuinnVersion } from '../fixtures/quinn-peer.ts'

const MIB = 1 << 20
const SNI = 'stargate-0.stargate.external'
const GTLS_CLIENT = '/usr/bin/gtlsclient'
const GTLS_SERVER = '/usr/sbin/gtlsserver'
/** TLS alert 120 (no_application_protocol) as a QUIC CRYPTO_ERROR (RFC 9001 §4.8). */
const NO_APPLICATION_PROTOCOL = 0x100 + 120
/** TLS alert 116 (certificate_required). */
const CERTIFICATE_REQUIRED = 0x100 + 116

const skip = await quinnPeerSkip(t)
const skip09 = await quinnPeerSkip(t, '0.9')

const dir = await mkdtemp(join(tmpdir(), 'sg-quinn-peer-'))
t.teardown(() => rm(dir, { recursive: true, force: true }))
const ca = await createCa({ name: 'quinn peer test ca' })
const otherCa = await createCa({ name: 'some other ca' })
const serverLeaf = await createLeaf(ca, { dnsNames: ['*.stargate.external', 'localhost'] })
const clientLeaf = await createLeaf(ca, { dnsNames: ['pylon-0'], clientAuth: true })
const files = {
  ca: join(dir, 'ca.crt'),
  otherCa: join(dir, 'other-ca.crt'),
  cert: join(dir, 'tls.crt'),
  key: join(dir, 'tls.key'),
  clientCert: join(dir, 'client.crt'),
  clientKey: join(dir, 'client.key'),
}
await writeFile(files.ca, ca.certPem)
await writeFile(files.otherCa, otherCa.certPem)
await writeFile(files.cert, serverLeaf.chainPem)
await writeFile(files.key, serverLeaf.keyPem)
await writeFile(files.clientCert, clientLeaf.chainPem)
await writeFile(files.clientKey, clientLeaf.keyPem)

let nextIp = 10
/** A Stargate-like server on its own loopback IP and a Pylon-like client dialling it. */
async function pair (t: Test, client: Partial<ClientOptions> = {}, server: { accept?: AcceptMode, clientCaPath?: string, quinn?: QuinnVersion } = {}): Promise<{ server: QuinnPeer, pylon: QuinnPeer }> {
  const stargate = await QuinnPeer.server(t, { listen: `127.0.71.${nextIp++}:0`, certPath: files.cert, keyPath: files.key, ...server })
  const pylon = await QuinnPeer.client(t, { connect: stargate.addr, sni: SNI, caPath: files.ca, ...client })
  return { server: stargate, pylon }
}

t.test('a Pylon-like client and a Stargate-like server connect with no ALPN, the server seeing the SNI', { skip }, async (t) => {
  const { server, pylon } = await pair(t)
  t.match(server.events.find((e) => e.ev === 'listening'), { quinn: '0.11', rustls: '0.23' }, 'by default the peer runs quinn 0.11 + rustls 0.23, as upstream')
  const client = await pylon.established()
  t.equal(client.quinn, '0.11')
  t.equal(client.alpn, null, 'the client negotiated no ALPN')
  t.equal(client.peer_cert, true, 'the server presented its certificate')
  t.ok(client.max_datagram_size !== null && client.max_datagram_size > 1000, `datagrams offered (max ${client.max_datagram_size})`)
  const accepted = await server.waitEvent('connected')
  t.equal(accepted.alpn, null, 'the server negotiated no ALPN')
  t.equal(accepted.sni, SNI, 'the server saw the SNI')
  t.equal(accepted.peer_cert, false, 'no client certificate, as the real Pylon')
  t.same(await server.waitEvent('client_hello'), { ev: 'client_hello', sni: SNI, alpn: null }, 'the ClientHello carried the SNI and no ALPN extension')
})

t.test('64 MiB cross byte-exact each way, on a stream the Pylon opens and one the Stargate opens', { skip }, async (t) => {
  const { server, pylon } = await pair(t)
  await pylon.established()
  const { conn } = await server.waitEvent('connected')
  const size = 64 * MIB
  const up = await pylon.open(1)
  const down = await server.open(conn)
  await Promise.all([
    pylon.write(1, up, { bytes: size, seed: 1 }).then(() => pylon.finish(1, up)),
    server.write(conn, down, { bytes: size, seed: 2 }).then(() => server.finish(conn, down)),
  ])
  const [atServer, atPylon] = await Promise.all([server.recvDone(conn, up), pylon.recvDone(1, down)])
  t.match(atServer, { bytes: size, fin: true, reset: null, error: null }, 'the server read 64 MiB to FIN')
  t.match(atPylon, { bytes: size, fin: true, reset: null, error: null }, 'the client read 64 MiB to FIN')
  t.equal(atServer.sha256, patternSha256(1, size), 'the upload arrived byte-exact')
  t.equal(atPylon.sha256, patternSha256(2, size), 'the download arrived byte-exact')
  t.match(await pylon.sendDone(1, up), { outcome: 'finished', bytes: size, sha256: atServer.sha256 }, 'the sender reports what the receiver read')
  t.match(await server.waitEvent('stream', { conn, stream: up }), { dir: 'bi' }, 'the server saw the Pylon-opened stream as bidi')
})

t.test('the Stargate opens bidi streams that the Pylon answers, as on a reverse tunnel', { skip }, async (t) => {
  const { server, pylon } = await pair(t, { accept: 'echo' })
  await pylon.established()
  const { conn } = await server.waitEvent('connected')
  const requests = ['GET /v1/models', 'POST /v1/chat/completions', 'x'.repeat(5000)]
  const streams = await Promise.all(requests.map(() => server.open(conn)))
  await Promise.all(streams.map(async (s, i) => {
    await server.write(conn, s, requests[i] ?? '')
    await server.finish(conn, s)
  }))
  for (const [i, s] of streams.entries()) {
    const answer = await server.recvDone(conn, s)
    const sent = Buffer.from(requests[i] ?? '')
    t.match(answer, { bytes: sent.length, fin: true, sha256: createHash('sha256').update(sent).digest('hex') }, `stream ${s} came back whole`)
  }
  t.equal((await pylon.waitEvents('stream', { dir: 'bi' }, 3)).length, 3, 'the Pylon accepted three server-opened streams')
})

t.test('RESET_STREAM and STOP_SENDING codes, and a uni stream FIN, reach the other side', { skip }, async (t) => {
  const { server, pylon } = await pair(t)
  await pylon.established()
  const { conn } = await server.waitEvent('connected')

  const reset = await pylon.open(1)
  await pylon.write(1, reset, { bytes: 1000, seed: 3 })
  await server.waitEvent('stream', { conn, stream: reset })
  await pylon.reset(1, reset, 0x1234)
  t.match(await server.recvDone(conn, reset), { fin: false, reset: 0x1234 }, 'the server saw reset code 0x1234')
  t.match(await pylon.sendDone(1, reset), { outcome: 'reset', code: 0x1234 }, 'the client reports its reset')

  const stopped = await pylon.open(1)
  await pylon.write(1, stopped, 'hello')
  await server.waitEvent('stream', { conn, stream: stopped })
  await server.stop(conn, stopped, 77)
  t.match(await pylon.waitEvent('stopped', { conn: 1, stream: stopped }), { code: 77 }, 'the client saw STOP_SENDING 77')
  t.match(await pylon.sendDone(1, stopped), { outcome: 'stopped', code: 77 }, 'its send side ended stopped')
  t.match(await server.recvDone(conn, stopped), { stopped: 77, fin: false }, 'the server reports the code it sent')

  const uni = await pylon.open(1, 'uni')
  await pylon.write(1, uni, 'one way')
  await pylon.finish(1, uni)
  t.match(await server.waitEvent('stream', { conn, stream: uni }), { dir: 'uni' }, 'the server saw a uni stream')
  t.match(await server.recvDone(conn, uni), { bytes: 7, fin: true }, 'and read it to FIN')
})

t.test('a stream accepted in hold mode is read only once asked, so the sender stays flow-controlled', { skip }, async (t) => {
  const { server, pylon } = await pair(t, {}, { accept: 'hold' })
  await pylon.established()
  const { conn } = await server.waitEvent('connected')
  const s = await pylon.open(1)
  // 3 MiB is above quinn's 1.25 MB stream window: quinn takes the last bytes (and the write
  // completes) only once the server reads.
  const written = pylon.write(1, s, { bytes: 3 * MIB, seed: 5 })
  await server.waitEvent('stream', { conn, stream: s })
  t.notOk(server.events.some((e) => e.ev === 'recv_done'), 'nothing read while held')
  await server.read(conn, s)
  t.equal(await written, 3 * MIB, 'the write completed once the server read')
  await pylon.finish(1, s)
  t.match(await server.recvDone(conn, s), { bytes: 3 * MIB, fin: true, sha256: patternSha256(5, 3 * MIB) }, 'read whole once released')
})

t.test('an idle connection ends with kind timeout after the idle timeout', { skip }, async (t) => {
  const stargate = await QuinnPeer.server(t, { listen: `127.0.71.${nextIp++}:0`, certPath: files.cert, keyPath: files.key, idleTimeoutMs: 300 })
  const pylon = await QuinnPeer.client(t, { connect: stargate.addr, sni: SNI, caPath: files.ca, idleTimeoutMs: 300 })
  await pylon.established()
  t.match(await pylon.closed(1), { kind: 'timeout', code: null }, 'the client timed out')
  t.match(await stargate.closed(1), { kind: 'timeout' }, 'so did the server')
})

t.test('datagrams cross both ways; one above max_datagram_size is refused locally', { skip }, async (t) => {
  const { server, pylon } = await pair(t)
  await pylon.established()
  const { conn } = await server.waitEvent('connected')
  await pylon.datagram(1, Buffer.from('ping from the pylon'))
  t.equal(Buffer.from((await server.waitEvent('datagram', { conn })).hex, 'hex').toString(), 'ping from the pylon', 'the server received the datagram')
  await server.datagram(conn, { bytes: 1000, seed: 9 })
  t.equal((await pylon.waitEvent('datagram', { conn: 1 })).len, 1000, 'the client received a 1000-byte datagram')
  // The limit grows with path-MTU discovery: read it once discovery is done.
  const { max_datagram_size: max } = await pylon.mtuDiscovered(1)
  await t.rejects(pylon.datagram(1, { bytes: (max ?? 0) + 1 }), /too large/, 'a datagram over the limit is refused')
  await pylon.datagram(1, { bytes: max ?? 0, seed: 10 })
  t.equal((await server.waitEvent('datagram', { conn, len: max ?? 0 })).len, max, 'one of exactly the limit arrives')
})

t.test('path-MTU discovery: quinn 0.11 peers go from 1200-byte packets to 1452; quinn 0.9 stays at 1200', { skip: skip || skip09 }, async (t) => {
  const { server, pylon } = await pair(t)
  await pylon.established()
  const { conn } = await server.waitEvent('connected')
  const client = await pylon.mtuDiscovered(1)
  t.match(client, { current_mtu: 1452, mtu_probes_lost: 0, black_holes: 0 }, 'the client settled on 1452 (quinn 0.11\'s upper bound) with no probe lost')
  t.ok((client.mtu_probes_sent ?? 0) > 0, `it probed (${client.mtu_probes_sent} probes)`)
  t.match(await server.mtuDiscovered(conn), { current_mtu: 1452 }, 'so did the server')
  const up = await pylon.open(1)
  await pylon.write(1, up, { bytes: 4 * MIB, seed: 11 })
  await pylon.finish(1, up)
  t.equal((await server.recvDone(conn, up)).sha256, patternSha256(11, 4 * MIB), '4 MiB crossed in 1452-byte packets')

  const old = await pair(t, { quinn: '0.9' }, { quinn: '0.9' })
  const connected = await old.pylon.established()
  t.equal(connected.quinn, '0.9', 'the 0.9 peer says so')
  const stats = await old.pylon.stats(1)
  t.match(stats, { current_mtu: null, mtu_probes_sent: null }, 'quinn 0.9 reports no path-MTU discovery')
  t.ok(stats.max_datagram_size !== null && stats.max_datagram_size < 1200, `its datagrams stay under 1200 bytes (${stats.max_datagram_size})`)
})

t.test('a close code and reason reach the peer, from either side', { skip }, async (t) => {
  const { server, pylon } = await pair(t)
  await pylon.established()
  await pylon.close(1, 42, 'pylon going away')
  t.match(await server.closed(1), { kind: 'application', by: 'peer', code: 42, reason: 'pylon going away' }, 'the server saw the client close')
  t.match(await pylon.closed(1), { by: 'local', code: 42 }, 'the client reports its own close')

  const second = await pylon.connect()
  await pylon.established(second)
  const { conn } = await server.waitEvent('connected', { conn: 2 })
  await server.close(conn, 7, 'stargate draining')
  t.match(await pylon.closed(second), { kind: 'application', by: 'peer', code: 7, reason: 'stargate draining' }, 'the client saw the server close')
})

t.test('a client offering an ALPN is refused by the no-ALPN server inside the handshake (alert 120)', { skip }, async (t) => {
  const { server, pylon } = await pair(t, { alpn: ['h3'] })
  await t.rejects(pylon.established(), /refused/, 'the handshake fails')
  t.match(await pylon.closed(1), { established: false, kind: 'transport', by: 'peer', code: NO_APPLICATION_PROTOCOL }, 'the client got no_application_protocol')
  t.same((await server.waitEvent('client_hello')).alpn, ['h3'], 'the server saw h3 offered')
  // quinn 0.11 hands the server each incoming connection before its handshake, so the refusal
  // is visible there too (quinn 0.9 dropped it without a word).
  t.match(await server.closed(1), { established: false, kind: 'transport', by: 'local', code: NO_APPLICATION_PROTOCOL }, 'the server reports the handshake it refused')
  t.notOk(server.events.some((e) => e.ev === 'connected'), 'the server established nothing')
})

t.test('a client that does not trust the server certificate refuses the connection', { skip }, async (t) => {
  const { pylon } = await pair(t, { caPath: files.otherCa })
  t.match(await pylon.closed(1), { established: false, kind: 'transport', by: 'local', error: /certificate/i }, 'the client refused the certificate')
})

t.test('a server requiring client certificates refuses a client without one and accepts one with', { skip }, async (t) => {
  const { server, pylon } = await pair(t, {}, { clientCaPath: files.ca })
  // TLS 1.3: the client is done after its Finished; the refusal arrives as a close after it.
  t.match(await pylon.closed(1), { kind: 'transport', by: 'peer', code: CERTIFICATE_REQUIRED }, 'no client certificate: closed with certificate_required')
  t.match(await server.closed(1), { established: false, code: CERTIFICATE_REQUIRED }, 'the server refused the handshake')
  const withCert = await QuinnPeer.client(t, { connect: server.addr, sni: SNI, caPath: files.ca, certPath: files.clientCert, keyPath: files.clientKey })
  await withCert.established()
  t.match(await server.waitEvent('connected'), { peer_cert: true }, 'the server saw the client certificate')
})

async function present (path: string): Promise<boolean> {
  return access(path).then(() => true, () => false)
}

async function freeUdpPort (host: string): Promise<number> {
  const socket = createSocket('udp4')
  await new Promise<void>((resolve) => { socket.bind(0, host, resolve) })
  const port = socket.address().port
  await new Promise<void>((resolve) => { socket.close(() => { resolve() }) })
  return port
}

/** Resolves once some process has bound ip:port (our own bind attempt fails with EADDRINUSE). */
async function waitUdpBound (ip: string, port: number): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const socket = createSocket('udp4')
    const bound = await new Promise<boolean>((resolve) => {
      socket.once('error', () => { resolve(true) })
      socket.bind(port, ip, () => { resolve(false) })
    })
    await new Promise<void>((resolve) => { socket.close(() => { resolve() }) })
    if (bound) return
    await new Promise((resolve) => { setTimeout(resolve, 20) })
  }
  throw new Error(`nothing bound ${ip}:${port} within 10 s`)
}

function run (t: Test, command: string, args: readonly string[]): { output: () => string, exited: Promise<number | null> } {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  const keep = (chunk: Buffer): void => { output = (output + chunk.toString()).slice(-4000) }
  child.stdout.on('data', keep)
  child.stderr.on('data', keep)
  const exited = new Promise<number | null>((resolve) => { child.on('close', resolve) })
  t.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
  return { output: () => output, exited }
}

const ngtcp2 = skip !== false
  ? skip
  : !await present(GTLS_CLIENT) || !await present(GTLS_SERVER)
    ? `ngtcp2 examples not installed (${GTLS_CLIENT}, ${GTLS_SERVER}): apt-get install ngtcp2-client ngtcp2-server`
    : false

t.test('a quinn client offering h3 completes a handshake with ngtcp2 gtlsserver', { skip: ngtcp2 }, async (t) => {
  const ip = '127.0.71.200'
  const port = await freeUdpPort(ip)
  run(t, GTLS_SERVER, ['--quiet', ip, String(port), files.key, files.cert])
  // gtlsserver prints no "listening" line: wait for its socket (else the first Initial is lost).
  await waitUdpBound(ip, port)
  const pylon = await QuinnPeer.client(t, { connect: `${ip}:${port}`, sni: 'localhost', caPath: files.ca, alpn: ['h3'] })
  const connected = await pylon.established()
  t.equal(connected.alpn, 'h3', 'ALPN h3 negotiated with ngtcp2')
  t.equal(connected.peer_cert, true, 'gtlsserver presented the certificate the client verified')
  await pylon.close(1, 0x100, 'done')
})

t.test('ngtcp2 gtlsclient reaches a quinn server offering h3: SNI, ALPN and its streams seen', { skip: ngtcp2 }, async (t) => {
  const server = await QuinnPeer.server(t, { listen: '127.0.0.1:0', certPath: files.cert, keyPath: files.key, alpn: ['h3'] })
  const client = run(t, GTLS_CLIENT, ['--quiet', '--timeout', '10s', 'localhost', String(server.port), `https://localhost:${server.port}/`])
  const connected = await server.waitEvent('connected')
  t.match(connected, { alpn: 'h3', sni: 'localhost' }, 'the server negotiated h3 and saw the SNI')
  t.same((await server.waitEvent('client_hello')).alpn, ['h3'], 'gtlsclient offered h3 alone')
  t.ok((await server.waitEvent('stream', { conn: connected.conn, dir: 'uni' })) !== undefined, 'gtlsclient opened its HTTP/3 control stream')
  const request = await server.waitEvent('stream', { conn: connected.conn, dir: 'bi' })
  t.match(await server.recvDone(connected.conn, request.stream), { fin: true }, 'and sent a request on a bidi stream to FIN')
  await server.close(connected.conn, 0x100, 'no response')
  t.ok(await client.exited !== undefined, `gtlsclient ended once the server closed (${client.output().slice(-200)})`)
})
