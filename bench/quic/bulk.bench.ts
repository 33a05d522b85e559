/**
 * Benchmark: bulk transfer on one QUIC stream at 1350-byte packets, the Stargate
 * side sending 256 MiB to the Pylon side (a download, as ngtcp2's HTTP/3 GET below):
 *
 *   direct        engine ↔ engine (lib/quic, the ngtcp2 addon; bench/quic/_peer.ts, two processes)
 *   via the relay engine → router (server/main.ts, its own process) → engine
 *   ngtcp2        Debian's gtlsclient ↔ gtlsserver (ngtcp2 + GnuTLS), logging off: the
 *                 reference for what a C QUIC stack does on this machine
 *
 * Cases are interleaved round by round (bench/_util.ts measureEach). A sample is one 256 MiB
 * transfer on a fresh connection, timed by the receiving peer from request to FIN (the
 * ngtcp2 sample is the client's wall time, including its process start and handshake, a
 * few ms). The figure is MiB/s (a rate: higher is better; ratios are "× the rate of").
 *
 * Then 4 GiB through the relay in one transfer, sampling the router's RSS once a second:
 * it must stay flat (no per-byte growth).
 *
 * Targets: ≥ 60 MiB/s through the relay and relay ≥ 0.5 × direct; a stretch target: the relay
 * ≥ 0.35 × the ngtcp2 reference (its ratio against the relay is in the table). BENCH_QUIC_MIB
 * changes the transfer size (for a smoke run).
 */
import { performance } from 'node:perf_hooks'
import { measureEach, Report, summarize, type Stats } from '../_util.ts'
import { cpuSeconds, rssKiB, spawnChild, stopAll } from '../_children.ts'
import { certificate, hasBinary, startPeer, startQuicRouter } from './_processes.ts'

const MIB = 2 ** 20
const SIZE_MIB = Number(process.env.BENCH_QUIC_MIB ?? 256)
const BYTES = SIZE_MIB * MIB
const LONG_MIB = Number(process.env.BENCH_QUIC_LONG_MIB ?? 4096)
const GTLS_CLIENT = '/usr/bin/gtlsclient'
const GTLS_SERVER = '/usr/sbin/gtlsserver'

const report = new Report('quic/bulk')
report.info('transfer', `${SIZE_MIB} MiB on one stream, 1350-byte packets`)

const { certPath, keyPath } = certificate()
const server = startPeer(['server', '127.0.0.1', certPath, keyPath])
const { port: serverPort } = await server.next<{ port: number }>((v) => typeof v.port === 'number')
const router = await startQuicRouter('127.0.0.1', serverPort)

interface Transfer { bytes: number, ms: number }

async function transfer (port: number, sni: string, bytes: number): Promise<Transfer> {
  const client = startPeer(['bulk', String(port), sni, String(bytes), '1'])
  // At worst a few MiB/s on a loaded machine: allow a second per MiB.
  const result = await client.next<Transfer>((v) => typeof v.ms === 'number', 60_000 + bytes / MIB * 1000)
  await client.exited
  if (result.bytes !== bytes) throw new Error(`received ${result.bytes} of ${bytes} bytes`)
  return result
}

/** MiB/s of one transfer of ms milliseconds. */
const rate = (ms: number): number => SIZE_MIB / (ms / 1000)
const routerCpu = { seconds: 0, transfers: 0 }
const cases: Record<string, () => Promise<number>> = {
  direct: async () => rate((await transfer(serverPort, 'stargate-0.stargate.external', BYTES)).ms),
  relay: async () => {
    const before = cpuSeconds(router.pid)
    const { ms } = await transfer(router.tunnelPort, 'stargate-0.stargate.external', BYTES)
    routerCpu.seconds += cpuSeconds(router.pid) - before
    routerCpu.transfers++
    return rate(ms)
  },
}

const ngtcp2 = hasBinary(GTLS_CLIENT) && hasBinary(GTLS_SERVER)
let gtlsPort = 0
if (ngtcp2) {
  gtlsPort = 40000 + Math.floor(Math.random() * 20000)
  spawnChild(GTLS_SERVER, ['-q', `--max-dyn-length=${BYTES + MIB}`, '127.0.0.1', String(gtlsPort), keyPath, certPath])
  await new Promise((resolve) => { setTimeout(resolve, 300) })
  cases.ngtcp2 = async () => {
    const started = performance.now()
    const client = spawnChild(GTLS_CLIENT, ['-q', '--no-quic-dump', '--no-http-dump', '--exit-on-all-streams-close', 'localhost', String(gtlsPort), `https://localhost/${BYTES}`])
    const code = await client.exited
    if (code !== 0) throw new Error(`gtlsclient exited with ${code}`)
    return rate(performance.now() - started)
  }
} else {
  report.info('ngtcp2', `not measured: ${GTLS_CLIENT} / ${GTLS_SERVER} missing (apt-get install ngtcp2-client ngtcp2-server)`)
}

const measured = await measureEach(cases, { samplesPerRound: 1, minRounds: 3, maxRounds: 5, maxSpread: 0.1, warmupMs: 0, maxTimeMs: 240_000 })
function must (stats: Stats | undefined): Stats {
  if (stats === undefined) throw new Error('case not measured')
  return stats
}
const stats = { direct: must(measured.direct), relay: must(measured.relay), ngtcp2: measured.ngtcp2 }
const UNIT = '/s'
const direct = report.add({ name: 'direct: engine ↔ engine, MiB/s', stats: stats.direct, unit: UNIT })
const relay = report.add({
  name: 'via the relay: engine → router → engine, MiB/s',
  stats: stats.relay,
  unit: UNIT,
  baseline: direct.name,
  target: 60,
  note: `${(stats.relay.median / stats.direct.median).toFixed(2)} × direct (target ≥ 0.5); the router used ${(routerCpu.seconds / Math.max(1, routerCpu.transfers) / SIZE_MIB * 1000).toFixed(1)} ms of CPU per MiB relayed`,
})
if (stats.ngtcp2 !== undefined) {
  report.add({ name: 'ngtcp2: gtlsclient ↔ gtlsserver (reference), MiB/s', stats: stats.ngtcp2, unit: UNIT, baseline: [direct.name, relay.name], note: 'wall time of the client process, including its start and handshake' })
}

// 4 GiB through the relay, one transfer, router RSS sampled every second.
const rss: number[] = []
const sampler = setInterval(() => { rss.push(rssKiB(router.pid) / 1024) }, 1000)
const long = await transfer(router.tunnelPort, 'stargate-0.stargate.external', LONG_MIB * MIB)
clearInterval(sampler)
const settled = rss.slice(Math.min(5, Math.floor(rss.length / 4)))
const first = settled[0] ?? NaN
const peak = Math.max(...settled)
report.add({
  name: `${LONG_MIB / 1024} GiB through the relay in one transfer, MiB/s`,
  stats: summarize([LONG_MIB / (long.ms / 1000)], 1, 0, true),
  unit: UNIT,
  note: `router RSS ${first.toFixed(0)} MiB after warm-up, peak ${peak.toFixed(0)} MiB, end ${(rss.at(-1) ?? NaN).toFixed(0)} MiB (growth ${(peak - first).toFixed(0)} MiB over ${LONG_MIB} MiB)`,
})
report.info('routerRssMiB', rss.map((v) => v.toFixed(0)).join(' '))
await stopAll()
// The runner's table shows no notes (they go to docs/benchmarks.md): print them here.
const result = report.finish()
for (const c of result.cases) if (c.note !== undefined) console.error(`  ${c.name}: ${c.note}`)
for (const [key, value] of Object.entries(result.info)) console.error(`  ${key}: ${value}`)
process.exit(0)
