/**
 * Benchmark: LLM client HTTP forwarding (lib/http-forward/) at saturation, next to
 * the proxies one would otherwise deploy, every one in its own process:
 *
 *   wrk ──▶ upstream                                   direct (the ceiling)
 *   wrk ──▶ nginx proxy_pass (1 worker, upstream keepalive) ──▶ upstream
 *   wrk ──▶ plain undici Pool proxy (_undici-proxy.ts)  ──▶ upstream
 *   wrk ──▶ @fastify/http-proxy (_fastify-proxy.ts)      ──▶ upstream
 *   wrk ──▶ router (server/main.ts, --discovery file)     ──▶ upstream
 *
 * The load: wrk with a Lua script POSTing 1 KiB of JSON, HTTP/1.1 keep-alive, 64 connections,
 * 10 s per run (BENCH_HTTP_SECONDS, BENCH_HTTP_CONNECTIONS, BENCH_WRK_THREADS). The upstream
 * is a plain node:http server answering a small JSON (_upstream.ts). Runs are interleaved,
 * one of each path per round, so a drift of the shared machine hits all paths alike; the
 * first run of each path is a shorter warm-up and is thrown away. Per run: requests/s as
 * wrk reports it, and the CPU time (/proc/<pid>/stat utime + stime) the proxy's process(es)
 * used over the run divided by the requests served: CPU µs per request, which unlike
 * requests/s does not depend on what else the two cores were doing.
 *
 * Then SSE: 1,000 tokens 2 ms apart on two streams of the same upstream timer tick, one
 * direct and one through the router, read at the same time by this process. Every token
 * carries the upstream's monotonic clock at its write (CLOCK_MONOTONIC, shared by all
 * processes), so each token's delay is measured, and the router's added delay per token is
 * its token's delay minus the direct token's of the same tick.
 *
 * Targets: router ≤ 35 µs CPU per request and at least 2 × the requests/s of
 * @fastify/http-proxy; SSE added delay per token, median ≤ 1 ms.
 */
import http from 'node:http'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { measureEach, Report, summarizeRounds, type Stats } from '../_util.ts'
import { CpuMeter, ROOT, runCommand, spawnNode, startNginx, startRouter, stopAll, tempDir, writeTargetsFile, type Child } from '../_children.ts'

const QUICK = process.env.BENCH_QUICK === '1'
const SECONDS = Number(process.env.BENCH_HTTP_SECONDS ?? (QUICK ? 2 : 10))
const WARMUP_SECONDS = Math.min(3, SECONDS)
const CONNECTIONS = Number(process.env.BENCH_HTTP_CONNECTIONS ?? 64)
const THREADS = Number(process.env.BENCH_WRK_THREADS ?? 1)
const SSE_TOKENS = 1000
const SSE_INTERVAL_MS = 2
const SSE_PAIRS = QUICK ? 1 : 5

const report = new Report('http-forward/proxy')
const dir = tempDir('http-forward')

// --- processes --------------------------------------------------------------------------

async function port (child: Child): Promise<number> {
  return (await child.next<{ port: number }>((v) => typeof v.port === 'number')).port
}

const upstream = spawnNode(join(ROOT, 'bench/http-forward/_upstream.ts'), ['127.0.0.1'])
const upstreamPort = await port(upstream)
const origin = `http://127.0.0.1:${upstreamPort}`
const undiciProxy = spawnNode(join(ROOT, 'bench/http-forward/_undici-proxy.ts'), [origin])
const fastifyProxy = spawnNode(join(ROOT, 'bench/http-forward/_fastify-proxy.ts'), [origin])
const nginx = await startNginx(`
  upstream llm { server 127.0.0.1:${upstreamPort}; keepalive 128; }
  server {
    listen 127.0.0.1:{{port}} reuseport;
    keepalive_requests 1000000;
    location / {
      proxy_pass http://llm;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }`)
const router = await startRouter({
  targetsFile: writeTargetsFile(dir, [{ identity: 'stargate-0', address: '127.0.0.1', grpcPort: 9, httpPort: upstreamPort }]),
})
const undiciPort = await port(undiciProxy)
const fastifyPort = await port(fastifyProxy)

// --- wrk --------------------------------------------------------------------------------

const body = (() => {
  const head = '{"model":"bench","stream":false,"messages":[{"role":"user","content":"'
  const tail = '"}]}'
  return head + 'x'.repeat(1024 - head.length - tail.length) + tail
})()
const script = join(dir, 'post.lua')
writeFileSync(script, `wrk.method = "POST"\nwrk.headers["content-type"] = "application/json"\nwrk.body = [[${body}]]\n`)
report.info('load', `wrk -t${THREADS} -c${CONNECTIONS}, POST of ${Buffer.byteLength(body)} B JSON, keep-alive, ${SECONDS} s per run`)

interface WrkRun {
  readonly rps: number
  readonly requests: number
  readonly errors: number
}

async function wrk (port: number, seconds: number): Promise<WrkRun> {
  const { code, stdout, stderr } = await runCommand('wrk', [`-t${THREADS}`, `-c${CONNECTIONS}`, `-d${seconds}s`, '-s', script, `http://127.0.0.1:${port}/v1/chat/completions`])
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(stdout)
  const total = /(\d+) requests in/.exec(stdout)
  if (code !== 0 || rps === null || total === null) throw new Error(`wrk failed (${code}): ${stdout} ${stderr}`)
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(stdout)?.[1] ?? 0)
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(stdout)
  const socketErrors = socket === null ? 0 : socket.slice(1).reduce((sum, n) => sum + Number(n), 0)
  return { rps: Number(rps[1]), requests: Number(total[1]), errors: non2xx + socketErrors }
}

interface Path {
  readonly name: string
  readonly port: number
  /** Processes whose CPU is the path's cost (none for direct). */
  readonly pids: () => readonly number[]
  readonly cpuPerRequestUs: number[]
  readonly upstreamCpuPerRequestUs: number[]
  errors: number
  requests: number
  runs: number
}

function path (name: string, portNumber: number, pids: () => readonly number[]): Path {
  return { name, port: portNumber, pids, cpuPerRequestUs: [], upstreamCpuPerRequestUs: [], errors: 0, requests: 0, runs: 0 }
}

const DIRECT = 'direct to the upstream (baseline)'
const NGINX = 'nginx proxy_pass, 1 worker, upstream keepalive'
const UNDICI = 'plain undici Pool proxy'
const FASTIFY = '@fastify/http-proxy'
const ROUTER = 'router'
const paths = {
  direct: path(DIRECT, upstreamPort, () => []),
  nginx: path(NGINX, nginx.port, () => nginx.pids()),
  undici: path(UNDICI, undiciPort, () => [undiciProxy.pid]),
  fastify: path(FASTIFY, fastifyPort, () => [fastifyProxy.pid]),
  router: path(ROUTER, router.frontDoorPort, () => [router.pid]),
}

function runner (p: Path): () => Promise<number> {
  return async () => {
    const warmUp = p.runs++ === 0
    const cpu = new CpuMeter(p.pids)
    const upstreamCpu = new CpuMeter(() => [upstream.pid])
    cpu.start()
    upstreamCpu.start()
    const run = await wrk(p.port, warmUp ? WARMUP_SECONDS : SECONDS)
    const seconds = cpu.stop()
    const upstreamSeconds = upstreamCpu.stop()
    if (!warmUp) {
      p.cpuPerRequestUs.push(seconds * 1e6 / run.requests)
      p.upstreamCpuPerRequestUs.push(upstreamSeconds * 1e6 / run.requests)
      p.errors += run.errors
      p.requests += run.requests
    }
    return run.rps
  }
}

console.log(`  ${Object.keys(paths).length} paths × ${SECONDS} s per round, interleaved`)
const rates = await measureEach({
  direct: runner(paths.direct),
  nginx: runner(paths.nginx),
  undici: runner(paths.undici),
  fastify: runner(paths.fastify),
  router: runner(paths.router),
}, { samplesPerRound: 1, minRounds: 3, maxRounds: QUICK ? 1 : 5, maxSpread: 0.1, warmupMs: 0, maxTimeMs: 30 * 60_000 })

/** One value per run (a round), in ns, with the spread of the last three runs. */
function cpuStats (p: Path): Stats {
  return summarizeRounds(p.cpuPerRequestUs.map((us) => [us * 1000]), 0.1)
}

const errorNote = (p: Path): string => p.errors === 0 ? '' : `; ${p.errors} non-2xx or socket errors in ${p.requests} requests`
const upstreamNote = (p: Path): string => `upstream CPU ${median(p.upstreamCpuPerRequestUs).toFixed(1)} µs per request`

report.add({ name: `${DIRECT}: requests/s`, stats: rates.direct, unit: '/s', note: upstreamNote(paths.direct) + errorNote(paths.direct) })
report.add({ name: `${NGINX}: requests/s`, stats: rates.nginx, unit: '/s', baseline: `${DIRECT}: requests/s`, note: upstreamNote(paths.nginx) + errorNote(paths.nginx) })
report.add({ name: `${UNDICI}: requests/s`, stats: rates.undici, unit: '/s', baseline: `${NGINX}: requests/s`, note: upstreamNote(paths.undici) + errorNote(paths.undici) })
report.add({ name: `${FASTIFY}: requests/s`, stats: rates.fastify, unit: '/s', baseline: `${NGINX}: requests/s`, note: upstreamNote(paths.fastify) + errorNote(paths.fastify) })
const fastifyMedian = rates.fastify.median
report.add({
  name: `${ROUTER}: requests/s`,
  stats: rates.router,
  unit: '/s',
  baseline: [`${NGINX}: requests/s`, `${FASTIFY}: requests/s`],
  target: 2 * fastifyMedian,
  note: `target: 2 × @fastify/http-proxy in this run; ${upstreamNote(paths.router)}${errorNote(paths.router)}`,
})
const cpuRows = [paths.nginx, paths.undici, paths.fastify]
for (const p of cpuRows) {
  report.add({ name: `${p.name}: CPU per request`, stats: cpuStats(p), unit: 'µs', ...(p === paths.nginx ? {} : { baseline: `${NGINX}: CPU per request` }) })
}
report.add({
  name: `${ROUTER}: CPU per request`,
  stats: cpuStats(paths.router),
  unit: 'µs',
  baseline: [`${NGINX}: CPU per request`, `${FASTIFY}: CPU per request`],
  target: 35,
})

function median (values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted.length === 0 ? NaN : sorted[Math.floor(sorted.length / 2)] as number
}

// --- SSE --------------------------------------------------------------------------------

/** Opens an SSE stream and records, per token index, arrival minus send time (ns). */
function sseStream (portNumber: number, group: string): Promise<number[]> {
  return new Promise((resolve, reject) => {
    const delays: number[] = []
    const req = http.get({ host: '127.0.0.1', port: portNumber, path: `/sse-pair?group=${group}&members=2&tokens=${SSE_TOKENS}&interval=${SSE_INTERVAL_MS}`, agent: false }, (res) => {
      let buffered = ''
      res.setEncoding('latin1')
      res.on('data', (chunk: string) => {
        const arrived = process.hrtime.bigint()
        buffered += chunk
        let end: number
        while ((end = buffered.indexOf('\n\n')) >= 0) {
          const event = buffered.slice(0, end)
          buffered = buffered.slice(end + 2)
          const at = event.indexOf('"t":"')
          if (at < 0) continue
          const index = Number(event.slice(event.indexOf('"index":') + 8, event.indexOf(',', event.indexOf('"index":'))))
          const sent = BigInt(event.slice(at + 5, event.indexOf('"', at + 5)))
          delays[index] = Number(arrived - sent)
        }
      })
      res.on('end', () => { resolve(delays) })
      res.on('error', reject)
    })
    req.on('error', reject)
  })
}

const directDelays: number[][] = []
const routerDelays: number[][] = []
const addedDelays: number[][] = []
for (let pair = 0; pair < SSE_PAIRS + 1; pair++) {
  const group = `pair-${pair}`
  const [direct, routed] = await Promise.all([sseStream(upstreamPort, group), sseStream(router.frontDoorPort, group)])
  if (direct.length !== SSE_TOKENS || routed.length !== SSE_TOKENS) throw new Error(`sse: got ${direct.length} direct and ${routed.length} routed tokens of ${SSE_TOKENS}`)
  if (pair === 0) continue // warm-up
  directDelays.push(direct)
  routerDelays.push(routed)
  addedDelays.push(routed.map((d, i) => d - (direct[i] as number)))
}
report.info('sse', `${SSE_PAIRS} pairs of streams × ${SSE_TOKENS} tokens, ${SSE_INTERVAL_MS} ms apart`)
const SSE_DIRECT = 'SSE token delay, direct (baseline)'
report.add({ name: SSE_DIRECT, stats: summarizeRounds(directDelays, 0.2), unit: 'ms' })
report.add({ name: 'SSE token delay, through the router', stats: summarizeRounds(routerDelays, 0.2), unit: 'ms', baseline: SSE_DIRECT })
report.add({
  name: 'SSE delay added per token by the router (paired with the direct token of the same tick)',
  stats: summarizeRounds(addedDelays, 0.2),
  unit: 'ms',
  target: 1,
})

await stopAll()
report.finish()
