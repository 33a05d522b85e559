/**
 * Streams a peer opens unidirectionally, more of them over a connection's life than its limit
 * allows at once. ngtcp2 0.12.1 never closes such a stream (its close waits for a FIN of ours on
 * a receive-only stream), so the engine never renewed the peer's MAX_STREAMS for them: the
 * 101st unidirectional stream of a tunnel (limit 100) waited forever, whoever opened it. The
 * engine now retires such a stream once its read side is finished (native/src/stream.c
 * retire_peer_uni). Three times the limit, one after the other: engine to engine (the streams
 * read in TypeScript and freed), a raw QUIC tunnel between quinn 0.11 peers both ways, and a
 * WebTransport session over HTTP/3 both ways; and the bound on what ngtcp2 still keeps of them.
 */
import t from 'tap'
import { once } from 'node:events'
import { closed, dial, engine, engineTls, established, listen, readToEnd } from '../fixtures/quic-engine.ts'
import { sleep, waitFor } from '../fixtures/wait.ts'
import { quinnPeerSkip } from '../fixtures/quinn-peer.ts'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { H3Cluster } from '../fixtures/h3-cluster.ts'
import { readAll, endWith } from '../fixtures/h3-wt-session.ts'
import type { QuicStream } from '../../lib/quic/stream.ts'

const skip = await quinnPeerSkip(t)
t.setTimeout(180_000)
/** The router's and the engine's default limit of concurrent unidirectional streams per peer. */
const LIMIT = 100
const COUNT = 3 * LIMIT

t.test(`engine to engine: ${COUNT} unidirectional streams in turn, each read to its end, and none left behind`, async (t) => {
  const tls = await engineTls(t)
  const listening = listen(t, '127.0.166.1', tls.serverCredentials)
  const client = dial(t, '127.0.166.1', listening.endpoint.port, { credentials: tls.clientCredentials })
  await established(client)
  const server = await waitFor(() => listening.connections[0])
  await established(server)
  const before = engine().counters().streams
  let arrived = 0
  for (let i = 0; i < COUNT; i++) {
    let stream = client.openStream(false)
    while (stream === null) {
      const credit = await Promise.race([once(client, 'streamsAvailable').then(() => true), sleep(10_000).then(() => false)])
      if (!credit) throw new Error(`no stream credit for unidirectional stream ${i + 1} within 10 s`)
      stream = client.openStream(false)
    }
    const incoming = once(server, 'stream') as Promise<[QuicStream]>
    if (!stream.end(Buffer.from(`message ${i}`))) t.fail(`stream ${i + 1} refused its bytes`)
    const [atServer] = await incoming
    const end = await readToEnd(atServer)
    if (end.end === 'fin' && end.data.toString() === `message ${i}`) arrived++
    else t.fail(`stream ${i + 1} ended ${JSON.stringify(end.end)} with ${end.data.length} bytes`)
  }
  t.equal(arrived, COUNT, `all ${COUNT} arrived whole`)
  await waitFor(() => engine().counters().streams <= before ? true : undefined, { message: 'the addon forgot every finished stream' })
  t.pass('the addon holds no stream of them once read')
  client.close(0, 'done')
  await closed(server)
})

/*
 * ngtcp2 keeps its state of every such stream until the connection ends (176 bytes and a map
 * entry, 17 KiB more when data came out of order), so renewing credit without end would let a
 * peer grow the router's memory without end: credit is renewed while the estimate stays within
 * 4 MiB a connection (native/src/quic.h Q_PEER_UNI_*), 13,107 streams read in order.
 */
t.test('past the budget for what ngtcp2 keeps of them, no more unidirectional stream credit, and the connection goes on', async (t) => {
  const BUDGET_STREAMS = Math.floor(4 * 1024 * 1024 / 320)
  const tls = await engineTls(t)
  const listening = listen(t, '127.0.166.2', tls.serverCredentials, {
    onConnection: (conn) => {
      conn.on('stream', (stream) => {
        const drain = (s: QuicStream): void => {
          while (s.read() !== null);
          if (s.bidi && s.readEnded) s.end(Buffer.from('still here'))
        }
        stream.handler = { onReadable: drain }
        drain(stream)
      })
    },
  })
  const client = dial(t, '127.0.166.2', listening.endpoint.port, { credentials: tls.clientCredentials })
  await established(client)
  let opened = 0
  for (;;) {
    const stream = client.openStream(false)
    if (stream === null) {
      const credit = await Promise.race([once(client, 'streamsAvailable').then(() => true), sleep(2000).then(() => false)])
      if (!credit) break
      continue
    }
    stream.end(Buffer.from('x'))
    opened++
    if (opened % 50 === 0) await new Promise((resolve) => { setImmediate(resolve) })
  }
  t.ok(opened >= BUDGET_STREAMS && opened <= BUDGET_STREAMS + LIMIT, `the peer opened ${opened} unidirectional streams, then got no more credit`)
  const bidi = client.openStream(true)
  if (bidi === null) throw new Error('no bidirectional stream')
  const answer = readToEnd(bidi)
  t.ok(bidi.end(Buffer.from('hello')))
  t.equal((await answer).data.toString(), 'still here', 'a bidirectional stream still gets its answer')
})

t.test(`a raw QUIC tunnel between quinn peers: ${COUNT} unidirectional streams in turn from the Pylon, then ${COUNT} from the Stargate`, { skip }, async (t) => {
  const cluster = await QuicCluster.start(t, { pods: [], subnet: '127.0.167' })
  const { pylon, stargate, sc } = await cluster.quinnTunnel('stargate-0', '127.0.167.10', { stargate: { accept: 'sink' }, pylon: { accept: 'sink' } })
  for (const [from, conn, to, toConn, name] of [[pylon, 1, stargate, sc, 'Pylon'], [stargate, sc, pylon, 1, 'Stargate']] as const) {
    for (let i = 0; i < COUNT; i++) {
      const id = await from.open(conn, 'uni')
      await from.write(conn, id, `message ${i}`)
      await from.finish(conn, id)
      const done = await to.recvDone(toConn, id)
      if (!done.fin || done.bytes !== `message ${i}`.length) t.fail(`${name} stream ${id} arrived as ${JSON.stringify(done)}`)
    }
    t.pass(`${COUNT} unidirectional streams from the ${name} arrived whole`)
  }
})

t.test(`a WebTransport session over HTTP/3: ${COUNT} unidirectional streams in turn from the Pylon, then from the pod`, async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' } })
  const result = await cluster.open('stargate-0')
  if (result.session === null) throw new Error(`no session: ${result.status} ${result.body}`)
  const pylon = result.session
  const atPod = await cluster.pods.get('stargate-0')!.nextSession()
  if (atPod === null) throw new Error('no session at the pod')
  for (const [from, to, name] of [[pylon, atPod, 'Pylon'], [atPod, pylon, 'pod']] as const) {
    for (let i = 0; i < COUNT; i++) {
      const stream = await Promise.race([from.open(false), sleep(10_000).then(() => null)])
      if (stream === null) throw new Error(`no stream credit for the ${name}'s unidirectional stream ${i + 1} within 10 s`)
      await endWith(stream, Buffer.from(`message ${i}`))
      const arrived = await to.incomingUni.next()
      if (arrived === null) {
        t.fail(`${name} stream ${i + 1} never arrived`)
        return
      }
      const data = await readAll(arrived)
      if (data.toString() !== `message ${i}`) t.fail(`${name} stream ${i + 1} arrived as ${JSON.stringify(data.toString())}`)
    }
    t.pass(`${COUNT} unidirectional streams from the ${name} arrived whole`)
  }
})
