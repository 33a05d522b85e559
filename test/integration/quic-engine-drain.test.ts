/**
 * The engine's drain (lib/quic/native/src/drain.c, SPEC §11), engine to engine over loopback:
 * a draining connection refuses every stream its peer opens from then on with STOP_SENDING and
 * RESET_STREAM carrying the code it was given, never shows them to TypeScript, lets the streams
 * opened before run to completion, reports 'drained' when the last one is gone, and no longer
 * renews the peer's stream credit. Failure modes this guards against: a refused stream that
 * still reaches the application, a drain that waits for refused streams (or for nothing) and so
 * never reports, a peer whose credit keeps growing so it never stops opening streams.
 */
import t from 'tap'
import { closed, dial, engineTls, established, listen, readToEnd, writeAll, type Teardown } from '../fixtures/quic-engine.ts'
import { waitFor } from '../fixtures/wait.ts'
import type { QuicConnection } from '../../lib/quic/connection.ts'
import type { TransportOptions } from '../../lib/quic/engine.ts'
import type { QuicStream } from '../../lib/quic/stream.ts'

const CODE = 0x44524e

async function pair (t: Teardown, host: string, transport?: TransportOptions): Promise<{ client: QuicConnection, server: QuicConnection, serverStreams: QuicStream[] }> {
  const tls = await engineTls(t)
  const serverStreams: QuicStream[] = []
  const listening = listen(t, host, tls.serverCredentials, {
    ...(transport === undefined ? {} : { transport }),
    onConnection: (conn) => { conn.on('stream', (stream) => { serverStreams.push(stream) }) },
  })
  const client = dial(t, host, listening.endpoint.port, { credentials: tls.clientCredentials, ...(transport === undefined ? {} : { transport }) })
  await established(client)
  const server = await waitFor(() => listening.connections[0])
  await established(server)
  return { client, server, serverStreams }
}

/** Resolves with the stop and reset codes the peer sent on a stream of ours. */
function refusal (stream: QuicStream): Promise<{ stop: number, reset: number }> {
  return new Promise((resolve) => {
    let stop: number | null = null
    let reset: number | null = null
    const settle = (): void => { if (stop !== null && reset !== null) resolve({ stop, reset }) }
    stream.handler = {
      onStopSending: (_s, code) => { stop = code; settle() },
      onReset: (_s, code) => { reset = code; settle() },
    }
  })
}

function drained (conn: QuicConnection): Promise<number> {
  const started = Date.now()
  return new Promise((resolve) => { conn.once('drained', () => { resolve(Date.now() - started) }) })
}

t.test('a bidirectional stream the peer opens on a draining connection is refused with the code both ways and never reaches TypeScript', async (t) => {
  const { client, server, serverStreams } = await pair(t, '127.0.82.1')
  t.equal(server.drain(CODE, 'all'), 0, 'nothing open: the drain has no work to wait for')
  const open = client.openStream(true)
  if (open === null) throw new Error('no stream')
  const refused = refusal(open)
  t.ok(open.write(Buffer.from('a request after the drain began')) > 0, 'a request still open')
  t.same(await refused, { stop: CODE, reset: CODE }, 'STOP_SENDING and RESET_STREAM with the code')
  const whole = client.openStream(true)
  if (whole === null) throw new Error('no stream')
  const answer = readToEnd(whole)
  t.ok(whole.end(Buffer.from('a whole request after the drain began')), 'a request whole in one packet')
  // Its bytes all arrived, so STOP_SENDING has nothing left to stop: the answer is reset.
  t.same((await answer).end, { reset: CODE }, 'its answer is reset with the code')
  await new Promise((resolve) => { setTimeout(resolve, 100) })
  t.equal(serverStreams.length, 0, 'the server application never saw either stream')
  t.equal(server.stats()?.refusedStreams, 2, 'counted in connStats')
  t.equal(server.closed, false, 'the connection stays open')
})

t.test('a unidirectional stream opened on a draining connection is relayed, as HTTP/3 GOAWAY leaves them', async (t) => {
  // QUIC takes a stream that arrives whole before it could be refused: refusing uni streams
  // would drop some silently (drain.c).
  const { client, server, serverStreams } = await pair(t, '127.0.82.5')
  server.drain(CODE, 'all')
  const uni = client.openStream(false)
  if (uni === null) throw new Error('no stream')
  t.ok(uni.end(Buffer.from('a uni stream after the drain began')))
  const atServer = await waitFor(() => serverStreams[0])
  t.equal((await readToEnd(atServer)).data.toString(), 'a uni stream after the drain began')
  t.equal(server.stats()?.refusedStreams, 0)
})

t.test('streams opened before the drain run to completion, then drained is reported', async (t) => {
  const { client, server, serverStreams } = await pair(t, '127.0.82.2')
  const old = client.openStream(true)
  if (old === null) throw new Error('no stream')
  t.ok(old.write(Buffer.from('first half, ')) > 0)
  const atServer = await waitFor(() => serverStreams[0])
  const open = server.drain(CODE, 'all')
  t.equal(open, 1, 'one stream of work is open')
  const reported = drained(server)
  // The open stream finishes both ways after the drain began.
  const request = readToEnd(atServer)
  await writeAll(old, Buffer.from('second half'))
  t.equal((await request).data.toString(), 'first half, second half', 'the request arrived whole')
  const answer = readToEnd(old)
  await writeAll(atServer, Buffer.from('the answer'))
  t.equal((await answer).data.toString(), 'the answer', 'and its answer')
  const ms = await reported
  t.comment(`drained ${ms} ms after the drain began`)
  t.equal(server.closed, false, 'drained is a report: the connection is the owner\'s to close')
  server.close(0, 'router shutdown')
  t.match(await closed(client), { kind: 'peer', app: true, code: 0, reasonText: 'router shutdown' })
})

t.test('a draining connection no longer renews the peer\'s stream credit', async (t) => {
  const { client, server, serverStreams } = await pair(t, '127.0.82.3', { maxStreamsBidi: 2 })
  const opened: QuicStream[] = []
  for (let i = 0; i < 2; i++) {
    const stream = client.openStream(true)
    if (stream === null) throw new Error('no stream')
    t.ok(stream.write(Buffer.from(`request ${i}`)) > 0)
    opened.push(stream)
  }
  t.equal(client.openStream(true), null, 'the limit of 2 is reached')
  await waitFor(() => serverStreams.length === 2 ? true : undefined)
  t.equal(server.drain(CODE, 'all'), 2)
  const reported = drained(server)
  for (const [i, stream] of opened.entries()) {
    const atServer = serverStreams[i] as QuicStream
    const answer = readToEnd(stream)
    const request = readToEnd(atServer)
    t.ok(stream.end())
    await request
    await writeAll(atServer, Buffer.from('done'))
    await answer
  }
  await reported
  await new Promise((resolve) => { setTimeout(resolve, 200) })
  t.equal(client.streamsLeft(true), 0, 'both streams ended, and the client may open none')
})

t.test('a stream id below the highest one seen before the drain (a late, reordered open) is still served', async (t) => {
  // The engine opens streams in id order; a peer that skipped one leaves it implicitly open
  // (RFC 9000 §3.2). Here the client opens 0 and 4, only 4 carries bytes before the drain.
  const { client, server, serverStreams } = await pair(t, '127.0.82.4')
  const first = client.openStream(true)
  const second = client.openStream(true)
  if (first === null || second === null) throw new Error('no stream')
  t.ok(second.write(Buffer.from('stream 4')) > 0)
  await waitFor(() => serverStreams.find((s) => s.id === 4))
  server.drain(CODE, 'all')
  t.ok(first.write(Buffer.from('stream 0, late')) > 0)
  const atServer = await waitFor(() => serverStreams.find((s) => s.id === 0))
  t.ok(first.end())
  t.equal((await readToEnd(atServer)).data.toString(), 'stream 0, late', 'served, not refused')
  t.equal(server.stats()?.refusedStreams, 0)
})

t.test('a peer\'s unidirectional stream read to its end is no work, though ngtcp2 0.12 never closes it', async (t) => {
  // ngtcp2 0.12.1 keeps a stream the peer opened unidirectionally until the connection ends
  // (it waits for a FIN of ours on a receive-only stream): unless the engine retires it once
  // read, a drain with such a stream open would never report.
  const { client, server, serverStreams } = await pair(t, '127.0.82.6')
  const uni = client.openStream(false)
  if (uni === null) throw new Error('no stream')
  t.ok(uni.write(Buffer.from('first part, ')) > 0)
  const atServer = await waitFor(() => serverStreams[0])
  t.equal(server.drain(CODE, 'all'), 1, 'the uni stream is open work')
  const reported = drained(server)
  const read = readToEnd(atServer)
  t.ok(uni.end(Buffer.from('last part')))
  t.equal((await read).data.toString(), 'first part, last part')
  await reported
  t.equal(server.stats()?.openStreams, 0, 'the engine retired the stream itself (ngtcp2 0.12 never closes it)')
})
