/**
 * The native splice joins a stream of one connection to a stream of another, so a
 * relay's bytes never cross into JavaScript: both directions, bytes already received but not
 * read go first, flow control honoured on both legs, FIN / RESET_STREAM / STOP_SENDING passed on
 * with their codes, and the end reported with byte counts. A relay may read a few header bytes
 * in TypeScript and write a rewritten header on the other leg before splicing (what HTTP/3
 * WebTransport does with 0x41 + session id). Datagrams are bridged the same way.
 *
 * The relay here is a few lines of test code over the engine (the router's is
 * lib/tunnel/raw-quic/relay.ts): pylon ──▶ relay (server leg | client leg) ──▶ stargate.
 */
import t from 'tap'
import { randomBytes } from 'node:crypto'
import { dial, echoStreams, engine, engineTls, established, listen, nextStream, readToEnd, sha256, writeAll, type Teardown } from '../fixtures/quic-engine.ts'
import { waitFor } from '../fixtures/wait.ts'
import type { TransportOptions } from '../../lib/quic/engine.ts'
import type { QuicConnection } from '../../lib/quic/connection.ts'
import type { QuicStream } from '../../lib/quic/stream.ts'

interface Relayed {
  readonly pylon: QuicConnection
  readonly stargate: QuicConnection
  readonly legs: { readonly client: QuicConnection, readonly upstream: QuicConnection }
  readonly done: Array<{ leg: 'client' | 'upstream', id: number, bytes: number }>
}

async function relayed (t: Teardown, subnet: string, options: { readonly header?: boolean, readonly relayTransport?: TransportOptions, readonly stargateTransport?: TransportOptions } = {}): Promise<Relayed> {
  const tls = await engineTls(t)
  const stargateSide = listen(t, `${subnet}.2`, tls.serverCredentials, options.stargateTransport === undefined ? {} : { transport: options.stargateTransport })
  const done: Relayed['done'] = []
  let legs: Relayed['legs'] | null = null
  const relay = listen(t, `${subnet}.1`, tls.serverCredentials, {
    ...(options.relayTransport === undefined ? {} : { transport: options.relayTransport }),
    onConnection: (client) => {
      const upstream = engine().connect({ address: `${subnet}.2`, port: stargateSide.endpoint.port, serverName: 'pod.stargate.test', alpn: [], credentials: tls.clientCredentials })
      t.teardown(() => { upstream.destroy() })
      legs = { client, upstream }
      const twin = (from: QuicStream, to: QuicConnection, leg: 'client' | 'upstream'): void => {
        const other = to.openStream(from.bidi)
        if (other === null) throw new Error('no twin stream')
        const report = { onSpliceDone: (s: QuicStream, bytes: number) => { done.push({ leg: s === from ? leg : leg === 'client' ? 'upstream' : 'client', id: s.id, bytes }) } }
        from.handler = report
        other.handler = report
        if (options.header === true && from.bidi) {
          // Read a 4-byte header in TypeScript, write a rewritten one, then splice the rest.
          const tryHeader = (): void => {
            const head = from.read(4)
            if (head === null) return
            other.write(Buffer.concat([Buffer.from('HDR:'), head.subarray(0, 4)]))
            from.handler = report
            if (!from.splice(other)) throw new Error('splice refused')
          }
          from.handler = { ...report, onReadable: tryHeader }
          tryHeader()
          return
        }
        if (!from.splice(other)) throw new Error('splice refused')
      }
      let ready = false
      const waiting: QuicStream[] = []
      client.on('stream', (s) => { if (ready) twin(s, upstream, 'client'); else waiting.push(s) })
      upstream.on('stream', (s) => { twin(s, client, 'upstream') })
      upstream.once('established', () => {
        ready = true
        for (const s of waiting.splice(0)) twin(s, upstream, 'client')
        client.bridgeDatagrams(upstream, 'raw')
      })
      client.once('close', (info) => { upstream.close(info.code, info.reason, info.app) })
      upstream.once('close', (info) => { client.close(info.code, info.reason, info.app) })
    },
  })
  const pylon = dial(t, `${subnet}.1`, relay.endpoint.port, { credentials: tls.clientCredentials })
  await established(pylon)
  const stargate = await waitFor(() => stargateSide.connections[0], { message: 'the relayed connection at the stargate' })
  await established(stargate)
  const l = await waitFor(() => legs)
  return { pylon, stargate, legs: l, done }
}

t.test('16 MiB each way through spliced streams opened by either side arrive byte-exact, and the splices report their bytes', async (t) => {
  const r = await relayed(t, '127.0.82')
  echoStreams(r.stargate)
  echoStreams(r.pylon)
  const payload = randomBytes(16 * 1024 * 1024)
  const up = r.pylon.openStream()
  const down = r.stargate.openStream()
  if (up === null || down === null) throw new Error('no stream')
  const echoes = [readToEnd(up), readToEnd(down)]
  await Promise.all([writeAll(up, payload), writeAll(down, payload)])
  for (const [i, echo] of echoes.entries()) {
    const { data, end } = await echo
    t.equal(end, 'fin')
    t.equal(sha256(data), sha256(payload), `stream ${i}: 16 MiB there and back through two splices`)
  }
  await waitFor(() => r.done.length >= 4, { message: 'every spliced stream reported done' })
  const fromPylon = r.done.find((d) => d.leg === 'client' && d.id === 0)
  t.equal(fromPylon?.bytes, payload.length, 'the pylon stream\'s splice moved every byte it received')
  t.ok((r.legs.client.stats()?.splicedBytes ?? 0) >= 2 * payload.length, 'the client leg counts spliced bytes')
})

t.test('streams that end while their bytes still wait on the other leg give their connection credit back: the tunnel keeps flowing', async (t) => {
  // Found under AddressSanitizer (docs/reliability.md): a spliced stream whose FIN arrived while
  // its last bytes still sat unacknowledged in the partner's send chain was freed, and those bytes
  // never returned to the connection window (the partner's acks credit only a live partner). Once
  // the leaked credit reached half the window ngtcp2 stopped sending MAX_DATA and the sender
  // stalled for good with nothing buffered anywhere. Windows are pinned (no auto-tuning): the
  // relay's leg from the Pylon has 1 MiB per connection and 256 KiB per stream, the Stargate
  // 192 KiB per stream and reads nothing at first, so each 320 KiB stream ends at the relay with
  // 128 KiB still waiting for the Stargate: four such streams leak half the window.
  const KIB = 1024
  const r = await relayed(t, '127.0.87', {
    relayTransport: { initialMaxData: 1024 * KIB, maxWindow: 1024 * KIB, maxStreamWindow: 256 * KIB },
    stargateTransport: { maxStreamWindow: 192 * KIB },
  })
  const held: QuicStream[] = []
  // The Stargate ends its own direction at once, so the relay's Pylon-side stream is finished
  // as soon as the Pylon's FIN is in, while the Stargate has not read its bytes yet.
  r.stargate.on('stream', (s) => { held.push(s); void writeAll(s, Buffer.alloc(0)) })
  const payloads = [0, 1, 2, 3].map(() => randomBytes(320 * KIB))
  await Promise.all(payloads.map(async (p) => {
    const s = r.pylon.openStream()
    if (s === null) throw new Error('no stream')
    await writeAll(s, p)
  }))
  await waitFor(() => r.done.filter((d) => d.leg === 'client').length >= 4 ? true : undefined, { message: 'the relay freed the Pylon side of each stream', timeoutMs: 20_000 })
  await waitFor(() => held.length >= 4 ? true : undefined, { message: 'four streams at the stargate' })
  const received = await Promise.all(held.map(async (s) => sha256((await readToEnd(s)).data)))
  t.same(received.sort(), payloads.map((p) => sha256(p)).sort(), 'all four arrive byte-exact once the Stargate reads')
  // 4 MiB more on the same tunnel: four times the relay's connection window.
  const more = randomBytes(4 * 1024 * KIB)
  const atStargate = nextStream(r.stargate)
  const s = r.pylon.openStream(false)
  if (s === null) throw new Error('no stream')
  const writing = writeAll(s, more)
  const { data, end } = await readToEnd(await atStargate)
  await writing
  t.equal(end, 'fin')
  t.equal(sha256(data), sha256(more), 'a later stream still crosses: the connection window was given back')
})

t.test('bytes buffered before the splice go first; a header read in TypeScript can be rewritten on the other leg', async (t) => {
  const r = await relayed(t, '127.0.83', { header: true })
  const atStargate = nextStream(r.stargate)
  const s = r.pylon.openStream()
  if (s === null) throw new Error('no stream')
  const body = randomBytes(2 * 1024 * 1024)
  const writing = writeAll(s, Buffer.concat([Buffer.from('abcd'), body]))
  const { data } = await readToEnd(await atStargate)
  await writing
  t.equal(data.subarray(0, 8).toString(), 'HDR:abcd', 'the rewritten header, then')
  t.equal(sha256(data.subarray(8)), sha256(body), 'the rest, byte-exact')
})

t.test('FIN, RESET_STREAM and STOP_SENDING cross the splice with their codes', async (t) => {
  const r = await relayed(t, '127.0.84')
  // Reset from the pylon reaches the stargate.
  const atStargate = nextStream(r.stargate)
  const a = r.pylon.openStream()
  if (a === null) throw new Error('no stream')
  a.write(Buffer.from('part of a request'))
  const sa = await atStargate
  const endA = readToEnd(sa)
  a.reset(77)
  t.same((await endA).end, { reset: 77 }, 'reset 77 crossed')
  // STOP_SENDING from the stargate reaches the pylon's writer.
  const atStargate2 = nextStream(r.stargate)
  const b = r.pylon.openStream()
  if (b === null) throw new Error('no stream')
  b.write(Buffer.from('upload'))
  const sb = await atStargate2
  const stop = new Promise<number>((resolve) => { b.handler = { onStopSending: (_s, code) => { resolve(code) } } })
  sb.stopSending(9)
  t.equal(await stop, 9, 'STOP_SENDING 9 crossed back')
  // A stargate-opened uni stream with FIN reaches the pylon.
  const atPylon = nextStream(r.pylon)
  const u = r.stargate.openStream(false)
  if (u === null) throw new Error('no stream')
  u.end(Buffer.from('one-way'))
  const pu = await atPylon
  t.notOk(pu.bidi)
  t.same(await readToEnd(pu), { data: Buffer.from('one-way'), end: 'fin' })
})

t.test('datagrams are bridged both ways inside the addon', async (t) => {
  const r = await relayed(t, '127.0.85')
  r.stargate.on('datagram', (d) => { r.stargate.sendDatagram(Buffer.concat([Buffer.from('re:'), d])) })
  const back: string[] = []
  r.pylon.on('datagram', (d) => { back.push(d.toString()) })
  for (let i = 0; i < 10; i++) r.pylon.sendDatagram(Buffer.from(`d${i}`))
  await waitFor(() => back.length >= 8, { message: 'datagrams there and back' })
  t.ok(back.every((b) => b.startsWith('re:d')))
  t.ok((r.legs.client.stats()?.bridgedBytes ?? 0) > 0, 'counted as bridged')
})

t.test('closing one end closes the other with the same code and reason; nothing stays buffered', async (t) => {
  const before = engine().counters()
  const r = await relayed(t, '127.0.86')
  echoStreams(r.stargate)
  const s = r.pylon.openStream()
  if (s === null) throw new Error('no stream')
  await writeAll(s, randomBytes(1024 * 1024), false)
  r.stargate.close(42, 'stargate restarting')
  const info = await new Promise<{ code: number, reason: string }>((resolve) => { r.pylon.once('close', (i) => { resolve({ code: i.code, reason: i.reasonText }) }) })
  t.same(info, { code: 42, reason: 'stargate restarting' })
  await waitFor(() => {
    const now = engine().counters()
    return now.streams === before.streams && now.bufferedBytes === before.bufferedBytes
  }, { message: 'streams and buffers released' })
  t.pass('no stream or buffer outlives the connections')
})
