/**
 * Benchmark: 1,000 concurrent raw QUIC tunnels (BENCH_QUIC_TUNNELS), each one 4 KiB
 * request per second (echoed; a new stream per request) for BENCH_QUIC_SECONDS (10), staggered
 * over the second, with the stack of the real Pylon and Stargate at both ends (quinn 0.11 +
 * rustls 0.23, no ALPN, quinn's packet sizes; test/fixtures/quinn-peer `bench-tunnels` against
 * `bench-server`): the request latency straight to the quinn server and through the router on
 * the ngtcp2 engine, measured in the same run, alternated (direct, router, direct, router) so a
 * drift of the machine's speed shows as spread rather than as a difference. Targets: the router
 * adds ≤ 2 ms at p50 and ≤ 20 ms at p99. The router pairs each new stream in the addon
 * (lib/quic/native/src/bridge.c); its CPU over the window and RSS with the tunnels up are noted.
 * Processes: the quinn clients (one process), the router (server/main.ts, file discovery), the
 * quinn server; set-up shared with the other quinn benchmarks (_quinn.ts).
 */
import { Report, summarize, type Stats } from '../_util.ts'
import { cpuSeconds, rssKiB, stopAll } from '../_children.ts'
import { quinnTunnels, startQuinnBench, startQuinnRouter, type QuinnTarget, type TunnelsResult } from './_quinn.ts'

const TUNNELS = Number(process.env.BENCH_QUIC_TUNNELS ?? 1000)
const SECONDS = Number(process.env.BENCH_QUIC_SECONDS ?? 10)
const ROUNDS = process.env.BENCH_QUICK === '1' ? 1 : 2
const SNI = 'stargate-0.stargate.external'

const report = new Report('quic/tunnels')
const { peer, stack, tls, server } = await startQuinnBench(report)
report.info('load', `${TUNNELS} tunnels, 1 request/s of 4096 B each for ${SECONDS} s, ${ROUNDS} rounds per case, ${stack} at both ends`)
const router = await startQuinnRouter(tls, server.port, ['--quic-max-connections', String(4 * TUNNELS)])
const direct: QuinnTarget = { connect: `127.0.0.1:${server.port}`, sni: SNI, caPath: tls.caPath }
const relayed: QuinnTarget = { connect: `127.0.0.1:${router.port}`, sni: SNI, caPath: tls.caPath }
const load = { tunnels: TUNNELS, rate: 1, size: 4096, seconds: SECONDS }

const runs: { direct: TunnelsResult[], router: TunnelsResult[] } = { direct: [], router: [] }
const routerCpu: number[] = []
let routerRssMiB = 0
for (let round = 0; round < ROUNDS; round++) {
  runs.direct.push(await quinnTunnels(peer, direct, load))
  const cpuBefore = cpuSeconds(router.pid)
  const sampler = setInterval(() => { routerRssMiB = Math.max(routerRssMiB, rssKiB(router.pid) / 1024) }, 1000)
  runs.router.push(await quinnTunnels(peer, relayed, load))
  clearInterval(sampler)
  routerCpu.push(cpuSeconds(router.pid) - cpuBefore)
}

const latency = (list: readonly TunnelsResult[]): Stats => summarize(list.flatMap((r) => r.latencies_ms.map((ms) => ms * 1e6)), list.length, 0, true)
const failed = (list: readonly TunnelsResult[]): number => list.reduce((n, r) => n + r.failed, 0)
const setUp = (list: readonly TunnelsResult[]): string => list.map((r) => r.connect_seconds.toFixed(2)).join(' / ')
const directStats = latency(runs.direct)
const routerStats = latency(runs.router)
const directName = `${TUNNELS} tunnels × 1 request/s of 4 KiB: quinn → quinn direct, request latency`
report.add({ name: directName, stats: directStats, unit: 'ms', note: `${failed(runs.direct)} failed requests; connections set up in ${setUp(runs.direct)} s` })
const addedP50 = (routerStats.median - directStats.median) / 1e6
const addedP99 = (routerStats.p99 - directStats.p99) / 1e6
const cpuShare = routerCpu.reduce((a, b) => a + b, 0) / routerCpu.length / SECONDS
report.add({
  name: `${TUNNELS} tunnels × 1 request/s of 4 KiB: quinn → router → quinn, request latency`,
  stats: routerStats,
  unit: 'ms',
  baseline: directName,
  target: directStats.median / 1e6 + 2,
  note: `target: the router adds ≤ 2 ms at p50 (added ${addedP50.toFixed(2)} ms: ${addedP50 <= 2 ? 'met' : 'MISS'}) and ≤ 20 ms at p99 (added ${addedP99.toFixed(2)} ms: ${addedP99 <= 20 ? 'met' : 'MISS'}); ` +
    `${failed(runs.router)} failed requests; connections set up in ${setUp(runs.router)} s; router CPU ${(100 * cpuShare).toFixed(0)} % of a core, RSS ${routerRssMiB.toFixed(0)} MiB with ${TUNNELS} tunnels (${2 * TUNNELS} QUIC connections)`,
})
report.info('addedP50Ms', Number(addedP50.toFixed(2)))
report.info('addedP99Ms', Number(addedP99.toFixed(2)))
report.info('routerRssMiB', Number(routerRssMiB.toFixed(0)))
await stopAll()
// The runner's table shows no notes (they go to docs/benchmarks.md): print them here.
const result = report.finish()
for (const c of result.cases) if (c.note !== undefined) console.error(`  ${c.name}: ${c.note}`)
process.exit(0)
