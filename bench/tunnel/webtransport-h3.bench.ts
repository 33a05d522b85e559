/**
 * WebTransport over HTTP/3 through the router (lib/tunnel/webtransport-h3-*.ts),
 * against the engine's own client talking to the pod directly, measured in one run:
 *
 * 1. 64 MiB over one bidirectional stream: direct vs through the router (target: at least half
 *    the direct throughput). Through the router each byte is decrypted and re-encrypted once per
 *    leg, spliced in the addon (it never reaches JavaScript).
 * 2. 500 concurrent sessions sending small messages (1 KiB, echoed, one new stream per message,
 *    as proxied LLM requests), 50 sending at a time: round trip direct and through the router,
 *    the median the router adds (target ≤ 2 ms) and the p99.
 * 3. The router's resident memory per bridged session (two QUIC connections and two HTTP/3
 *    sessions each), read from /proc.
 *
 * The router runs as `node server/main.ts --discovery file --tunnel-protocol webtransport` in
 * its own process; the Pylons (test/fixtures/h3-pylon.ts) and the Stargate pods
 * (test/fixtures/h3-stargate.ts), both on the QUIC engine, run here.
 * Environment: WT_BENCH_SESSIONS (default 500), WT_BENCH_ROUNDS (default 10).
 */
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { readFileSync } from 'node:fs'
import { measureEach, now, Report, summarize, summarizeRounds } from '../_util.ts'
import { GRPC_PYLON_DIAL_ADDR, startProcess, tempDir } from '../../test/fixtures/router-process.ts'
import { createCa, createLeaf } from '../../test/fixtures/certs.ts'
import { H3Stargate } from '../../test/fixtures/h3-stargate.ts'
import { openH3Session } from '../../test/fixtures/h3-pylon.ts'
import type { WtEndpointSession } from '../../test/fixtures/h3-wt-session.ts'
import { readAll } from '../../test/fixtures/h3-wt-session.ts'
import { waitFor } from '../../test/fixtures/wait.ts'

const MiB = 2 ** 20
const TRANSFER_BYTES = 64 * MiB
const CHUNK = Buffer.alloc(256 * 1024, 7)
const SESSIONS = Number(process.env.WT_BENCH_SESSIONS ?? 500)
const ROUNDS = Number(process.env.WT_BENCH_ROUNDS ?? (process.env.BENCH_QUICK === '1' ? 3 : 10))
const PACED = 50
const MESSAGE = Buffer.alloc(1024, 2)
const DOMAIN = 'stargate.external'

const cleanups: Array<() => unknown> = []
const teardown = { teardown: (fn: () => unknown): void => { cleanups.push(fn) } }

const dir = await tempDir(teardown, 'stargate-h3-bench-')
const ca = await createCa({ name: 'bench ca' })
const routerLeaf = await createLeaf(ca, { dnsNames: [`*.${DOMAIN}`] })
await writeFile(join(dir, 'router.crt'), routerLeaf.chainPem)
await writeFile(join(dir, 'router.key'), routerLeaf.keyPem)
await writeFile(join(dir, 'ca.crt'), ca.certPem)
const pods = new Map<string, H3Stargate>()
for (const [name, ip, mode] of [['stargate-sink', '127.0.77.10', 'sink'], ['stargate-echo', '127.0.77.11', 'echo']] as const) {
  const leaf = await createLeaf(ca, { dnsNames: [`${name}.${DOMAIN}`] })
  pods.set(name, H3Stargate.start({ podName: name, ip, certPem: leaf.chainPem, keyPem: leaf.keyPem, mode }))
}
cleanups.push(() => { for (const pod of pods.values()) pod.close() })
await writeFile(join(dir, 'targets.yaml'), 'targets:\n' + [...pods.values()].map((pod) => `  - {identity: ${pod.options.podName}, address: ${pod.ip}, grpcPort: 50051, quicPort: ${pod.port}}`).join('\n') + '\n')
const router = await startProcess(teardown, [
  '--discovery', 'file', '--targets-file', join(dir, 'targets.yaml'),
  '--listen-addr', '127.0.0.1:0', '--health-listen-addr', '127.0.0.1:0', '--reverse-tunnel-listen-addr', '127.0.0.1:0',
  '--tunnel-protocol', 'webtransport', '--log-level', 'info', '--grpc-pylon-dial-addr', GRPC_PYLON_DIAL_ADDR,
  '--tls-cert-path', join(dir, 'router.crt'), '--tls-key-path', join(dir, 'router.key'), '--upstream-tls-cert-path', join(dir, 'ca.crt'),
  '--webtransport-max-sessions', String(SESSIONS * 2), '--connect-timeout-ms', '30000',
])
const listening = await waitFor(() => router.logs().find((l) => typeof l.msg === 'string' && l.msg.startsWith('webtransport tunnel listening')), { timeoutMs: 60_000, message: 'the router listening' })
const port = (listening.udp as { port: number }).port
const rss = (): number => {
  const line = readFileSync(`/proc/${router.child.pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('VmRSS:'))
  return Number(line?.split(/\s+/)[1] ?? NaN) * 1024
}

async function open (pod: string, direct: boolean): Promise<WtEndpointSession> {
  const stargate = pods.get(pod) as H3Stargate
  const result = await openH3Session({ address: direct ? stargate.ip : '127.0.0.1', port: direct ? stargate.port : port, sni: `${pod}.${DOMAIN}`, caPem: ca.certPem, timeoutMs: 60_000 })
  if (result.session === null) throw new Error(`no session to ${pod}: ${result.status} ${result.body} ${result.close?.reasonText ?? ''}`)
  cleanups.push(() => { result.h3?.close() })
  return result.session
}

async function transfer (session: WtEndpointSession): Promise<number> {
  const t0 = now()
  const stream = await session.open(true)
  const answer = readAll(stream)
  for (let sent = 0; sent < TRANSFER_BYTES; sent += CHUNK.length) {
    if (!stream.write(CHUNK)) await new Promise((resolve) => { stream.once('drain', resolve) })
  }
  stream.end()
  const counted = Number((await answer).toString())
  const elapsed = now() - t0
  if (counted !== TRANSFER_BYTES) throw new Error(`the pod counted ${counted} bytes, not ${TRANSFER_BYTES}`)
  return elapsed
}

async function roundTrip (session: WtEndpointSession): Promise<number> {
  const t0 = now()
  const stream = await session.open(true)
  const echoed = readAll(stream)
  stream.end(MESSAGE)
  const got = await echoed
  const elapsed = now() - t0
  if (got.length !== MESSAGE.length) throw new Error(`echo of ${got.length} bytes`)
  return elapsed
}

async function paced (sessions: readonly WtEndpointSession[]): Promise<number[]> {
  const out: number[] = []
  for (let i = 0; i < sessions.length; i += PACED) out.push(...await Promise.all(sessions.slice(i, i + PACED).map(roundTrip)))
  return out
}

const report = new Report('tunnel/webtransport-h3')
try {
  const rssIdle = rss()
  const direct = await open('stargate-sink', true)
  const relayed = await open('stargate-sink', false)
  const throughput = await measureEach({
    direct: () => transfer(direct),
    relayed: () => transfer(relayed),
  }, { samplesPerRound: 2, minRounds: 3, maxRounds: 10, maxSpread: 0.1, warmupMs: 0, maxTimeMs: 180_000 })
  const directCase = report.add({ name: 'HTTP/3: 64 MiB, one stream, engine client to pod direct (baseline)', stats: throughput.direct, unit: 'ms' })
  report.add({
    name: 'HTTP/3: 64 MiB, one stream, through the router',
    stats: throughput.relayed,
    unit: 'ms',
    baseline: directCase.name,
    target: 2 * directCase.median,
    note: `target: at least half the direct throughput; ${(TRANSFER_BYTES / MiB / (throughput.direct.median / 1e9)).toFixed(0)} MiB/s direct, ` +
      `${(TRANSFER_BYTES / MiB / (throughput.relayed.median / 1e9)).toFixed(0)} MiB/s relayed (medians)`,
  })
  const rssAfterTransfers = rss()

  const directSessions: WtEndpointSession[] = []
  const relayedSessions: WtEndpointSession[] = []
  for (let i = 0; i < SESSIONS; i += 25) {
    await Promise.all(Array.from({ length: Math.min(25, SESSIONS - i) }, async () => {
      directSessions.push(await open('stargate-echo', true))
      relayedSessions.push(await open('stargate-echo', false))
    }))
  }
  const rssSessions = rss()
  await paced(directSessions)
  await paced(relayedSessions)
  const rounds = { direct: [] as number[][], relayed: [] as number[][] }
  for (let i = 0; i < ROUNDS; i++) {
    rounds.direct.push(await paced(directSessions))
    rounds.relayed.push(await paced(relayedSessions))
  }
  const d = summarizeRounds(rounds.direct, 0.1)
  const r = summarizeRounds(rounds.relayed, 0.1)
  const base = report.add({ name: `HTTP/3: ${SESSIONS} sessions, ${PACED} sending at a time: 1 KiB echo, direct (baseline)`, stats: d, unit: 'ms' })
  report.add({
    name: `HTTP/3: ${SESSIONS} sessions, ${PACED} sending at a time: 1 KiB echo, through the router`,
    stats: r,
    unit: 'ms',
    baseline: base.name,
    target: d.median / 1e6 + 2,
    note: `target: the router adds ≤ 2 ms at the median; added: median ${((r.median - d.median) / 1e6).toFixed(2)} ms, p99 ${((r.p99 - d.p99) / 1e6).toFixed(2)} ms`,
  })
  const perSession = (rssSessions - rssAfterTransfers) / SESSIONS / 1024
  const one = (kib: number): ReturnType<typeof summarize> => summarize([kib], 1, 0, true)
  const idleCase = report.add({ name: 'HTTP/3: router RSS, idle after start-up', stats: one(rssIdle / 1024), unit: 'KiB' })
  report.add({
    name: `HTTP/3: router RSS, ${SESSIONS} sessions bridged`,
    stats: one(rssSessions / 1024),
    unit: 'KiB',
    baseline: idleCase.name,
    note: `${perSession.toFixed(1)} KiB per bridged session (two QUIC connections, two HTTP/3 sessions); one sample, read from /proc`,
  })
  report.info('sessions', SESSIONS)
  report.info('rounds', ROUNDS)
  report.info('routerKiBPerSession', Number(perSession.toFixed(1)))
  report.info('addedMedianMs', Number(((r.median - d.median) / 1e6).toFixed(2)))
  report.info('addedP99Ms', Number(((r.p99 - d.p99) / 1e6).toFixed(2)))
  console.log(`  router RSS: ${(rssIdle / MiB).toFixed(0)} MiB idle, ${(rssSessions / MiB).toFixed(0)} MiB with ${SESSIONS} sessions (${perSession.toFixed(1)} KiB each)`)
  console.log(`  the router adds ${((r.median - d.median) / 1e6).toFixed(2)} ms at the median, ${((r.p99 - d.p99) / 1e6).toFixed(2)} ms at p99`)
} finally {
  for (const fn of cleanups.reverse()) {
    try {
      await fn()
    } catch {
      // best effort: the process exits next
    }
  }
}
report.finish()
process.exit(0)
