// SPEC §9 and §12: the health port answers probes even when its connection cap is
// reached. 256 idle connections to it (the cap) left /livez unanswered, and the kubelet
// restarted the router: Node's server.maxConnections closed every new connection at accept,
// the probe's among them. Now a new connection is always taken and the oldest idle one is
// closed to make room (lib/health/connection-cap.ts), counted in
// stargate_k8s_router_health_connections_evicted_total. Here 256 connections that never send a
// byte hold the port and are topped up after each probe; probes on fresh connections, as the
// kubelet makes them, are answered, and the connections closed are the oldest ones. (Silent
// ones, because their deadline, the 10 s head timeout, is the longest the port allows; a
// connection kept alive after a request is as idle to the cap: test/unit/health-connection-cap.)
import t from 'tap'
import net from 'node:net'
import { startReadyRouter } from '../fixtures/router-process.ts'
import { getOnce } from '../fixtures/fault-probe.ts'
import { parseMetric } from '../fixtures/kube-router.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(120_000)

/** The health listener's cap (lib/health/server.ts, DEFAULT_HEALTH_LIMITS). */
const CAP = 256
const PROBES = 5

interface Held { readonly socket: net.Socket, closed: boolean }

/** A connection that never sends a byte. */
function hold (port: number): Promise<Held> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1')
    const held: Held = { socket, closed: false }
    socket.on('close', () => { held.closed = true })
    socket.once('connect', () => { resolve(held) })
    socket.once('error', reject)
  })
}

t.test('with 256 idle connections on the health port, probes are answered and the oldest idle ones make room', async (t) => {
  const { health } = await startReadyRouter(t)
  const held: Held[] = []
  t.teardown(() => { for (const h of held) h.socket.destroy() })
  // One at a time, so the accept order is the order of `held`. The head timeout (10 s) would
  // close the silent ones: everything below runs well within it.
  const filling = performance.now()
  for (let i = 0; i < CAP; i++) held.push(await hold(health))
  for (const h of held) h.socket.on('error', () => {})
  t.comment(`${CAP} connections opened in ${(performance.now() - filling).toFixed(0)} ms`)
  // The /readyz connection of start-up (kept alive by fetch) was older still: made room for.
  await new Promise((resolve) => setTimeout(resolve, 200))
  t.equal(held.filter((h) => h.closed).length, 0, `${CAP} connections held open`)

  for (let i = 0; i < PROBES; i++) {
    const started = performance.now()
    const { status } = await getOnce(health, '/livez')
    t.equal(status, 200, `probe ${i + 1} on a fresh connection is answered (${(performance.now() - started).toFixed(0)} ms)`)
    // The probe's connection is gone: the attacker fills the port up again.
    await waitFor(() => held[i]?.closed, { message: `the oldest connection left closed for probe ${i + 1}` })
    held.push(await hold(health))
    held.at(-1)?.socket.on('error', () => {})
  }
  const { body } = await getOnce(health, '/metrics')
  const evicted = parseMetric(body, 'stargate_k8s_router_health_connections_evicted_total', { state: 'idle' }) ?? 0
  // The probes and this scrape each made room once; so may have the start-up /readyz connection.
  t.ok(evicted === PROBES + 1 || evicted === PROBES + 2, `each new connection at the cap closed one idle connection (${evicted})`)
  t.equal(parseMetric(body, 'stargate_k8s_router_health_connections_evicted_total', { state: 'busy' }), 0, 'never one with a request in flight')
  await waitFor(() => held[PROBES]?.closed, { message: 'the connection the scrape made room with closed' })
  const closed = held.map((h) => h.closed)
  t.same(closed.slice(0, PROBES + 1), Array(PROBES + 1).fill(true), 'the closed ones are the oldest')
  t.same(closed.slice(PROBES + 1), Array(held.length - PROBES - 1).fill(false), `the ${held.length - PROBES - 1} newer ones are open`)
})
