/**
 * What waves of TLS connections that close before their handshake leave in the router's memory
 * (docs/configuration.md, "Connection waves"): a router with TLS on the listener under test,
 * then rounds of `--size` TCP connections that send nothing, held until the router counts them
 * (front door) or `--hold-s`, then closed by the client. After each wave it waits `--settle-s`
 * (longer than the trimmer's interval) and reports RSS while held, its peak after the close
 * (sampled every 200 ms) and at the end of the wait, and the trims so far; at the end, each
 * trim's log line.
 *
 *   npx node scripts/connection-waves.ts [--listener front-door|webtransport] [--waves 8]
 *       [--size 9900] [--hold-s 2] [--settle-s 12] [--trim-threshold-bytes 0]
 *
 * `--trim-threshold-bytes 0` runs the router without trims; left out, the router's default
 * applies. It needs `ulimit -n` above `--size` + 100 in the shell that runs it (the router child
 * gets 20,000).
 */
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { startReadyRouter, tempDir } from '../test/fixtures/router-process.ts'
import { createCa, createLeaf } from '../test/fixtures/certs.ts'
import { probe, rssBytes } from '../test/fixtures/fault-probe.ts'
import { openIdleSockets } from '../test/fixtures/idle-sockets.ts'
import { waitFor } from '../test/fixtures/wait.ts'

const { values: options } = parseArgs({
  options: {
    listener: { type: 'string', default: 'front-door' },
    waves: { type: 'string', default: '8' },
    size: { type: 'string', default: '9900' },
    'hold-s': { type: 'string', default: '2' },
    'settle-s': { type: 'string', default: '12' },
    'trim-threshold-bytes': { type: 'string' },
  },
})
const LISTENER = options.listener
if (LISTENER !== 'front-door' && LISTENER !== 'webtransport') throw new Error('--listener is front-door or webtransport')
const WAVES = Number(options.waves)
const SIZE = Number(options.size)
const HOLD_MS = Number(options['hold-s']) * 1000
const SETTLE_MS = Number(options['settle-s']) * 1000
const MiB = 2 ** 20

const teardowns: Array<() => unknown> = []
const t = { teardown (fn: () => unknown) { teardowns.push(fn) } }

const sleep = (ms: number): Promise<void> => new Promise((resolve) => { setTimeout(resolve, ms) })

try {
  const ca = await createCa({ name: 'waves ca' })
  const leaf = await createLeaf(ca, { dnsNames: ['router.example', '*.stargate.external'] })
  const dir = await tempDir(t, 'stargate-waves-')
  await writeFile(join(dir, 'tls.crt'), leaf.chainPem)
  await writeFile(join(dir, 'tls.key'), leaf.keyPem)
  const args = [
    '--tls-cert-path', join(dir, 'tls.crt'), '--tls-key-path', join(dir, 'tls.key'),
    '--tls-handshake-timeout-ms', '600000',
    ...(LISTENER === 'front-door' ? ['--front-door-tls'] : ['--tunnel-protocol', 'webtransport']),
    ...(options['trim-threshold-bytes'] === undefined ? [] : ['--native-heap-trim-threshold-bytes', options['trim-threshold-bytes']]),
  ]
  const { p, health, frontDoor } = await startReadyRouter(t, args, { fdLimit: 20_000 })
  const port = LISTENER === 'front-door'
    ? frontDoor
    : ((await waitFor(() => p.logs().find((l) => typeof l.msg === 'string' && l.msg.startsWith('webtransport tunnel listening')), { message: 'the webtransport listening log line' })).tcp as { port: number }).port
  const router = probe(health)
  const pid = p.child.pid as number
  const metric = async (name: string): Promise<number> => await router.metric(`stargate_k8s_router_${name}`) ?? 0
  console.log(`router pid ${pid}, ${LISTENER} listener on port ${port}, ${args.slice(4).join(' ')}; ${WAVES} waves of ${SIZE}; idle RSS ${(await rssBytes(pid) / MiB).toFixed(0)} MiB`)
  for (let wave = 1; wave <= WAVES; wave++) {
    const sockets = await openIdleSockets(port, SIZE)
    if (LISTENER === 'front-door') await waitFor(async () => await metric('front_door_connections') === SIZE, { message: `wave ${wave}: the router holds all ${SIZE}`, timeoutMs: 120_000 })
    await sleep(HOLD_MS)
    const held = await rssBytes(pid)
    for (const socket of sockets) socket.destroy()
    // The close is where the wave's peak is (OpenSSL's buffers for each EOF): sampled until the settle ends.
    let peak = held
    for (const end = Date.now() + SETTLE_MS; Date.now() < end; await sleep(200)) peak = Math.max(peak, await rssBytes(pid))
    const after = await rssBytes(pid)
    console.log(`wave ${wave}: RSS ${(held / MiB).toFixed(0)} MiB held, peak ${(peak / MiB).toFixed(0)} MiB after the close, ${(after / MiB).toFixed(0)} MiB ${SETTLE_MS / 1000} s after it; trims so far ${await metric('native_heap_trims_total')}, ${(await metric('native_heap_released_bytes_total') / MiB).toFixed(0)} MiB given back`)
  }
  for (const line of p.logs().filter((l) => l.msg === 'native heap: free malloc pages given back to the kernel')) {
    console.log(`trim: RSS ${((line.rssBeforeBytes as number) / MiB).toFixed(0)} → ${((line.rssAfterBytes as number) / MiB).toFixed(0)} MiB in ${String(line.durationMs)} ms`)
  }
} finally {
  for (const fn of teardowns.reverse()) await fn()
}
