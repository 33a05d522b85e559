/**
 * Baselines: quinn ↔ quinn direct, the stack of the real Pylon and Stargate
 * (test/fixtures/quinn-peer, quinn 0.11 + rustls 0.23, no ALPN, quinn's packet sizes), each peer
 * its own process on loopback. The router's raw QUIC figures are judged against these, as
 * ratios measured in the same run (bench/quic/_quinn.ts points the same clients at the
 * router's tunnel port):
 *
 *   bulk up / down   256 MiB on one stream (BENCH_QUIC_MIB), one fresh connection a sample,
 *                    timed by the client from stream open to the server's count (up) or FIN
 *                    (down). The note gives the server's CPU per GiB received (getrusage in
 *                    the server, over the stream): the yardstick for the router's CPU per
 *                    relayed GiB (target ≤ 2 ×).
 *   handshakes       fresh connections, closed once established: one at a time, and 16 at a
 *                    time (the server's rate; new tunnels through the router ≥ 0.5 × this).
 *   tunnels          1,000 connections (BENCH_QUIC_TUNNELS), each one 4 KiB echoed request per
 *                    second for BENCH_QUIC_SECONDS (10): request latency; the router's added
 *                    p50 ≤ 2 ms and p99 ≤ 20 ms are measured against it.
 */
import { measureEach, Report, summarize, type Stats } from '../_util.ts'
import { stopAll } from '../_children.ts'
import { quinnBulk, quinnHandshakes, quinnTunnels, startQuinnBench, type QuinnTarget } from './_quinn.ts'

const MIB = 2 ** 20
const SIZE_MIB = Number(process.env.BENCH_QUIC_MIB ?? 256)
const TUNNELS = Number(process.env.BENCH_QUIC_TUNNELS ?? 1000)
const SECONDS = Number(process.env.BENCH_QUIC_SECONDS ?? 10)
const SNI = 'stargate-0.stargate.external'

const report = new Report('quic/quinn')
const { peer, stack, tls, server } = await startQuinnBench(report)
const target: QuinnTarget = { connect: `127.0.0.1:${server.port}`, sni: SNI, caPath: tls.caPath }
report.info('transfer', `${SIZE_MIB} MiB on one stream, ${stack} (1200-byte packets, then path-MTU discovery up to 1452)`)

const serverCpuPerGiB: number[] = []
async function bulk (direction: 'up' | 'down'): Promise<number> {
  const received = direction === 'up' ? server.child.next<{ cpu_s: number }>((v) => v.ev === 'bulk_received', 600_000) : null
  const result = await quinnBulk(peer, target, SIZE_MIB * MIB, direction)
  if (received !== null) serverCpuPerGiB.push((await received).cpu_s / (SIZE_MIB / 1024))
  return result.mib_s
}

const measured = await measureEach({
  up: () => bulk('up'),
  down: () => bulk('down'),
  sequential: async () => (await quinnHandshakes(peer, target, 300, 1)).per_second,
  concurrent: async () => (await quinnHandshakes(peer, target, 1000, 16)).per_second,
}, { samplesPerRound: 1, minRounds: 3, maxRounds: 5, maxSpread: 0.1, warmupMs: 0, maxTimeMs: 240_000 })

function must (stats: Stats | undefined): Stats {
  if (stats === undefined) throw new Error('case not measured')
  return stats
}
const cpuPerGiB = summarize(serverCpuPerGiB, serverCpuPerGiB.length, 0, true).median
report.add({ name: 'bulk up: quinn client → quinn server, MiB/s', stats: must(measured.up), unit: '/s', note: `server CPU ${cpuPerGiB.toFixed(2)} s per GiB received (median of ${serverCpuPerGiB.length})` })
report.add({ name: 'bulk down: quinn server → quinn client, MiB/s', stats: must(measured.down), unit: '/s' })
report.add({ name: 'handshakes, one at a time', stats: must(measured.sequential), unit: '/s' })
report.add({ name: 'handshakes, 16 at a time', stats: must(measured.concurrent), unit: '/s', baseline: 'handshakes, one at a time' })
report.info('serverCpuSecondsPerGiB', Number(cpuPerGiB.toFixed(3)))

const load = await quinnTunnels(peer, target, { tunnels: TUNNELS, rate: 1, size: 4096, seconds: SECONDS })
report.add({
  name: `${TUNNELS} tunnels × 1 request/s of 4 KiB, request latency`,
  stats: summarize(load.latencies_ms.map((ms) => ms * 1e6), 1, 0, true),
  unit: 'ms',
  note: `${load.requests} requests, ${load.failed} failed; ${TUNNELS} connections set up in ${load.connect_seconds.toFixed(2)} s; client CPU ${(100 * load.cpu_s / SECONDS).toFixed(0)} % of a core`,
})

await stopAll()
// The runner's table shows no notes (they go to docs/benchmarks.md): print them here.
const result = report.finish()
for (const c of result.cases) if (c.note !== undefined) console.error(`  ${c.name}: ${c.note}`)
process.exit(0)
