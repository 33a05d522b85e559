/**
 * closeWhenFlushed (lib/quic/native/src/conn.c), engine to engine over loopback: the connection
 * keeps sending until every stream's bytes and FIN have been acknowledged and its resets are
 * done, then sends the CONNECTION_CLOSE it was given; at the deadline it sends it anyway, and an
 * endpoint that closes sends it at once. Failure modes this guards against: a close that cuts
 * off bytes or a FIN the peer was still owed (the relay's data loss when one leg's peer closes),
 * a FIN sent on its own after the data that the close overtakes, a wait with no bound, and a
 * connection destroyed silently at shutdown while it waited.
 */
import t from 'tap'
import { closed, dial, engineTls, established, listen, readToEnd, sha256, type Teardown } from '../fixtures/quic-engine.ts'
import { waitFor } from '../fixtures/wait.ts'
import type { QuicConnection } from '../../lib/quic/connection.ts'
import type { QuicEndpoint } from '../../lib/quic/endpoint.ts'
import type { QuicStream } from '../../lib/quic/stream.ts'
import type { TransportOptions } from '../../lib/quic/engine.ts'

/** The client's windows are small, so a server writing more than them holds the rest. */
const SMALL_WINDOWS: TransportOptions = { maxStreamWindow: 64 * 1024, initialMaxData: 64 * 1024, maxWindow: 64 * 1024 }

async function pair (t: Teardown, host: string, clientTransport?: TransportOptions): Promise<{ client: QuicConnection, server: QuicConnection, endpoint: QuicEndpoint }> {
  const tls = await engineTls(t)
  const listening = listen(t, host, tls.serverCredentials)
  const client = dial(t, host, listening.endpoint.port, { credentials: tls.clientCredentials, ...(clientTransport === undefined ? {} : { transport: clientTransport }) })
  await established(client)
  const server = await waitFor(() => listening.connections[0])
  await established(server)
  return { client, server, endpoint: listening.endpoint }
}

function nextStream (conn: QuicConnection): Promise<QuicStream> {
  return new Promise((resolve) => { conn.once('stream', resolve) })
}

t.test('bytes the peer has not taken yet, and their FIN, arrive before the close', async (t) => {
  const { client, server } = await pair(t, '127.0.164.1', SMALL_WINDOWS)
  const arrived = nextStream(client)
  const stream = server.openStream(true)
  if (stream === null) throw new Error('no stream')
  const data = Buffer.alloc(200 * 1024, 7)
  t.ok(stream.end(data), 'the addon takes it all, with the FIN')
  // The client reads nothing yet: its 64 KiB window holds the rest back on the server.
  server.closeWhenFlushed(0x2a, 'done', true, 10_000)
  const atClient = await arrived
  await new Promise((resolve) => { setTimeout(resolve, 200) })
  t.equal(client.closed, false, 'no close while the peer is still owed bytes')
  const order: string[] = []
  const whole = readToEnd(atClient).then((end) => { order.push('fin'); return end })
  const info = closed(client).then((i) => { order.push('close'); return i })
  const end = await whole
  t.equal(end.end, 'fin', 'the FIN arrived')
  t.equal(sha256(end.data), sha256(data), 'after every byte')
  t.match(await info, { kind: 'peer', app: true, code: 0x2a, reasonText: 'done' }, 'then the close with its code and reason')
  t.same(order, ['fin', 'close'])
  t.match(server.closeInfo, { kind: 'local', code: 0x2a }, 'the closing side reports its own close when it goes out')
})

t.test('a FIN sent on its own after every byte was acknowledged is not overtaken by the close', async (t) => {
  const { client, server } = await pair(t, '127.0.164.2')
  const arrived = nextStream(client)
  const stream = server.openStream(true)
  if (stream === null) throw new Error('no stream')
  t.ok(stream.write(Buffer.from('the whole answer')) > 0)
  const atClient = await arrived
  const chunks: Buffer[] = []
  await waitFor(() => {
    for (let chunk = atClient.read(); chunk !== null; chunk = atClient.read()) chunks.push(chunk)
    return Buffer.concat(chunks).length === 16 && server.stats()?.bytesInFlight === 0 ? true : undefined
  })
  // Every byte is acknowledged; the FIN goes in a frame of its own, in the same turn as the close.
  t.ok(stream.end())
  server.closeWhenFlushed(0x2b, 'answered', true, 10_000)
  const end = await readToEnd(atClient)
  t.equal(end.end, 'fin', 'the lone FIN arrived before the close')
  t.match(await closed(client), { kind: 'peer', code: 0x2b, reasonText: 'answered' })
})

t.test('a stream being reset and stopped has its RESET_STREAM delivered before the close', async (t) => {
  const { client, server } = await pair(t, '127.0.164.3')
  const arrived = nextStream(client)
  const stream = server.openStream(true)
  if (stream === null) throw new Error('no stream')
  t.ok(stream.write(Buffer.from('partial')) > 0)
  const atClient = await arrived
  stream.reset(7)
  stream.stopSending(7)
  server.closeWhenFlushed(0x2c, 'reset', true, 10_000)
  t.same((await readToEnd(atClient)).end, { reset: 7 }, 'the client reads the reset with its code')
  t.match(await closed(client), { kind: 'peer', code: 0x2c, reasonText: 'reset' }, 'then the close')
})

t.test('a peer that never reads gets the close at the deadline', async (t) => {
  const { client, server } = await pair(t, '127.0.164.4', SMALL_WINDOWS)
  const stream = server.openStream(true)
  if (stream === null) throw new Error('no stream')
  t.ok(stream.end(Buffer.alloc(200 * 1024, 1)))
  const started = Date.now()
  server.closeWhenFlushed(0x2d, 'gave up', true, 300)
  t.match(await closed(client), { kind: 'peer', code: 0x2d, reasonText: 'gave up' }, 'the close, with its code and reason')
  const waited = Date.now() - started
  t.ok(waited >= 250, `not before the deadline (${waited} ms)`)
})

t.test('nothing to deliver: the close goes out at once', async (t) => {
  const { client, server } = await pair(t, '127.0.164.5')
  server.closeWhenFlushed(0x2e, 'idle', false, 10_000)
  t.match(await closed(client), { kind: 'peer', app: false, code: 0x2e, reasonText: 'idle' }, 'a transport close is carried as such')
})

t.test('an endpoint closing while a connection waits sends its close at once', async (t) => {
  const { client, server, endpoint } = await pair(t, '127.0.164.6', SMALL_WINDOWS)
  const stream = server.openStream(true)
  if (stream === null) throw new Error('no stream')
  t.ok(stream.end(Buffer.alloc(200 * 1024, 2)))
  server.closeWhenFlushed(0x2f, 'router shutdown', true, 10_000)
  await new Promise((resolve) => { setTimeout(resolve, 100) })
  endpoint.close()
  t.match(await closed(client), { kind: 'peer', code: 0x2f, reasonText: 'router shutdown' }, 'the peer reads the close, not an idle timeout')
  t.match(server.closeInfo, { kind: 'local', code: 0x2f })
})
