/**
 * Handshake floods (12,000 spoofed Initials in 5 s would fill the 10,000 connection slots and
 * lock out real Pylons). Initials from addresses that never answer: the router holds
 * at most --quic-max-handshakes-per-address of them per address and --quic-retry-threshold in
 * total, answers the rest with a stateless Retry (which a spoofer cannot answer), and a real
 * Pylon, which answers the Retry, still gets its tunnel. Memory stays bounded and the half-open
 * handshakes expire.
 *
 * The counts here are scaled down so the file stays quick on a loaded two-core machine: the
 * slots are scaled with them (--quic-max-connections), so the flood still exceeds every limit.
 * 10,000 Initials, and the Pylon's handshake time under them (target: within 1 s), are
 * measured by bench/quic/engine.bench.ts.
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
// Two routers and a quinn pod; seconds alone, more on a loaded machine.
t.setTimeout(120_000)

/** Initials per flood: 30 × the per-address limit, twice the slots the tests give the router. */
const FLOOD = 2000

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
  const listening = await waitFor(() => p.logs().find((l) => l.msg === 'raw quic tunnel listening'), { timeoutMs: 60_000, message: 'the tunnel listening log line' })
  const started = await waitFor(() => p.logs().find((l) => l.msg === 'stargate router listening'), { timeoutMs: 60_000, message: 'the router listening' })
  const health = (started.health as { port: number }).port
  return {
    port: (listening.udp as { port: number }).port,
    pid: p.child.pid ?? 0,
    metric: async (name, labels) => parseMetric(await (await fetch(`http://127.0.0.1:${health}/metrics`)).text(), name, labels) ?? 0,
  }
}

let built: Buffer[] | null = null

/** Comments how long each phase of a subtest took (where a loaded machine spends the time). */
function stopwatch (t: { comment: (message: string) => void }): (phase: string) => void {
  let last = Date.now()
  return (phase) => {
    const now = Date.now()
    t.comment(`${phase}: ${now - last} ms`)
    last = now
  }
}

/**
 * FLOOD handshakes that will never complete: a real ClientHello under a fresh DCID each, built
 * once for the file before anything is sent (building one costs a key derivation and an AES-GCM
 * seal in JavaScript).
 */
async function flood (t: Teardown): Promise<Buffer[]> {
  if (built === null) {
    const template = templateOf(await captureInitial(t, 'stargate-0.stargate.external'))
    built = Array.from({ length: FLOOD }, () => respin(template))
  }
  return built
}

/**
 * Sends the datagrams from many source ports, paced in batches so loopback does not drop them
 * all; halfway() runs once half of them are out.
 */
async function send (t: Teardown, port: number, datagrams: readonly Buffer[], halfway?: () => void): Promise<void> {
  const sockets: Socket[] = await Promise.all(Array.from({ length: 50 }, async () => rawSocket(t)))
  for (let sent = 0; sent < datagrams.length; sent += 250) {
    if (sent >= datagrams.length / 2 && halfway !== undefined) {
      halfway()
      halfway = undefined
    }
    const batch: Array<Promise<void>> = []
    for (let i = sent; i < Math.min(datagrams.length, sent + 250); i++) batch.push(sendRaw(sockets[i % sockets.length] as Socket, port, datagrams[i] as Buffer))
    await Promise.all(batch)
  }
}

// Per-address and Retry limits above the flood's reach on purpose, so every Initial that fits
// costs a full server handshake start: what bounds it is --quic-max-connections. This router
// starts now, while the first subtest runs (a router's start-up is most of this file's time on a
// loaded machine); the file's teardown stops it.
const cap = FLOOD / 10
const bounded = router(t, 50052, ['--quic-max-connections', String(cap), '--quic-retry-threshold', '100000', '--quic-max-handshakes-per-address', '100000', '--connect-timeout-ms', '1000'])
bounded.catch(() => {}) // awaited (and its failure reported) by the second subtest

t.test('a flood of spoofed Initials from many source ports: a real Pylon still gets its tunnel', { skip }, async (t) => {
  const tls = await createQuicTls(t, ['*.stargate.external'])
  const certPath = join(tls.dir, 'pod.crt')
  const keyPath = join(tls.dir, 'pod.key')
  await writeFile(certPath, tls.stargate.chainPem)
  await writeFile(keyPath, tls.stargate.keyPem)
  const lap = stopwatch(t)
  const pod = await QuinnPeer.server(t, { listen: '127.0.99.10:0', certPath, keyPath, accept: 'echo' })
  lap('pod started')
  // Fewer slots than the flood has Initials: without the defences it would lock the Pylon out.
  const slots = FLOOD / 2
  // The router starts in its own process while this one builds the Initials.
  const [r, datagrams] = await Promise.all([router(t, pod.port, ['--quic-max-connections', String(slots)], tls.routerArgs), flood(t)])
  lap('router started, Initials built')
  // The Pylon dials halfway through the flood, from the same address as the flood.
  let pylon: Promise<QuinnPeer> | null = null
  await send(t, r.port, datagrams, () => {
    pylon = QuinnPeer.client(t, { connect: `127.0.0.1:${r.port}`, sni: 'stargate-0.stargate.external', caPath: tls.caPath })
  })
  lap('flood sent')
  if (pylon === null) throw new Error('the Pylon never dialed')
  const connected = await (await pylon as QuinnPeer).established(1)
  lap('Pylon connected')
  t.pass(`the Pylon's handshake completed in ${connected.handshake_ms.toFixed(0)} ms, a Retry round trip included`)
  t.match(await pod.waitEvent('connected'), { sni: 'stargate-0.stargate.external' }, 'and its tunnel reached the pod')
  const retries = await r.metric('stargate_k8s_router_quic_stateless_packets_total', { type: 'retry' })
  t.ok(retries > FLOOD / 2, `the flood was answered with stateless Retries (${retries} for ${FLOOD} Initials)`)
  const halfOpen = await r.metric('stargate_k8s_router_quic_endpoint_half_open')
  t.ok(halfOpen <= 64 + 1, `at most --quic-max-handshakes-per-address (64) unvalidated handshakes held (${halfOpen})`)
  t.ok(await r.metric('stargate_k8s_router_quic_endpoint_connections') < slots, 'the slots never filled')
})

async function rssMiB (pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8')
  const line = status.split('\n').find((l) => l.startsWith('VmRSS:')) ?? 'VmRSS: 0 kB'
  return Number(line.split(/\s+/)[1]) / 1024
}

t.test('handshakes that never complete, past every limit: connections bounded, memory bounded, all expire', async (t) => {
  const [r, datagrams] = await Promise.all([bounded, flood(t)])
  const lap = stopwatch(t)
  const first = datagrams.slice(0, FLOOD / 2)
  const second = datagrams.slice(FLOOD / 2)
  const rssStart = await rssMiB(r.pid)
  await send(t, r.port, first)
  const peak1 = await r.metric('stargate_k8s_router_quic_endpoint_connections')
  const rssHalf = await rssMiB(r.pid)
  await send(t, r.port, second)
  const peak2 = await r.metric('stargate_k8s_router_quic_endpoint_connections')
  const rssEnd = await rssMiB(r.pid)
  lap('flood sent')
  t.ok(Math.max(peak1, peak2) <= cap, `at most --quic-max-connections (${cap}) held (${peak1}, ${peak2})`)
  t.ok(await r.metric('stargate_k8s_router_quic_datagrams_dropped_total', { reason: 'connection_limit' }) > 0, 'Initials beyond the limit were dropped and counted')
  t.ok(rssEnd - rssHalf < Math.max(48, (rssHalf - rssStart) / 2), `the second half grew the router's RSS by less than the first (${rssStart.toFixed(0)} → ${rssHalf.toFixed(0)} → ${rssEnd.toFixed(0)} MiB)`)
  await waitFor(async () => await r.metric('stargate_k8s_router_quic_endpoint_connections') === 0, { timeoutMs: 30_000, message: 'half-open handshakes to expire' })
  lap('half-open handshakes expired')
  t.pass('every half-open handshake expired')
  t.ok(await r.metric('stargate_k8s_router_quic_handshake_failures_total', { reason: 'timeout' }) > 0, 'counted as timeouts')
})
