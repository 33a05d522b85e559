// SPEC §12: the health listener has header, request and idle timeouts and a
// connection cap, like every listener. A client that never finishes its request head is cut
// off; at the cap a new connection is served and the oldest idle one closed and counted
// (closing the new one at accept refused the kubelet's probes).
import t, { type Test } from 'tap'
import net from 'node:net'
import { Registry } from 'prom-client'
import { HealthServer, type HealthLimits } from '../../lib/health/server.ts'
import { Readiness } from '../../lib/health/readiness.ts'
import { SnapshotStore } from '../../lib/discovery/snapshot-store.ts'
import { waitFor } from '../fixtures/wait.ts'

async function startHealth (t: Test, limits: HealthLimits): Promise<{ port: number, evicted: string[], health: HealthServer }> {
  const evicted: string[] = []
  // Closed for pipelining: counted with the evictions here, as 'pipelining'.
  const health = new HealthServer({
    host: '127.0.0.1',
    port: 0,
    readiness: new Readiness(),
    registry: new Registry(),
    snapshot: new SnapshotStore(),
    discovery: { stalenessMs: () => 0 },
    limits,
    onEvicted: (state) => { evicted.push(state) },
    onPipelining: () => { evicted.push('pipelining') },
  })
  const address = await health.listen()
  t.teardown(() => health.close())
  return { port: address.port, evicted, health }
}

/** Connects and writes bytes; resolves when the router closes the connection, with what it sent. */
function openAndWrite (port: number, bytes: string): { socket: net.Socket, closed: Promise<string> } {
  const socket = net.connect(port, '127.0.0.1', () => { socket.write(bytes) })
  socket.on('error', () => {})
  const closed = new Promise<string>((resolve) => {
    let text = ''
    socket.on('data', (chunk: Buffer) => { text += chunk.toString('latin1') })
    socket.on('close', () => { resolve(text) })
  })
  return { socket, closed }
}

const LIMITS: HealthLimits = { headersTimeoutMs: 300, requestTimeoutMs: 2000, keepAliveTimeoutMs: 300, maxConnections: 3 }

t.test('a request head that never ends is cut off after the headers timeout', async (t) => {
  const { port } = await startHealth(t, LIMITS)
  const partial = openAndWrite(port, 'GET /livez HTTP/1.1\r\nHost: x\r\n')
  t.teardown(() => { partial.socket.destroy() })
  const answer = await partial.closed
  t.match(answer, /^HTTP\/1\.1 408 /, 'answered 408 and closed')
  t.equal((await fetch(`http://127.0.0.1:${port}/livez`)).status, 200, 'probes still work')
})

t.test('an idle keep-alive connection is closed after the keep-alive timeout', async (t) => {
  const { port } = await startHealth(t, LIMITS)
  const idle = openAndWrite(port, 'GET /livez HTTP/1.1\r\nHost: x\r\n\r\n')
  t.teardown(() => { idle.socket.destroy() })
  t.match(await idle.closed, /^HTTP\/1\.1 200 /, 'answered, then closed once idle')
})

t.test('at the cap a new connection is served and the oldest idle one is closed and counted', async (t) => {
  const { port, evicted, health } = await startHealth(t, { ...LIMITS, headersTimeoutMs: 60_000, requestTimeoutMs: 60_000 })
  const held: Array<{ socket: net.Socket, closed: Promise<string> }> = []
  t.teardown(() => { for (const h of held) h.socket.destroy() })
  for (let i = 0; i < 3; i++) {
    held.push(openAndWrite(port, 'GET /livez HTTP/1.1\r\nHost: x\r\n'))
    await waitFor(async () => await health.connectionCount() === i + 1, { message: `connection ${i + 1} accepted` })
  }
  const probe = openAndWrite(port, 'GET /livez HTTP/1.1\r\nHost: x\r\nconnection: close\r\n\r\n')
  t.match(await probe.closed, /^HTTP\/1\.1 200 /, 'the fourth connection is answered')
  t.equal(await held[0]?.closed, '', 'the oldest idle connection was closed to make room')
  t.same(evicted, ['idle'])
  t.equal(await health.connectionCount(), 2, 'the two newer ones are kept')
})

t.test('pipelined requests are answered one after another, in order', async (t) => {
  const { port, evicted } = await startHealth(t, { ...LIMITS, keepAliveTimeoutMs: 2000 })
  const client = openAndWrite(port, 'GET /livez HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\nconnection: close\r\n\r\n')
  t.teardown(() => { client.socket.destroy() })
  const answer = await client.closed
  const statuses = [...answer.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => m[1])
  t.same(statuses, ['200', '200', '200'], 'three answers')
  t.ok(answer.indexOf('\r\n\r\nok\n') < answer.indexOf('\r\n\r\nready\n') && answer.indexOf('\r\n\r\nready\n') < answer.lastIndexOf('HTTP/1.1 200'), 'livez, readyz, metrics, in order')
  t.same(evicted, [], 'nothing closed')
})

t.test('a connection pipelining more than 8 requests behind the one answered is closed and counted', async (t) => {
  const { port, evicted } = await startHealth(t, { ...LIMITS, keepAliveTimeoutMs: 2000 })
  const client = openAndWrite(port, 'GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(10))
  t.teardown(() => { client.socket.destroy() })
  await client.closed
  t.same(evicted, ['pipelining'], 'closed for pipelining')
  t.equal((await fetch(`http://127.0.0.1:${port}/livez`)).status, 200, 'probes still work')
})
