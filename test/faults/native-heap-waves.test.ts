// Waves of TLS connections that close before their handshake: each wave of 9,900 left the
// router's RSS higher (0.74 → 1.37 GiB after eight) with 14 MiB of it allocated: OpenSSL's
// buffers, freed into glibc's arena and never given back, past the chart's 1 GiB limit. The
// router now gives malloc's free pages back once they build up (lib/native-heap-trim.ts).
//
// Three waves of 4,000 idle TCP connections to the TLS front door, each held until the router
// counts them all, then closed by the client: after each wave a trim runs, the RSS it gave back
// is counted, and RSS after the third wave is where the first left it (within 48 MiB).
import t from 'tap'
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import { createCa, createLeaf } from '../fixtures/certs.ts'
import { probe, rssBytes } from '../fixtures/fault-probe.ts'
import { openIdleSockets } from '../fixtures/idle-sockets.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(240_000)

const WAVE = 4000
const WAVES = 3
const MiB = 2 ** 20
const THRESHOLD = 32 * MiB
/** RSS the third wave may leave above the first's. */
const DRIFT_BOUND = 48 * MiB

t.test('waves of TLS connections closed before their handshake leave RSS where the first left it', async (t) => {
  const ca = await createCa({ name: 'waves ca' })
  const leaf = await createLeaf(ca, { dnsNames: ['router.example'] })
  const dir = await tempDir(t, 'stargate-waves-')
  await mkdir(join(dir, 'tls'))
  await writeFile(join(dir, 'tls', 'tls.crt'), leaf.chainPem)
  await writeFile(join(dir, 'tls', 'tls.key'), leaf.keyPem)
  const { p, health, frontDoor } = await startReadyRouter(t, [
    '--front-door-tls', '--tls-cert-path', join(dir, 'tls', 'tls.crt'), '--tls-key-path', join(dir, 'tls', 'tls.key'),
    // Nothing times out while a wave is opened on a slow machine.
    '--tls-handshake-timeout-ms', '600000',
    '--native-heap-check-interval-ms', '500', '--native-heap-trim-threshold-bytes', String(THRESHOLD),
  ], { fdLimit: 20_000 })
  const router = probe(health)
  const pid = p.child.pid as number
  const metric = async (name: string): Promise<number> => await router.metric(`stargate_k8s_router_${name}`) ?? 0
  const after: number[] = []
  for (let wave = 1; wave <= WAVES; wave++) {
    const trimsBefore = await metric('native_heap_trims_total')
    const sockets = await openIdleSockets(frontDoor, WAVE)
    await waitFor(async () => await metric('front_door_connections') === WAVE, { message: `wave ${wave}: the router holds all ${WAVE}`, timeoutMs: 60_000 })
    const held = await rssBytes(pid)
    for (const socket of sockets) socket.destroy()
    await waitFor(async () => await metric('front_door_connections') === 0, { message: `wave ${wave}: every connection closed`, timeoutMs: 60_000 })
    await waitFor(async () => await metric('native_heap_trims_total') > trimsBefore, { message: `wave ${wave}: a trim after the wave`, timeoutMs: 30_000 })
    // Later checks of the same wave may trim what GC frees after the first.
    await new Promise((resolve) => { setTimeout(resolve, 1500) })
    after.push(await rssBytes(pid))
    t.comment(`wave ${wave}: RSS ${Math.round(held / MiB)} MiB while held, ${Math.round(after[wave - 1] as number / MiB)} MiB after; ${await metric('native_heap_trims_total')} trims gave back ${Math.round(await metric('native_heap_released_bytes_total') / MiB)} MiB so far`)
  }
  t.ok(await metric('native_heap_released_bytes_total') >= WAVES * THRESHOLD, 'the trims gave back at least a threshold per wave')
  const drift = (after[WAVES - 1] as number) - (after[0] as number)
  t.ok(drift < DRIFT_BOUND, `RSS after wave ${WAVES} is ${Math.round(drift / MiB)} MiB above wave 1's (bound ${DRIFT_BOUND / MiB} MiB)`)
  const line = p.logs().find((l) => l.msg === 'native heap: free malloc pages given back to the kernel')
  t.match(line, { level: 30, rssBeforeBytes: Number, rssAfterBytes: Number, durationMs: Number }, 'each trim is logged with what it gave back and how long it took')
  t.equal(await router.livez(), 200)
})
