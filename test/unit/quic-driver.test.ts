// Issue 5: the QUIC driver (lib/quic) between two of its own endpoints on loopback: streams
// with FIN and backpressure, datagrams, close codes and reasons, stateless Retry, Version
// Negotiation, idle timeout and keep-alive.
import t from 'tap'
import { createHash, randomBytes } from 'node:crypto'
import { QuicDriver } from '../../lib/quic/quiche/driver.ts'
import { QuicServer } from '../../lib/quic/quiche/server.ts'
import { connectQuic } from '../../lib/quic/quiche/client.ts'
import { buildClientConfig, buildServerConfig } from '../../lib/quic/quiche/config.ts'
import type { QuicCloseInfo, QuicConnection } from '../../lib/quic/quiche/connection.ts'
import { createQuicTls, type Teardown } from '../fixtures/quic-tls.ts'
import { hashStream, readAll } from '../fixtures/quic-stargate.ts'
import { rawSocket, sendRaw, firstInitial } from '../fixtures/quic-raw.ts'
import { waitFor } from '../fixtures/wait.ts'

interface Pair { server: QuicServer, accepted: QuicConnection[], client: QuicConnection, driver: QuicDriver }

async function pair (t: Teardown, options: { retry?: boolean, idleTimeoutMs?: number, keepAliveMs?: number, serverReads?: boolean } = {}): Promise<Pair> {
  const tls = await createQuicTls(t, ['pod.example'])
  const driver = new QuicDriver({ tickMs: 50 })
  const accepted: QuicConnection[] = []
  const idleTimeoutMs = options.idleTimeoutMs ?? 30_000
  const server = await QuicServer.listen({
    host: '127.0.0.1',
    port: 0,
    driver,
    maxConnections: 10,
    retry: options.retry === true,
    configFor: (hello) => buildServerConfig({ idleTimeoutMs, certPem: tls.stargate.chainPem, keyPem: tls.stargate.keyPem, alpn: hello?.alpn ?? ['x'] }),
    onConnection: (conn) => {
      accepted.push(conn)
      conn.on('stream', (s) => {
        s.on('error', () => {})
        if (options.serverReads !== false) s.pipe(s)
      })
      conn.on('datagram', (d) => { conn.sendDatagram(Buffer.concat([Buffer.from('echo:'), d])) })
    },
  })
  t.teardown(async () => { await server.close(); driver.destroyAll() })
  const client = await connectQuic({
    driver,
    address: '127.0.0.1',
    port: server.address().port,
    serverName: 'pod.example',
    config: buildClientConfig({ idleTimeoutMs, caPem: tls.ca.certPem, verifyPeer: true, alpn: ['x'] }),
    keepAliveMs: options.keepAliveMs ?? 0,
  })
  await new Promise<void>((resolve, reject) => {
    client.once('established', resolve)
    client.once('close', (info) => { reject(new Error(`closed: ${info.reason}`)) })
  })
  return { server, accepted, client, driver }
}

t.test('a stream carries 16 MiB each way with its FIN, verified by hash', async (t) => {
  const { client } = await pair(t)
  const payload = randomBytes(16 * 1024 * 1024)
  const stream = client.openStream()
  if (stream === null) throw new Error('no stream')
  stream.on('error', () => {})
  const echoed = hashStream(stream)
  stream.end(payload)
  t.same(await echoed, { sha256: createHash('sha256').update(payload).digest('hex'), bytes: payload.length })
})

t.test('a reader that does not read holds the writer back (no unbounded buffering)', async (t) => {
  const { client } = await pair(t, { serverReads: false })
  const stream = client.openStream()
  if (stream === null) throw new Error('no stream')
  stream.on('error', () => {})
  const chunk = Buffer.alloc(64 * 1024)
  let offered = 0
  const offer = (): void => {
    while (stream.write(chunk)) offered += chunk.length
    offered += chunk.length
    stream.once('drain', offer)
  }
  offer()
  await new Promise((resolve) => { setTimeout(resolve, 500) })
  t.ok(stream.writableNeedDrain, 'the writer is told to wait')
  t.ok(offered < 8 * 1024 * 1024, `only ${(offered / 2 ** 20).toFixed(1)} MiB left the writer: the peer's flow-control window plus the stream's highWaterMark`)
})

t.test('datagrams go both ways', async (t) => {
  const { client } = await pair(t)
  t.ok(client.datagrams, 'negotiated')
  const got = new Promise<Buffer>((resolve) => { client.once('datagram', resolve) })
  // Datagrams are unreliable (RFC 9221): resend until one comes back.
  t.ok(client.sendDatagram(Buffer.from('hello')), 'queued')
  const resend = setInterval(() => { client.sendDatagram(Buffer.from('hello')) }, 100)
  t.teardown(() => { clearInterval(resend) })
  t.equal((await got).toString(), 'echo:hello')
  clearInterval(resend)
})

t.test('a connection close carries its code and reason to the peer', async (t) => {
  const { client, accepted } = await pair(t)
  const conn = await waitFor(() => accepted[0])
  const closed = new Promise<QuicCloseInfo>((resolve) => { conn.once('close', resolve) })
  client.close(0x2a, 'going away')
  t.match(await closed, { initiator: 'peer', app: true, code: 0x2a, reason: 'going away' })
  t.match(client.closeInfo, { initiator: 'local', code: 0x2a })
})

t.test('with Retry on, a client proves its address first and then connects', async (t) => {
  const { server, client } = await pair(t, { retry: true })
  const stream = client.openStream()
  if (stream === null) throw new Error('no stream')
  stream.on('error', () => {})
  stream.end('after retry')
  t.equal((await readAll(stream)).toString(), 'after retry')
  t.equal(server.stats().retries, 1, 'one Retry sent')
})

t.test('an Initial for an unknown version is answered with Version Negotiation', async (t) => {
  const { server } = await pair(t)
  const socket = await rawSocket(t)
  const initial = firstInitial('pod.example')
  initial.writeUInt32BE(0x5a5a5a5a, 1)
  const reply = new Promise<Buffer>((resolve) => { socket.once('message', resolve) })
  await sendRaw(socket, server.address().port, initial)
  const vn = await reply
  t.equal(vn.readUInt32BE(1), 0, 'version 0 marks Version Negotiation')
  t.equal(server.stats().versionNegotiations, 1)
})

t.test('an idle connection times out; keep-alive keeps one open past the idle timeout', async (t) => {
  const idle = await pair(t, { idleTimeoutMs: 400 })
  const closed = await waitFor(() => idle.client.closeInfo, { timeoutMs: 5000 })
  t.equal(closed.initiator, 'idle')
  const kept = await pair(t, { idleTimeoutMs: 400, keepAliveMs: 100 })
  await new Promise((resolve) => { setTimeout(resolve, 1200) })
  t.equal(kept.client.closeInfo, null, 'still open after 3 idle timeouts')
})
