/**
 * Issue 15, handshake floods (found in review: 12,000 spoofed Initials in 5 s filled the 10,000
 * slots and locked out real Pylons). Initials from addresses that never answer: the router holds
 * at most --quic-max-handshakes-per-address of them per address and --quic-retry-threshold in
 * total, answers the rest with a stateless Retry (which a spoofer cannot answer), and a real
 * Pylon, which answers the Retry, still gets its tunnel at once. Memory stays bounded and the
 * half-open handshakes expire.
 */
import t from 'tap'
import type { Socket } from 'node:dgram'
import { readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { parseMetric, type Teardown } from '../fixtures/kube-router.ts'
import { GRPC_PYLON_DIAL_ADDR, startProcess, tempDir } from '../fixtures/router-process.ts'
import { createQuicTls } from '../fixtures/quic-tls.ts'
import { QuinnPeer, quinnPeerSkip } from '../fixtures/quinn-peer.ts'
import { captureInitial, rawSocket, respin, sendRaw, templateOf } from '../fixtures/quic-raw.ts'
import { waitFor } from '../fixtures/wait.ts'

const skip = await quinnPeerSkip(t)
// Floods take seconds to send on a loaded two-core machine.
t.setTimeout(120_000)

interface RouterUnderTest {
  readonly port: number
  readonly metric: (name: string, labels?: Record<string, string>) => Promise<number>
  readonly pid: number
}

/** The router in its own process (its own CPU, as in production), routing stargate-0 to quicPort. */
async function router (t: Teardown, quicPort: number, args: readonly string[], tlsArgs: readonly string[] = ['--quic-insecure']): Promise<RouterUnderTest> {
  const dir = await tempDir(t, 'sg-quic-flood-')
  const targets = join(dir, 'targets.yaml')
  await writeFile(targets, `targets:\n  - {identity: stargate-0, address: 127.0.99.10, grpcPort: 50051, quicPort: ${quicPort}}\n`)
  const p = await startProcess(t, [
    '--discovery', 'file', '--targets-file', targets, '--target-namespace', 'stargate', '--grpc-pylon-dial-addr', GRPC_PYLON_DIAL_ADDR,
    '--listen-addr', '127.0.0.1:0', '--health-listen-addr', '127.0.0.1:0', '--reverse-tunnel-listen-addr', '127.0.0.1:0',
    ...tlsArgs, ...args,
  ])
  const listening = await waitFor(() => p.logs().find((l) => l.msg === 'raw quic tunnel listening'), { timeoutMs: 30_000, message: 'the tunnel listening log line' })
  const started = await waitFor(() => p.logs().find((l) => l.msg === 'stargate router listening'), { timeoutMs: 30_000, message: 'the router listening' })
  const health = (started.health as { port: number }).port
  return {
    port: (listening.udp as { port: number }).port,
    pid: p.child.pid ?? 0,
    metric: async (name, labels) => parseMetric(await (await fetch(`http://127.0.0.1:${health}/metrics`)).text(), name, labels) ?? 0,
  }
}

let built: Buffer[] | null = null

/**
 * 10,000 handshakes that will never complete: a real ClientHello under a fresh DCID each, built
 * once for the file before anything is sent (building one costs a key derivation and an AES-GCM
 * seal in JavaScript).
 */
async function flood (t: Teardown): Promise<Buffer[]> {
  if (built === null) {
    const template = templateOf(await captureInitial(t, 'stargate-0.stargate.external'))
    built = Array.from({ length: 10_000 }, () => respin(template))
  }
  return built
}

/** Sends the datagrams from many source ports, paced in batches so loopback does not drop them all. */
async function send (t: Teardown, port: number, datagrams: readonly Buffer[]): Promise<void> {
  const sockets: Socket[] = await Promise.all(Array.from({ length: 50 }, async () => rawSocket(t)))
  for (let sent = 0; sent < datagrams.length; sent += 250) {
    const batch: Array<Promise<void>> = []
    for (let i = sent; i < Math.min(datagrams.length, sent + 250); i++) batch.push(sendRaw(sockets[i % sockets.length] as Socket, port, datagrams[i] as Buffer))
    await Promise.all(batch)
  }
}

t.test('10,000 spoofed Initials from many source ports: a real Pylon still gets its tunnel within a second', { skip }, async (t) => {
  const tls = await createQuicTls(t, ['*.stargate.external'])
  const certPath = join(tls.dir, 'pod.crt')
  const keyPath = join(tls.dir, 'pod.key')
  await writeFile(certPath, tls.stargate.chainPem)
  await writeFile(keyPath, tls.stargate.keyPem)
  const pod = await QuinnPeer.server(t, { listen: '127.0.99.10:0', certPath, keyPath, accept: 'echo' })
  const r = await router(t, pod.port, [], tls.routerArgs)
  const datagrams = await flood(t)
  const flooding = send(t, r.port, datagrams)
  // The Pylon dials while the flood is under way, from the same address as the flood.
  await new Promise((resolve) => { setTimeout(resolve, 100) })
  const pylon = await QuinnPeer.client(t, { connect: `127.0.0.1:${r.port}`, sni: 'stargate-0.stargate.external', caPath: tls.caPath })
  const connected = await pylon.established(1)
  await flooding
  t.ok(connected.handshake_ms < 1000, `the Pylon's handshake took ${connected.handshake_ms.toFixed(0)} ms (a Retry round trip included)`)
  t.match(await pod.waitEvent('connected'), { sni: 'stargate-0.stargate.external' }, 'and its tunnel reached the pod')
  const retries = await r.metric('stargate_k8s_router_quic_stateless_packets_total', { type: 'retry' })
  t.ok(retries > 5000, `the flood was answered with stateless Retries (${retries})`)
  const halfOpen = await r.metric('stargate_k8s_router_quic_endpoint_half_open')
  t.ok(halfOpen <= 64 + 1, `at most --quic-max-handshakes-per-address (64) unvalidated handshakes held (${halfOpen})`)
})

async function rssMiB (pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8')
  const line = status.split('\n').find((l) => l.startsWith('VmRSS:')) ?? 'VmRSS: 0 kB'
  return Number(line.split(/\s+/)[1]) / 1024
}

t.test('10,000 handshakes that never complete, past every limit: connections bounded, memory bounded, all expire', async (t) => {
  // Per-address and Retry limits above the flood's reach on purpose, so every Initial that
  // fits costs a full server handshake start: what bounds it is --quic-max-connections (500).
  const r = await router(t, 50052, ['--quic-max-connections', '500', '--quic-retry-threshold', '100000', '--quic-max-handshakes-per-address', '100000', '--connect-timeout-ms', '1000'])
  const datagrams = await flood(t)
  const first = datagrams.slice(0, 5000)
  const second = datagrams.slice(5000)
  const rssStart = await rssMiB(r.pid)
  await send(t, r.port, first)
  const peak1 = await r.metric('stargate_k8s_router_quic_endpoint_connections')
  const rssHalf = await rssMiB(r.pid)
  await send(t, r.port, second)
  const peak2 = await r.metric('stargate_k8s_router_quic_endpoint_connections')
  const rssEnd = await rssMiB(r.pid)
  t.ok(Math.max(peak1, peak2) <= 500, `at most --quic-max-connections held (${peak1}, ${peak2})`)
  t.ok(await r.metric('stargate_k8s_router_quic_datagrams_dropped_total', { reason: 'connection_limit' }) > 0, 'Initials beyond the limit were dropped and counted')
  t.ok(rssEnd - rssHalf < Math.max(48, (rssHalf - rssStart) / 2), `the second 5,000 grew the router's RSS by less than the first (${rssStart.toFixed(0)} → ${rssHalf.toFixed(0)} → ${rssEnd.toFixed(0)} MiB)`)
  await waitFor(async () => await r.metric('stargate_k8s_router_quic_endpoint_connections') === 0, { timeoutMs: 15_000, message: 'half-open handshakes to expire' })
  t.pass('every half-open handshake expired')
  t.ok(await r.metric('stargate_k8s_router_quic_handshake_failures_total', { reason: 'timeout' }) > 0, 'counted as timeouts')
})
