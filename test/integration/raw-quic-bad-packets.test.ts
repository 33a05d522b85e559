/**
 * Bad input: datagrams that are not QUIC, truncated or forged QUIC packets, and
 * reach the router's tunnel port. They are dropped and counted, never crash it and never kill a
 * connection in handshake. Floods of handshakes are in raw-quic-flood.test.ts, random datagrams
 * by the hundred thousand in quic-engine-fuzz.test.ts.
 */
import t from 'tap'
import { randomBytes } from 'node:crypto'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { captureInitial, rawSocket, sendRaw, UdpProxy } from '../fixtures/quic-raw.ts'
import { waitFor } from '../fixtures/wait.ts'

const DROPPED = 'stargate_k8s_router_quic_datagrams_dropped_total'

/** Variants of a real Initial with its DCID but a broken structure. */
function forgeries (initial: Buffer): Buffer[] {
  const out: Buffer[] = []
  for (const n of [1, 5, 6, 7, 20, 40, 41, 42, 300, 1199]) out.push(initial.subarray(0, n))
  const noFixedBit = Buffer.from(initial)
  noFixedBit[0] = (noFixedBit[0] as number) & ~0x40
  out.push(noFixedBit)
  const longLength = Buffer.from(initial)
  // The Length varint after the empty token (2-byte form): claim more than the datagram holds.
  const lengthAt = 6 + (initial[5] as number) + 1 + (initial[6 + (initial[5] as number)] as number) + 1
  longLength[lengthAt] = 0x7f
  longLength[lengthAt + 1] = 0xff
  out.push(longLength)
  const retryType = Buffer.from(initial)
  retryType[0] = ((retryType[0] as number) & 0xcf) | 0x30
  out.push(retryType)
  const badCidLength = Buffer.from(initial)
  badCidLength[5] = 21
  out.push(badCidLength)
  return out
}

t.test('garbage and forged datagrams on the tunnel port are dropped and counted; tunnels still work', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.58' })
  const socket = await rawSocket(t)
  const port = cluster.tunnelPort
  const junk: Buffer[] = [Buffer.alloc(1), Buffer.from('GET / HTTP/1.1\r\n\r\n')]
  for (const size of [3, 21, 40, 100, 1200, 1350, 1500]) junk.push(randomBytes(size))
  const initial = await captureInitial(t, 'stargate-0.stargate.external')
  junk.push(...forgeries(initial))
  for (const datagram of junk) await sendRaw(socket, port, datagram)
  await waitFor(async () => (await cluster.kube.metric(DROPPED, { reason: 'malformed' }) ?? 0) > 0, { message: 'malformed datagrams counted' })
  const pylon = await cluster.dial('stargate-0')
  await pylon.ready()
  const tunnel = await cluster.stubs.get('stargate-0')?.tunnel()
  if (tunnel === undefined) throw new Error('no tunnel')
  t.equal((await cluster.stubs.get('stargate-0')?.request(tunnel, 'still there?'))?.toString(), 'pylon:still there?', 'a tunnel works after the junk')
  t.equal(await cluster.outcome('accepted'), 1, 'no junk was taken for a connection')
})

t.test('forged and truncated packets aimed at a handshake in progress do not break it', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.59' })
  const proxy = await UdpProxy.start(t, cluster.tunnelPort, 'stargate-0.stargate.external')
  const initial = await proxy.firstInitial
  // The router now has this handshake in progress, keyed by the Initial's DCID: hit it from
  // the client's own address.
  for (const forged of forgeries(initial)) await proxy.send(forged)
  // A well-formed copy whose payload does not decrypt: dropped, the handshake lives.
  const corrupt = Buffer.from(initial)
  for (let i = 100; i < 140; i++) corrupt[i] = (corrupt[i] as number) ^ 0xff
  await proxy.send(corrupt)
  await new Promise<void>((resolve, reject) => {
    proxy.conn.once('established', resolve)
    proxy.conn.once('close', (info) => { reject(new Error(`closed: ${info.kind} ${info.reasonText}`)) })
  })
  t.ok(proxy.conn.established, 'the handshake completed')
  await waitFor(async () => await cluster.outcome('accepted') === 1, { message: 'the tunnel accepted' })
  t.equal(proxy.conn.closed, false, 'the router did not close it')
})
