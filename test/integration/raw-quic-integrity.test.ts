/**
 * SPEC §7: what crosses a raw QUIC tunnel arrives intact, in both directions —
 * large stream payloads (sha256 compared) on several concurrent streams, unidirectional
 * streams, and QUIC datagrams when both legs negotiated them.
 */
import t from 'tap'
import { createHash, randomBytes } from 'node:crypto'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { hashStream, openDuplex } from '../fixtures/quic-stargate.ts'
import { waitFor } from '../fixtures/wait.ts'
import type { QuicDuplex } from '../../lib/quic/stream-duplex.ts'

const sha256 = (data: Buffer): string => createHash('sha256').update(data).digest('hex')

function writeAll (stream: QuicDuplex, data: Buffer): void {
  const chunk = 48 * 1024
  let offset = 0
  const pump = (): void => {
    while (offset < data.length) {
      const end = Math.min(offset + chunk, data.length)
      const more = stream.write(data.subarray(offset, end))
      offset = end
      if (!more) {
        stream.once('drain', pump)
        return
      }
    }
    stream.end()
  }
  pump()
}

t.test('large payloads arrive intact both ways, on concurrent streams from either side', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.50' })
  const payload = randomBytes(4 * 1024 * 1024)
  const expected = sha256(payload)
  const pylon = await cluster.dial('stargate-0', { answer: (request) => request })
  await pylon.ready()
  // Pylon -> Stargate -> Pylon (the stub echoes): 3 streams of 4 MiB each way at once.
  const streams = [0, 1, 2].map(() => pylon.openStream(true))
  const echoes = streams.map((s) => hashStream(s))
  for (const s of streams) writeAll(s, payload)
  // Stargate -> Pylon -> Stargate (the Pylon echoes the request).
  const stub = cluster.stubs.get('stargate-0')
  const tunnel = await stub?.tunnel()
  if (tunnel === undefined) throw new Error('no tunnel')
  const fromStargate = openDuplex(tunnel.conn, true)
  if (fromStargate === null) throw new Error('no stream')
  const reply = hashStream(fromStargate)
  writeAll(fromStargate, payload)
  for (const [i, echo] of echoes.entries()) t.same(await echo, { sha256: expected, bytes: payload.length }, `pylon stream ${i}: 4 MiB there and back`)
  t.same(await reply, { sha256: expected, bytes: payload.length }, 'stargate stream: 4 MiB there and back')
  const relayed = await cluster.kube.metric('stargate_k8s_router_quic_relayed_bytes_total', { direction: 'client_to_stargate' }) ?? 0
  t.ok(relayed >= 4 * payload.length, `relayed bytes are counted (${relayed})`)
  const calls = await cluster.kube.metric('stargate_k8s_router_quic_engine_syscalls_total', { call: 'recv' }) ?? 0
  t.ok(calls > 0, `the engine's socket calls are counted (${calls} recvmmsg)`)
  const cpu = await cluster.kube.metric('stargate_k8s_router_quic_engine_cpu_seconds_total') ?? 0
  t.ok(cpu > 0, `and the CPU time it spent in its callbacks (${cpu.toFixed(3)} s)`)
})

t.test('unidirectional streams are relayed both ways', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.51' })
  const pylon = await cluster.dial('stargate-0')
  await pylon.ready()
  const uni = pylon.openStream(false)
  uni.on('error', () => {})
  const data = randomBytes(256 * 1024)
  uni.end(data)
  const tunnel = await cluster.stubs.get('stargate-0')?.tunnel()
  if (tunnel === undefined) throw new Error('no tunnel')
  const atStargate = await waitFor(() => tunnel.streams.find((s) => !s.bidi))
  t.equal(atStargate.id, uni.id, 'same stream ID')
  const fromStargate = openDuplex(tunnel.conn, false)
  if (fromStargate === null) throw new Error('no stream')
  fromStargate.on('error', () => {})
  fromStargate.end(data)
  const atPylon = await waitFor(() => pylon.streams.find((s) => !s.bidi))
  t.equal(atPylon.id, fromStargate.id, 'same stream ID the other way')
})

t.test('datagrams cross the tunnel intact both ways when both legs negotiated them', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.52' })
  const pylon = await cluster.dial('stargate-0')
  await pylon.ready()
  t.ok(pylon.conn.datagrams, 'the Pylon leg negotiated datagrams')
  const tunnel = await cluster.stubs.get('stargate-0')?.tunnel()
  if (tunnel === undefined) throw new Error('no tunnel')
  t.ok(tunnel.conn.datagrams, 'the Stargate leg too')
  // The stub echoes datagrams: each one goes Pylon -> Stargate -> Pylon.
  const sent = new Map<string, number>()
  const received: string[] = []
  pylon.conn.on('datagram', (data) => { received.push(sha256(data)) })
  let queued = 0
  for (let i = 0; i < 50; i++) {
    const data = randomBytes(1000)
    sent.set(sha256(data), i)
    if (pylon.conn.sendDatagram(data)) queued++
    if (i % 10 === 9) await new Promise((resolve) => { setTimeout(resolve, 5) })
  }
  t.equal(queued, 50, 'every datagram was queued')
  // Datagrams are unreliable by design; on loopback at this rate none should be lost.
  await waitFor(() => received.length >= 45, { message: 'echoed datagrams' })
  t.ok(received.every((h) => sent.has(h)), 'every datagram that arrived is byte-for-byte one that was sent')
})
