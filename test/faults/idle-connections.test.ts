// Fault suite: 5,000 idle connections (HTTP/1.1 kept alive after a request, and h2c
// sessions that sent only their preface and SETTINGS) held at --front-door-max-connections.
// The router keeps serving, refuses the one over the cap and counts it, its memory grows by a
// bounded amount per connection (docs/configuration.md, memory bound), and after the clients
// leave every descriptor is released. The child gets `ulimit -n 20000` for the headroom.
import t from 'tap'
import net from 'node:net'
import { startReadyRouter } from '../fixtures/router-process.ts'
import { openFds, probe, rssBytes } from '../fixtures/fault-probe.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(240_000)

const H1 = 4000
const H2 = 1000
const CAP = H1 + H2
/** The documented bound for an idle connection's memory (docs/configuration.md). */
const IDLE_BOUND_BYTES = 64 * 1024
const H2_OPENING = Buffer.concat([
  Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'),
  Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]), // SETTINGS, empty
  Buffer.from([0, 0, 0, 4, 1, 0, 0, 0, 0]), // SETTINGS ACK of the router's
])

function openH1 (port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => { socket.write('GET /v1/models HTTP/1.1\r\nhost: llm.example\r\n\r\n') })
    socket.once('data', () => { resolve(socket) }) // answered (503: no pod has an http port), now idle
    socket.once('error', reject)
  })
}

function openH2 (port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => { socket.write(H2_OPENING) })
    socket.once('data', () => { resolve(socket) }) // the router's SETTINGS
    socket.once('error', reject)
  })
}

async function inBatches (count: number, open: () => Promise<net.Socket>, into: net.Socket[]): Promise<void> {
  for (let i = 0; i < count; i += 200) {
    const batch = await Promise.all(Array.from({ length: Math.min(200, count - i) }, open))
    for (const socket of batch) { socket.on('error', () => {}); into.push(socket) }
  }
}

t.test('5,000 idle connections are held within the memory bound, the next is refused, and all are released', async (t) => {
  // Idle timeouts far beyond the test, so nothing closes while the 5,000 are opened on a slow machine.
  const { p, health, frontDoor } = await startReadyRouter(t, ['--front-door-max-connections', String(CAP), '--http-keep-alive-timeout-ms', '600000', '--http2-session-idle-timeout-ms', '600000'], { fdLimit: 20_000 })
  const pid = p.child.pid as number
  const router = probe(health)
  const fdsBefore = await openFds(pid)
  const rssBefore = await rssBytes(pid)
  const sockets: net.Socket[] = []
  t.teardown(() => { for (const s of sockets) s.destroy() })
  const started = Date.now()
  await inBatches(H1, () => openH1(frontDoor), sockets)
  await inBatches(H2, () => openH2(frontDoor), sockets)
  t.comment(`opened ${CAP} connections in ${((Date.now() - started) / 1000).toFixed(1)} s`)
  await waitFor(async () => { const open = await router.metric('stargate_k8s_router_front_door_connections'); return open === CAP ? open : `${open ?? 'no'} open` }, { message: `${CAP} connections open`, timeoutMs: 30_000 })
  const rssHeld = await rssBytes(pid)
  const fdsHeld = await openFds(pid)
  const perConnection = (rssHeld - rssBefore) / CAP
  t.comment(`held ${CAP} idle connections (${H1} HTTP/1.1, ${H2} h2c): ${fdsHeld - fdsBefore} descriptors, RSS ${(rssBefore / 2 ** 20).toFixed(1)} -> ${(rssHeld / 2 ** 20).toFixed(1)} MiB, ${(perConnection / 1024).toFixed(1)} KiB per connection`)
  t.ok(perConnection < IDLE_BOUND_BYTES, `per idle connection ${(perConnection / 1024).toFixed(1)} KiB < the documented ${IDLE_BOUND_BYTES / 1024} KiB`)
  // ±2: the probe connections start-up left kept alive on the health port come and go.
  t.ok(Math.abs(fdsHeld - fdsBefore - CAP) <= 2, `one descriptor per connection (${fdsHeld - fdsBefore} for ${CAP})`)
  t.equal(await router.livez(), 200, 'the router answers probes while full')

  const over = net.connect(frontDoor, '127.0.0.1')
  over.on('error', () => {})
  await new Promise<void>((resolve) => { over.on('close', () => { resolve() }) })
  t.equal(await router.metric('stargate_k8s_router_connections_refused_total', { listener: 'front_door', reason: 'max_connections' }), 1, 'the one over the cap is refused and counted')

  for (const socket of sockets) socket.destroy()
  await waitFor(async () => await router.metric('stargate_k8s_router_front_door_connections') === 0, { message: 'every connection closed', timeoutMs: 30_000 })
  await waitFor(async () => await openFds(pid) <= fdsBefore, { message: `descriptors back to ${fdsBefore}`, timeoutMs: 30_000 })
  t.pass('every descriptor released')
  t.equal(await router.livez(), 200)
})
