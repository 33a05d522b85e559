/**
 * Issues 5 and 15, bad input: datagrams that are not QUIC, truncated or forged QUIC packets, and
 * floods of handshakes that never complete reach the router's tunnel port. They are dropped and
 * counted, never crash it, never kill a connection in handshake, and half-open handshakes cost
 * bounded memory and expire.
 */
import t from 'tap'
import { randomBytes } from 'node:crypto'
import type { Socket } from 'node:dgram'
import { readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { parseMetric } from '../fixtures/kube-router.ts'
import { startProcess, tempDir, GRPC_PYLON_DIAL_ADDR } from '../fixtures/router-process.ts'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { captureInitial, rawSocket, respin, sendRaw, templateOf, UdpProxy } from '../fixtures/quic-raw.ts'
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

async function rssMiB (pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8')
  const line = status.split('\n').find((l) => l.startsWith('VmRSS:')) ?? 'VmRSS: 0 kB'
  return Number(line.split(/\s+/)[1]) / 1024
}

t.test('10,000 handshakes that never complete: the router holds a bounded number, its memory stays bounded, they expire', async (t) => {
  const cap = 500
  const dir = await tempDir(t, 'sg-quic-flood-')
  const targets = join(dir, 'targets.yaml')
  await writeFile(targets, 'targets:\n  - {identity: stargate-0, address: 127.0.60.10, grpcPort: 50051, quicPort: 50052}\n')
  const p = await startProcess(t, [
    '--discovery', 'file', '--targets-file', targets, '--target-namespace', 'stargate', '--grpc-pylon-dial-addr', GRPC_PYLON_DIAL_ADDR,
    '--listen-addr', '127.0.0.1:0', '--health-listen-addr', '127.0.0.1:0', '--reverse-tunnel-listen-addr', '127.0.0.1:0',
    '--quic-max-connections', String(cap), '--connect-timeout-ms', '1000', '--quic-insecure',
  ])
  const listening = await waitFor(() => p.logs().find((l) => l.msg === 'raw quic tunnel listening'), { timeoutMs: 30_000, message: 'the tunnel listening log line' })
  const started = await waitFor(() => p.logs().find((l) => l.msg === 'stargate router listening'), { timeoutMs: 30_000, message: 'the router listening' })
  const port = (listening.udp as { port: number }).port
  const health = (started.health as { port: number }).port
  const pid = p.child.pid ?? 0
  const metric = async (name: string, labels?: Record<string, string>): Promise<number> =>
    parseMetric(await (await fetch(`http://127.0.0.1:${health}/metrics`)).text(), name, labels) ?? 0
  const template = templateOf(await captureInitial(t, 'stargate-0.stargate.external'))
  const sockets = await Promise.all(Array.from({ length: 20 }, async () => rawSocket(t)))
  const flood = async (): Promise<number> => {
    let peak = 0
    for (let batch = 0; batch < 10; batch++) {
      const sends: Array<Promise<void>> = []
      // Many source ports: every Initial a new handshake with a real ClientHello.
      for (let i = 0; i < 500; i++) sends.push(sendRaw(sockets[i % sockets.length] as Socket, port, respin(template)))
      await Promise.all(sends)
      peak = Math.max(peak, await metric('stargate_k8s_router_quic_endpoint_connections'))
    }
    return peak
  }
  const rssStart = await rssMiB(pid)
  const peak1 = await flood()
  const rssHalf = await rssMiB(pid)
  const peak2 = await flood()
  const rssEnd = await rssMiB(pid)
  t.ok(Math.max(peak1, peak2) <= cap, `at most ${cap} handshakes held at once (peaks ${peak1}, ${peak2})`)
  t.ok(rssEnd - rssHalf < Math.max(64, (rssHalf - rssStart) / 2), `the second 5,000 grew the router's RSS by less than the first (${rssStart.toFixed(0)} → ${rssHalf.toFixed(0)} → ${rssEnd.toFixed(0)} MiB)`)
  await waitFor(async () => await metric('stargate_k8s_router_quic_endpoint_connections') === 0, { timeoutMs: 15_000, message: 'half-open handshakes to expire' })
  t.pass('every half-open handshake expired')
})
