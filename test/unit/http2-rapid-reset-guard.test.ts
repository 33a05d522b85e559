// The rapid-reset guard (SPEC §12, lib/http2-admission.ts) on a real HTTP/2 server, fed
// exact frames from a raw socket. Streams closed because their connection ended
// (the client's FIN or RST, a connection error) were counted as client resets; at 200 the
// guard tripped and its GOAWAY went to the destroyed session, which threw from a stream
// 'close' handler and ended the process. A connection that ends is no attack; 200 streams the
// client opens and resets itself still are, whatever the RST_STREAM code: a client that
// resets with NO_ERROR slipped past a guard that only counted other codes (the stream looked
// completed). A stream whose response was complete before the client's RST_STREAM NO_ERROR
// (RFC 9113 §8.1) is not a reset.
import t, { type Test } from 'tap'
import http2, { type ServerHttp2Session } from 'node:http2'
import type { AddressInfo } from 'node:net'
import { RapidResetGuard } from '../../lib/http2-admission.ts'
import { FRAME, RawH2Client, frame, type Fields } from '../fixtures/raw-h2.ts'
import { waitFor } from '../fixtures/wait.ts'

const REQUEST: Fields = [[':method', 'POST'], [':scheme', 'http'], [':path', '/watch'], [':authority', 'router.example']]
const CANCEL = 8

interface Server {
  readonly port: number
  readonly trips: number[]
  readonly closedSessions: () => number
}

async function startServer (t: Test, answer: 'open' | 'complete' = 'open'): Promise<Server> {
  const trips: number[] = []
  let closed = 0
  const guard = new RapidResetGuard({ windowMs: 10_000, minResets: 200, ratio: 0.5, earlyMs: 1000, onTrip: (_session, resets) => { trips.push(resets) } })
  const server = http2.createServer({ settings: { maxConcurrentStreams: 1000 } })
  server.on('session', (session: ServerHttp2Session) => {
    session.on('error', () => {})
    session.on('close', () => { closed++ })
    // Streams stay open (answered, never ended), as WatchStargates streams do.
    session.on('stream', (stream) => {
      stream.on('error', () => {})
      guard.onStream(session, stream)
      if (stream.destroyed) return
      if (answer === 'open') stream.respond({ ':status': 200 })
      else { stream.respond({ ':status': 200 }); stream.end('done') }
    })
  })
  await new Promise<void>((resolve) => { server.listen(0, '127.0.0.1', resolve) })
  t.teardown(() => { server.close() })
  return { port: (server.address() as AddressInfo).port, trips, closedSessions: () => closed }
}

async function openStreams (client: RawH2Client, count: number): Promise<void> {
  for (let i = 0; i < count; i++) client.headers(1 + 2 * i, REQUEST, false)
  // The answer to the last one: every stream is open on the server.
  await client.waitFrame((f) => f.type === FRAME.HEADERS && f.streamId === 2 * count - 1)
}

/** Lets stream 'close' events (emitted on later ticks) run. */
function settle (): Promise<void> {
  return new Promise((resolve) => { setTimeout(resolve, 50) })
}

for (const [name, end] of [
  ['a FIN', (client: RawH2Client) => { client.socket.end() }],
  ['a RST', (client: RawH2Client) => { client.socket.resetAndDestroy() }],
  ['a PING on stream 1 (connection error)', (client: RawH2Client) => { client.write(frame(FRAME.PING, 0, 1, Buffer.alloc(8))) }],
] as const) {
  t.test(`a connection that ends with 300 open streams by ${name} is not taken for rapid resets`, async (t) => {
    const server = await startServer(t)
    const client = await RawH2Client.connect(server.port)
    t.teardown(() => { client.close() })
    await openStreams(client, 300)
    end(client)
    await waitFor(() => server.closedSessions() === 1, { message: 'the session closed' })
    await settle()
    t.same(server.trips, [], 'the guard did not trip (and threw nothing from the stream close handlers)')
  })
}

t.test('300 streams the client resets right after opening them get GOAWAY ENHANCE_YOUR_CALM', async (t) => {
  const server = await startServer(t)
  const client = await RawH2Client.connect(server.port)
  t.teardown(() => { client.close() })
  await openStreams(client, 300)
  const code = Buffer.alloc(4)
  code.writeUInt32BE(CANCEL)
  client.write(Buffer.concat(Array.from({ length: 300 }, (_, i) => frame(FRAME.RST_STREAM, 0, 1 + 2 * i, code))))
  const goaway = await client.waitFrame((f) => f.type === FRAME.GOAWAY)
  t.equal(goaway?.payload.readUInt32BE(4), http2.constants.NGHTTP2_ENHANCE_YOUR_CALM, 'GOAWAY ENHANCE_YOUR_CALM')
  t.same(server.trips, [200], 'tripped once, at the 200th reset')
  await waitFor(() => server.closedSessions() === 1, { message: 'the session was cut after its GOAWAY' })
})

t.test('300 streams the client resets right after opening them with RST_STREAM NO_ERROR get GOAWAY ENHANCE_YOUR_CALM', async (t) => {
  const server = await startServer(t)
  const client = await RawH2Client.connect(server.port)
  t.teardown(() => { client.close() })
  await openStreams(client, 300)
  client.write(Buffer.concat(Array.from({ length: 300 }, (_, i) => frame(FRAME.RST_STREAM, 0, 1 + 2 * i, Buffer.alloc(4)))))
  const goaway = await client.waitFrame((f) => f.type === FRAME.GOAWAY)
  t.equal(goaway?.payload.readUInt32BE(4), http2.constants.NGHTTP2_ENHANCE_YOUR_CALM, 'GOAWAY ENHANCE_YOUR_CALM')
  t.same(server.trips, [200], 'tripped once, at the 200th reset')
})

t.test('300 streams reset with NO_ERROR after their whole response arrived are not rapid resets', async (t) => {
  const server = await startServer(t, 'complete')
  const client = await RawH2Client.connect(server.port)
  t.teardown(() => { client.close() })
  // Requests without END_STREAM: the client stops its side with RST_STREAM NO_ERROR once the
  // response is complete, which RFC 9113 §8.1 allows.
  for (let i = 0; i < 300; i++) client.headers(1 + 2 * i, REQUEST, false)
  await client.waitFrame((f) => f.type === FRAME.DATA && f.streamId === 599 && (f.flags & 0x1) !== 0)
  client.write(Buffer.concat(Array.from({ length: 300 }, (_, i) => frame(FRAME.RST_STREAM, 0, 1 + 2 * i, Buffer.alloc(4)))))
  client.write(frame(FRAME.PING, 0, 0, Buffer.from('synced!!')))
  t.not(await client.waitFrame((f) => f.type === FRAME.PING && (f.flags & 0x1) !== 0, 5000), null, 'the connection still answers')
  await settle()
  t.same(server.trips, [], 'the guard did not trip')
  t.equal(client.closed, false, 'and the connection stays open')
})
