/**
 * Benchmark: TLS material hot reload (lib/tls/) as a client sees it on the front
 * door. The router runs in its own process with --front-door-tls --tls-cert-path/--tls-key-path on a
 * projected volume (test/fixtures/projected-volume.ts writes it the way kubelet's atomic
 * writer does: a new generation directory, then a rename of `..data`), with the default
 * directory watcher (debounce --tls-debounce-ms 200) and the default 5-minute poll, so only
 * the watcher can be what picks a change up. Certificates: one CA, a pool of leaves for
 * *.stargate.external (test/fixtures/certs.ts); each swap installs the next leaf.
 *
 * Reload latency: one swap, then back-to-back TLS handshakes on the front door until one
 * presents the new leaf; the sample is from the start of swap() (which writes the new
 * generation, ~1 ms, then renames `..data`) to the end of that handshake.
 *
 * Handshake rate: 8 concurrent client loops doing full handshakes (no resumption) and
 * closing, counted per second, in alternating 5 s phases: quiet, then a reload storm (one
 * swap a second), 60 s of storm in all (20 s with BENCH_QUICK). Every handshake verifies the
 * presented chain against the CA; a failed one is counted.
 *
 * The router's CPU time per phase over the handshakes it completed gives its CPU per
 * handshake, quiet and stormy, which on this shared machine is steadier than the rate; the
 * difference, times the storm's handshakes, over the swaps, is what a reload costs.
 *
 * Targets: reload latency median ≤ 300 ms; handshake rate during the storm within
 * 10 % of the quiet rate, with no failed handshakes.
 */
import tls from 'node:tls'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { measure, now, Report, summarizeRounds } from '../_util.ts'
import { cpuSeconds, startRouter, stopAll, tempDir, writeTargetsFile } from '../_children.ts'
import { createCa, createLeaf, type Leaf } from '../../test/fixtures/certs.ts'
import { ProjectedVolume } from '../../test/fixtures/projected-volume.ts'

const QUICK = process.env.BENCH_QUICK === '1'
const STORM_SECONDS = QUICK ? 20 : 60
const PHASE_SECONDS = 5
const CLIENTS = 8
const SERVERNAME = 'stargate-0.stargate.external'

const report = new Report('tls/reload')
const dir = tempDir('tls-reload')

const ca = await createCa({ name: 'stargate bench CA' })
const leaves: Leaf[] = []
for (let i = 0; i < 6; i++) leaves.push(await createLeaf(ca, { dnsNames: ['*.stargate.external'] }))
const files = (leaf: Leaf): Record<string, string> => ({ 'tls.crt': leaf.chainPem, 'tls.key': leaf.keyPem })
const volume = await ProjectedVolume.create(join(dir, 'tls'), files(leaves[0] as Leaf))
let current = 0
const router = await startRouter({
  targetsFile: writeTargetsFile(dir, [{ identity: 'stargate-0', address: '127.0.0.1', grpcPort: 9 }]),
  args: ['--tls-cert-path', volume.path('tls.crt'), '--tls-key-path', volume.path('tls.key'), '--front-door-tls'],
})
const fingerprints = new Set(leaves.map((l) => l.x509.fingerprint256))

/** One full handshake; resolves with the presented leaf's fingerprint. */
function handshake (): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port: router.frontDoorPort, servername: SERVERNAME, ca: ca.certPem, ALPNProtocols: ['h2'] }, () => {
      const fingerprint = socket.getPeerX509Certificate()?.fingerprint256 ?? ''
      socket.destroy()
      resolve(fingerprint)
    })
    socket.once('error', reject)
  })
}

async function swapToNext (): Promise<string> {
  current = (current + 1) % leaves.length
  const leaf = leaves[current] as Leaf
  await volume.swap(files(leaf))
  return leaf.x509.fingerprint256
}

// --- reload latency ------------------------------------------------------------------------

let swapNs = 0
let handshakesWaited = 0
let swaps = 0
const latency = await measure(async () => {
  await sleep(300)
  swaps++
  const t0 = now()
  const started = now()
  const expected = await swapToNext()
  swapNs += now() - started
  for (;;) {
    handshakesWaited++
    if (await handshake() === expected) return now() - t0
    if (now() - t0 > 10e9) throw new Error('the new certificate was not served within 10 s')
  }
}, { samplesPerRound: QUICK ? 3 : 8, minRounds: 3, maxRounds: QUICK ? 1 : 5, maxSpread: 0.1, warmupMs: 0, maxTimeMs: 120_000 })
report.info('latency', `swap() (new generation written, ..data renamed, links updated) took ${(swapNs / swaps / 1e6).toFixed(1)} ms on average; ${(handshakesWaited / swaps).toFixed(0)} handshakes per sample while waiting`)
report.add({ name: '..data rename → first handshake with the new certificate', stats: latency, unit: 'ms', target: 300, note: 'watcher on, --tls-debounce-ms 200 (default), poll every 5 min (default)' })

// --- handshake rate, quiet and during a reload storm --------------------------------------

let counted = 0
let failed = 0
let unknown = 0
let running = true
async function client (): Promise<void> {
  while (running) {
    try {
      const fingerprint = await handshake()
      if (!fingerprints.has(fingerprint)) unknown++
      counted++
    } catch {
      failed++
    }
  }
}

const quiet: number[][] = []
const storm: number[][] = []
let stormFailures = 0
let quietFailures = 0
// Router CPU per handshake, per phase (ns), and totals for the cost of a reload.
const quietCpu: number[][] = []
const stormCpu: number[][] = []
const totals = { quiet: { cpu: 0, handshakes: 0 }, storm: { cpu: 0, handshakes: 0, swaps: 0 } }
const loops = Array.from({ length: CLIENTS }, () => client())
await sleep(2000) // warm-up
for (let phase = 0; phase < 2 * (STORM_SECONDS / PHASE_SECONDS); phase++) {
  const stormy = phase % 2 === 1
  const rates: number[] = []
  const failedBefore = failed
  const cpu0 = cpuSeconds(router.pid)
  const phase0 = counted
  for (let s = 0; s < PHASE_SECONDS; s++) {
    const t0 = now()
    const c0 = counted
    if (stormy) void swapToNext()
    await sleep(1000)
    rates.push((counted - c0) / ((now() - t0) / 1e9))
  }
  const cpu = cpuSeconds(router.pid) - cpu0
  const handshakes = counted - phase0
  if (stormy) {
    storm.push(rates)
    stormCpu.push([cpu * 1e9 / handshakes])
    stormFailures += failed - failedBefore
    totals.storm.cpu += cpu
    totals.storm.handshakes += handshakes
    totals.storm.swaps += PHASE_SECONDS
  } else {
    quiet.push(rates)
    quietCpu.push([cpu * 1e9 / handshakes])
    quietFailures += failed - failedBefore
    totals.quiet.cpu += cpu
    totals.quiet.handshakes += handshakes
  }
}
running = false
await Promise.all(loops)
report.info('handshakes', `${CLIENTS} client loops, full handshakes (ECDSA P-256 leaf, verified against the CA), counted per second in alternating ${PHASE_SECONDS} s phases; ${STORM_SECONDS} s of storm`)
const QUIET = 'handshakes/s, no reload (baseline)'
const quietStats = summarizeRounds(quiet, 0.2)
report.add({ name: QUIET, stats: quietStats, unit: '/s', note: `${quietFailures} failed handshakes` })
report.add({
  name: 'handshakes/s during a reload storm (one swap a second)',
  stats: summarizeRounds(storm, 0.2),
  unit: '/s',
  baseline: QUIET,
  target: 0.9 * quietStats.median,
  note: `target: within 10 % of the quiet rate in this run; ${stormFailures} failed handshakes${unknown === 0 ? '' : `; ${unknown} presented an unknown certificate`}`,
})

const QUIET_CPU = 'router CPU per handshake, no reload (baseline)'
report.add({ name: QUIET_CPU, stats: summarizeRounds(quietCpu, 0.2), unit: 'µs', note: 'per 5 s phase: the router process\'s CPU time over the handshakes it completed' })
// What a reload costs beyond the handshakes: storm CPU minus the storm's handshakes at the quiet cost, per swap.
const perHandshake = totals.quiet.cpu / totals.quiet.handshakes
const perReloadMs = (totals.storm.cpu - totals.storm.handshakes * perHandshake) * 1000 / totals.storm.swaps
report.add({
  name: 'router CPU per handshake during the storm',
  stats: summarizeRounds(stormCpu, 0.2),
  unit: 'µs',
  baseline: QUIET_CPU,
  note: `the reloads' own cost, spread over the handshakes: about ${perReloadMs.toFixed(1)} ms of router CPU per reload (storm CPU minus its handshakes at the quiet cost, over ${totals.storm.swaps} swaps)`,
})

await stopAll()
report.finish()
