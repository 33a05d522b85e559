/**
 * Benchmark: RegisterInferenceServer forwarding (lib/control-plane/registration-
 * forwarder.ts, upstream-pool.ts, lib/front-door/listener.ts), against the same Stargate
 * reached directly and through nginx `grpc_pass`, every one in its own process:
 *
 *   client ──▶ Stargate (grpc-js, _stargate.ts)                           direct (baseline)
 *   client ──▶ nginx (http2 listener, grpc_pass, 1 worker) ──▶ Stargate
 *   client ──▶ plain node:http2 proxy (_naive-proxy.ts) ──▶ Stargate    node:http2's floor
 *   client ──▶ router (server/main.ts, --discovery file) ──▶ Stargate
 *
 * (a) Latency: one registration stream per path, grpc-js client (raw bytes, so no protobuf
 *     encode in the client) and grpc-js Stargate; one message, wait for its ack, repeat.
 *     After a warm-up, 10 rounds of 500 round trips per path, the paths taking turns round
 *     trip by round trip (the order rotating), so each proxied round trip is paired with a
 *     direct one taken next to it: "added" is the difference within a pair.
 * (b) Throughput: 50 streams ping-ponging for 10 s (BENCH_REG_SECONDS) per run, raw
 *     node:http2 client (_pylon.ts), paths interleaved run by run: round trips/s, and the CPU
 *     time of the proxy's process(es) (/proc utime + stime) per round trip. Two layouts: the
 *     50 streams on one connection (a client multiplexing its calls, as a grpc-js channel
 *     does; the layout the targets apply to), and on 50 connections (50
 *     Pylons), where every message costs its own read and write on the client side.
 * (c) Scale: 5,000 streams (5,000 connections; BENCH_REG_STREAMS), each sending one message
 *     a second, spread evenly, for 30 s per path (paths one after the other): ack latency
 *     (p50, p99), CPU per message, and the proxy's RSS growth per stream (VmRSS with the
 *     streams open minus VmRSS before they connected), which includes each stream's upstream.
 *
 * Targets: added median latency ≤ 20 µs; ≥ 1.2 × nginx round trips/s at ≤ 6 µs CPU
 * per round trip; ≤ 150 KiB RSS per stream. The p99 of (a) is reported, not targeted.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import * as grpc from '@grpc/grpc-js'
import { join } from 'node:path'
import type { ClientHttp2Session } from 'node:http2'
import { measureEach, now, Report, summarize, summarizeRounds, type Stats } from '../_util.ts'
import { CpuMeter, ROOT, rssKiB, spawnNode, startNginx, startRouter, stopAll, tempDir, writeTargetsFile } from '../_children.ts'
import { connect, registrationMessage, RegistrationStream } from './_pylon.ts'
import { REGISTER_INFERENCE_SERVER_PATH } from '../../lib/control-plane/grpc.ts'

const QUICK = process.env.BENCH_QUICK === '1'
const LOAD_SECONDS = Number(process.env.BENCH_REG_SECONDS ?? (QUICK ? 2 : 10))
const LOAD_STREAMS = 50
const LAYOUTS = [1, 50] as const
const SCALE_STREAMS = Number(process.env.BENCH_REG_STREAMS ?? (QUICK ? 500 : 5000))
const SCALE_SECONDS = Number(process.env.BENCH_REG_SCALE_SECONDS ?? (QUICK ? 5 : 30))
const PING_ROUNDS = QUICK ? 2 : 10
const PING_PER_ROUND = QUICK ? 100 : 500

const report = new Report('control-plane/registration')
const dir = tempDir('registration')

const stargate = spawnNode(join(ROOT, 'bench/control-plane/_stargate.ts'), ['127.0.0.1'])
const stargatePort = (await stargate.next<{ port: number }>((v) => typeof v.port === 'number')).port
const nginx = await startNginx(`
  server {
    listen 127.0.0.1:{{port}} http2 backlog=4096;
    http2_max_concurrent_streams 1000;
    keepalive_timeout 3600s;
    client_body_timeout 3600s;
    client_max_body_size 0;
    location / {
      grpc_pass grpc://127.0.0.1:${stargatePort};
      grpc_read_timeout 3600s;
      grpc_send_timeout 3600s;
    }
  }`, { workerConnections: 4 * SCALE_STREAMS + 1000 })
const naive = spawnNode(join(ROOT, 'bench/control-plane/_naive-proxy.ts'), [String(stargatePort)])
const naivePort = (await naive.next<{ port: number }>((v) => typeof v.port === 'number')).port
const router = await startRouter({
  targetsFile: writeTargetsFile(dir, [{ identity: 'stargate-0', address: '127.0.0.1', grpcPort: stargatePort }]),
})
const AUTHORITY = `stargate-0.stargate.external:${router.frontDoorPort}`
const MESSAGE = registrationMessage('pylon-bench-0')
report.info('message', `InferenceServerRegistration of ${MESSAGE.length - 5} B (one model with stats); the ack is ${'stargate-0.stargate.external:50072'.length + 2} B`)

interface Path {
  readonly name: string
  readonly port: number
  readonly authority: string
  /** Processes whose CPU and memory are the path's cost (none for direct). */
  readonly pids: () => readonly number[]
}
const DIRECT: Path = { name: 'direct to the Stargate (baseline)', port: stargatePort, authority: `127.0.0.1:${stargatePort}`, pids: () => [] }
const NGINX: Path = { name: 'nginx grpc_pass', port: nginx.port, authority: `127.0.0.1:${nginx.port}`, pids: () => nginx.pids() }
const NAIVE: Path = { name: 'plain node:http2 proxy', port: naivePort, authority: `127.0.0.1:${naivePort}`, pids: () => [naive.pid] }
const ROUTER: Path = { name: 'router', port: router.frontDoorPort, authority: AUTHORITY, pids: () => [router.pid] }

// --- (a) ping-pong latency over one stream, grpc-js on both ends -------------------------

class PingPong {
  readonly client: grpc.Client
  readonly call: grpc.ClientDuplexStream<Buffer, Buffer>
  #done: (() => void) | null = null

  constructor (path: Path) {
    this.client = new grpc.Client(`127.0.0.1:${path.port}`, grpc.credentials.createInsecure(), {
      'grpc.default_authority': path.authority,
      'grpc.use_local_subchannel_pool': 1,
    })
    this.call = this.client.makeBidiStreamRequest(REGISTER_INFERENCE_SERVER_PATH, (b: Buffer) => b, (b: Buffer) => b, new grpc.Metadata())
    this.call.on('data', () => {
      const done = this.#done
      this.#done = null
      done?.()
    })
    this.call.on('error', (err) => { throw new Error(`${path.name}: ${err.message}`) })
  }

  /** One round trip, in ns. */
  roundTrip (payload: Buffer): Promise<number> {
    return new Promise((resolve) => {
      const t0 = now()
      this.#done = () => { resolve(now() - t0) }
      this.call.write(payload)
    })
  }

  close (): void {
    this.call.end()
    this.client.close()
  }
}

{
  const payload = MESSAGE.subarray(5)
  const paths = [DIRECT, NGINX, NAIVE, ROUTER]
  const streams = paths.map((p) => new PingPong(p))
  for (let i = 0; i < 1000; i++) for (const s of streams) await s.roundTrip(payload)
  const rounds: number[][][] = paths.map(() => [])
  const added: number[][][] = paths.map(() => [])
  for (let r = 0; r < PING_ROUNDS; r++) {
    const round = paths.map(() => [] as number[])
    const pairs = paths.map(() => [] as number[])
    for (let i = 0; i < PING_PER_ROUND; i++) {
      const rt = paths.map(() => 0)
      for (let k = 0; k < paths.length; k++) {
        const at = (i + k) % paths.length
        rt[at] = await (streams[at] as PingPong).roundTrip(payload)
      }
      for (let k = 0; k < paths.length; k++) {
        (round[k] as number[]).push(rt[k] as number)
        ;(pairs[k] as number[]).push((rt[k] as number) - (rt[0] as number))
      }
    }
    for (let k = 0; k < paths.length; k++) {
      (rounds[k] as number[][]).push(round[k] as number[])
      ;(added[k] as number[][]).push(pairs[k] as number[])
    }
  }
  for (const s of streams) s.close()
  report.info('latency', `one stream per path, grpc-js client and Stargate, ${PING_ROUNDS} × ${PING_PER_ROUND} round trips per path after 1,000 of warm-up, paths alternating`)
  const D = `one stream, round trip: ${DIRECT.name}`
  report.add({ name: D, stats: summarizeRounds(rounds[0] as number[][], 0.1), unit: 'µs' })
  for (let k = 1; k < paths.length; k++) {
    report.add({ name: `one stream, round trip: ${(paths[k] as Path).name}`, stats: summarizeRounds(rounds[k] as number[][], 0.1), unit: 'µs', baseline: D })
  }
  const N = `one stream, added to a round trip: ${NGINX.name}`
  report.add({ name: N, stats: summarizeRounds(added[1] as number[][], 0.2), unit: 'µs', note: 'per pair: the proxied round trip minus the direct one taken next to it' })
  report.add({ name: `one stream, added to a round trip: ${NAIVE.name}`, stats: summarizeRounds(added[2] as number[][], 0.2), unit: 'µs', baseline: N })
  report.add({ name: `one stream, added to a round trip: ${ROUTER.name}`, stats: summarizeRounds(added[3] as number[][], 0.2), unit: 'µs', baseline: N, target: 20 })
}

// --- (b) 50 streams ping-ponging ---------------------------------------------------------

interface LoadRun {
  readonly roundTrips: number
  readonly seconds: number
  readonly cpuSeconds: number
  readonly stargateCpuSeconds: number
}

async function pingPongLoad (path: Path, connections: number, seconds: number): Promise<LoadRun> {
  const sessions = await Promise.all(Array.from({ length: connections }, () => connect(path.port)))
  let running = false
  let roundTrips = 0
  const streams = Array.from({ length: LOAD_STREAMS }, (_, i) => sessions[i % connections] as ClientHttp2Session).map((session) => new RegistrationStream(session, {
    authority: path.authority,
    message: MESSAGE,
    onAck: (stream) => {
      if (!running) return
      roundTrips++
      stream.send(0)
    },
    onError: (_stream, err) => { if (running) throw err },
  }))
  // One round trip on each stream first, so every upstream stream exists before the clock starts.
  await Promise.all(streams.map((s) => new Promise<void>((resolve) => { s.stream.once('data', () => { resolve() }); s.send(0) })))
  const cpu = new CpuMeter(path.pids)
  const stargateCpu = new CpuMeter(() => [stargate.pid])
  running = true
  cpu.start()
  stargateCpu.start()
  const t0 = now()
  for (const s of streams) s.send(0)
  await sleep(seconds * 1000)
  running = false
  const counted = roundTrips
  const elapsed = (now() - t0) / 1e9
  const run = { roundTrips: counted, seconds: elapsed, cpuSeconds: cpu.stop(), stargateCpuSeconds: stargateCpu.stop() }
  await sleep(50)
  for (const s of streams) s.close()
  await Promise.all(sessions.map((s) => closeSession(s)))
  return run
}

function closeSession (session: ClientHttp2Session): Promise<void> {
  return new Promise((resolve) => {
    if (session.destroyed) { resolve(); return }
    session.once('close', () => { resolve() })
    session.close()
    setTimeout(() => { session.destroy() }, 2000).unref()
  })
}

for (const connections of LAYOUTS) {
  const paths = [DIRECT, NGINX, NAIVE, ROUTER]
  const cpuPerRoundTrip = new Map<Path, number[]>(paths.map((p) => [p, []]))
  const stargatePerRoundTrip = new Map<Path, number[]>(paths.map((p) => [p, []]))
  const runner = (path: Path): () => Promise<number> => {
    let first = true
    return async () => {
      const warmUp = first
      first = false
      const run = await pingPongLoad(path, connections, warmUp ? Math.min(3, LOAD_SECONDS) : LOAD_SECONDS)
      if (!warmUp) {
        cpuPerRoundTrip.get(path)?.push(run.cpuSeconds * 1e9 / run.roundTrips)
        stargatePerRoundTrip.get(path)?.push(run.stargateCpuSeconds * 1e6 / run.roundTrips)
      }
      return run.roundTrips / run.seconds
    }
  }
  const rates = await measureEach({ direct: runner(DIRECT), nginx: runner(NGINX), naive: runner(NAIVE), router: runner(ROUTER) },
    { samplesPerRound: 1, minRounds: 3, maxRounds: QUICK ? 1 : 4, maxSpread: 0.1, warmupMs: 0, maxTimeMs: 20 * 60_000 })
  const layout = `${LOAD_STREAMS} streams on ${connections === 1 ? 'one connection' : `${connections} connections`}`
  const targeted = connections === 1
  report.info(`load, ${layout}`, `ping-pong, raw node:http2 client, ${LOAD_SECONDS} s per run, paths interleaved`)
  const stargateNote = (p: Path): string => `Stargate CPU ${median(stargatePerRoundTrip.get(p) ?? []).toFixed(1)} µs per round trip`
  const D = `${layout}: ${DIRECT.name}`
  const N = `${layout}: ${NGINX.name}`
  report.add({ name: D, stats: rates.direct, unit: '/s', note: stargateNote(DIRECT) })
  report.add({ name: N, stats: rates.nginx, unit: '/s', baseline: D, note: stargateNote(NGINX) })
  report.add({ name: `${layout}: ${NAIVE.name}`, stats: rates.naive, unit: '/s', baseline: [D, N], note: stargateNote(NAIVE) })
  report.add({
    name: `${layout}: ${ROUTER.name}`,
    stats: rates.router,
    unit: '/s',
    baseline: [D, N],
    ...(targeted ? { target: 1.2 * rates.nginx.median } : {}),
    note: `${targeted ? 'target: 1.2 × nginx in this run; ' : ''}${stargateNote(ROUTER)}`,
  })
  const cpu = (p: Path): Stats => summarizeRounds((cpuPerRoundTrip.get(p) ?? []).map((v) => [v]), 0.1)
  const NC = `${layout}, CPU per round trip: ${NGINX.name}`
  report.add({ name: NC, stats: cpu(NGINX), unit: 'µs' })
  report.add({ name: `${layout}, CPU per round trip: ${NAIVE.name}`, stats: cpu(NAIVE), unit: 'µs', baseline: NC })
  report.add({ name: `${layout}, CPU per round trip: ${ROUTER.name}`, stats: cpu(ROUTER), unit: 'µs', baseline: NC, ...(targeted ? { target: 6 } : {}) })
}

// --- (c) 5,000 streams, one message a second each -----------------------------------------

interface ScaleRun {
  readonly latencies: number[][]
  readonly cpuSeconds: number
  readonly messages: number
  readonly rssPerStreamKiB: number
  readonly rssBeforeKiB: number
  readonly rssAfterKiB: number
  readonly errors: number
}

async function connectAll (port: number, count: number): Promise<ClientHttp2Session[]> {
  const sessions: ClientHttp2Session[] = []
  for (let i = 0; i < count; i += 200) {
    sessions.push(...await Promise.all(Array.from({ length: Math.min(200, count - i) }, () => connect(port))))
  }
  return sessions
}

function rssOf (path: Path): number {
  let sum = 0
  for (const pid of path.pids()) sum += rssKiB(pid)
  return sum
}

async function scaleRun (path: Path): Promise<ScaleRun> {
  const rssBefore = rssOf(path)
  const sessions = await connectAll(path.port, SCALE_STREAMS)
  let recording = false
  let errors = 0
  let round: number[] = []
  const streams = sessions.map((session) => new RegistrationStream(session, {
    authority: path.authority,
    message: MESSAGE,
    onAck: (stream) => { if (recording) round.push(now() - stream.sentAt) },
    onError: () => { errors++ },
  }))
  // Every stream registers once (its upstream stream is opened) before the measured period.
  for (let i = 0; i < streams.length; i += 200) {
    await Promise.all(streams.slice(i, i + 200).map((s) => new Promise<void>((resolve) => { s.stream.once('data', () => { resolve() }); s.send(now()) })))
  }
  // One message a second per stream, spread evenly: 1/100 of the streams every 10 ms. A late
  // timer catches up (sends every slice that is due), so the rate holds on a busy machine.
  const slices = 100
  const perSlice = Math.ceil(streams.length / slices)
  const started = now()
  let sent = 0
  const timer = setInterval(() => {
    const at = now()
    const due = Math.floor((at - started) / (1e9 / slices)) + 1
    for (; sent < due; sent++) {
      const slice = sent % slices
      for (let i = slice * perSlice; i < Math.min(streams.length, (slice + 1) * perSlice); i++) (streams[i] as RegistrationStream).send(at)
    }
  }, 1000 / slices)
  await sleep(2000)
  const cpu = new CpuMeter(path.pids)
  const latencies: number[][] = []
  const rss: number[] = []
  recording = true
  cpu.start()
  for (let s = 0; s < SCALE_SECONDS; s++) {
    await sleep(1000)
    latencies.push(round)
    round = []
    rss.push(rssOf(path))
  }
  recording = false
  const cpuSeconds = cpu.stop()
  clearInterval(timer)
  await sleep(200)
  for (const s of streams) s.close()
  for (let i = 0; i < sessions.length; i += 500) await Promise.all(sessions.slice(i, i + 500).map((s) => closeSession(s)))
  const rssAfter = median(rss)
  return {
    latencies,
    cpuSeconds,
    messages: latencies.reduce((n, r) => n + r.length, 0),
    rssPerStreamKiB: (rssAfter - rssBefore) / SCALE_STREAMS,
    rssBeforeKiB: rssBefore,
    rssAfterKiB: rssAfter,
    errors,
  }
}

{
  const runs = new Map<Path, ScaleRun>()
  for (const path of [DIRECT, NGINX, ROUTER]) {
    console.log(`  ${SCALE_STREAMS} streams: ${path.name}…`)
    runs.set(path, await scaleRun(path))
    await sleep(2000)
  }
  const run = (p: Path): ScaleRun => runs.get(p) as ScaleRun
  report.info('scale', `${SCALE_STREAMS} streams on ${SCALE_STREAMS} connections, one message per stream per second, ${SCALE_SECONDS} s per path, paths one after the other`)
  const perMessage = (p: Path): string => {
    const r = run(p)
    return `${(r.cpuSeconds * 1e6 / r.messages).toFixed(1)} µs CPU per message (${(100 * r.cpuSeconds / SCALE_SECONDS).toFixed(1)} % of a core); RSS ${(r.rssBeforeKiB / 1024).toFixed(0)} → ${(r.rssAfterKiB / 1024).toFixed(0)} MiB${r.errors === 0 ? '' : `; ${r.errors} stream errors`}`
  }
  const D = `${SCALE_STREAMS} streams, ack latency: ${DIRECT.name}`
  report.add({ name: D, stats: summarizeRounds(run(DIRECT).latencies, 0.2), unit: 'ms', note: `${run(DIRECT).messages} acks${run(DIRECT).errors === 0 ? '' : `; ${run(DIRECT).errors} stream errors`}` })
  report.add({ name: `${SCALE_STREAMS} streams, ack latency: ${NGINX.name}`, stats: summarizeRounds(run(NGINX).latencies, 0.2), unit: 'ms', baseline: D, note: perMessage(NGINX) })
  report.add({ name: `${SCALE_STREAMS} streams, ack latency: ${ROUTER.name}`, stats: summarizeRounds(run(ROUTER).latencies, 0.2), unit: 'ms', baseline: D, note: perMessage(ROUTER) })
  const single = (value: number): Stats => summarize([value], 1, 0, true)
  const NR = `${SCALE_STREAMS} streams, RSS per stream: ${NGINX.name}`
  report.add({ name: NR, stats: single(run(NGINX).rssPerStreamKiB), unit: 'KiB', note: 'one figure: RSS with the streams open minus before they connected, over the streams' })
  report.add({ name: `${SCALE_STREAMS} streams, RSS per stream: ${ROUTER.name}`, stats: single(run(ROUTER).rssPerStreamKiB), unit: 'KiB', baseline: NR, target: 150, note: 'includes the stream\'s upstream stream (same process)' })
}

function median (values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted.length === 0 ? NaN : sorted[Math.floor(sorted.length / 2)] as number
}

await stopAll()
report.finish()
