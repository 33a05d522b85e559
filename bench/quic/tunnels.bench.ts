/**
 * Issue 5 benchmark: 1,000 concurrent raw QUIC tunnels, each doing one 4 KiB request per
 * second (a 4 KiB answer comes back), staggered over the second: the round trip each request
 * takes directly to the Stargate-like peer and through the router, so the difference is what
 * the relay adds; and the router's RSS holding 1,000 tunnels.
 *
 * Processes: the Pylons (one process, 1,000 connections, bench/quic/_peer.ts pylons), the
 * router (server/main.ts, file discovery), the Stargate-like echo peer. The two cases run
 * one after the other (each needs all 1,000 connections for its whole window) twice, in the
 * order direct, relay, direct, relay, so a drift of the machine's speed shows as a spread.
 * BENCH_QUIC_TUNNELS / BENCH_QUIC_SECONDS change the size (for a smoke run).
 */
import { Report, summarize, type Stats } from '../_util.ts'
import { cpuSeconds, rssKiB, stopAll } from '../_children.ts'
import { certificate, startPeer, startQuicRouter } from './_processes.ts'

const TUNNELS = Number(process.env.BENCH_QUIC_TUNNELS ?? 1000)
const SECONDS = Number(process.env.BENCH_QUIC_SECONDS ?? 20)
const SIZE = 4096
const ROUNDS = process.env.BENCH_QUICK === '1' ? 1 : 2

const report = new Report('quic/tunnels')
report.info('tunnels', TUNNELS)
report.info('load', `1 request/s of ${SIZE} B per tunnel for ${SECONDS} s, ${ROUNDS} rounds per case`)

const { certPath, keyPath } = certificate()
const server = startPeer(['server', '127.0.0.1', certPath, keyPath])
const { port: serverPort } = await server.next<{ port: number }>((v) => typeof v.port === 'number')
const router = await startQuicRouter('127.0.0.1', serverPort, ['--quic-max-connections', String(4 * TUNNELS)])

interface Run { rtts: number[], failed: number, routerRss: number, routerCpu: number }

async function run (port: number): Promise<Run> {
  const pylons = startPeer(['pylons', String(port), String(TUNNELS), String(SECONDS), String(SIZE)])
  await pylons.next((v) => typeof v.connected === 'number', 300_000)
  const cpuBefore = cpuSeconds(router.pid)
  let routerRss = 0
  const sampler = setInterval(() => { routerRss = Math.max(routerRss, rssKiB(router.pid) / 1024) }, 1000)
  const result = await pylons.next<{ rttsUs: number[], failed: number }>((v) => Array.isArray(v.rttsUs), 300_000 + SECONDS * 1000)
  clearInterval(sampler)
  await pylons.exited
  return { rtts: result.rttsUs, failed: result.failed, routerRss, routerCpu: cpuSeconds(router.pid) - cpuBefore }
}

const direct: Run[] = []
const relay: Run[] = []
for (let round = 0; round < ROUNDS; round++) {
  direct.push(await run(serverPort))
  relay.push(await run(router.tunnelPort))
}

function stats (runs: readonly Run[]): Stats {
  return summarize(runs.flatMap((r) => r.rtts.map((us) => us * 1000)), runs.length, 0, true)
}
const directStats = stats(direct)
const relayStats = stats(relay)
const failed = (runs: readonly Run[]): number => runs.reduce((n, r) => n + r.failed, 0)
report.add({ name: `direct: ${TUNNELS} connections to the Stargate peer, round trip`, stats: directStats, unit: 'ms', note: `${failed(direct)} failed requests` })
const routerRss = Math.max(...relay.map((r) => r.routerRss))
const routerCpu = relay.reduce((n, r) => n + r.routerCpu, 0) / relay.length / SECONDS
report.add({
  name: `via the relay: ${TUNNELS} tunnels, round trip`,
  stats: relayStats,
  unit: 'ms',
  baseline: `direct: ${TUNNELS} connections to the Stargate peer, round trip`,
  note: `added by the relay: p50 +${((relayStats.median - directStats.median) / 1e6).toFixed(2)} ms, p99 +${((relayStats.p99 - directStats.p99) / 1e6).toFixed(2)} ms; ${failed(relay)} failed requests; router RSS ${routerRss.toFixed(0)} MiB with ${TUNNELS} tunnels (${(2 * TUNNELS)} QUIC connections), router CPU ${(100 * routerCpu).toFixed(0)} % of a core`,
})
report.info('routerRssMiB', routerRss.toFixed(0))
await stopAll()
// The runner's table shows no notes (they go to docs/benchmarks.md): print them here.
const result = report.finish()
for (const c of result.cases) if (c.note !== undefined) console.error(`  ${c.name}: ${c.note}`)
for (const [key, value] of Object.entries(result.info)) console.error(`  ${key}: ${value}`)
process.exit(0)
