// Issue 14, SPEC §12: the health listener has header, request and idle timeouts and a
// connection cap, like every listener. A client that never finishes its request head is cut
// off; connections over the cap are closed at accept and counted; probes keep working.
import t, { type Test } from 'tap'
import net from 'node:net'
import { Registry } from 'prom-client'
import { HealthServer, type HealthLimits } from '../../lib/health/server.ts'
import { Readiness } from '../../lib/health/readiness.ts'
import { SnapshotStore } from '../../lib/discovery/snapshot-store.ts'
import { waitFor } from '../fixtures/wait.ts'

async function startHealth (t: Test, limits: HealthLimits): Promise<{ port: number, refused: string[], health: HealthServer }> {
  const refused: string[] = []
  const health = new HealthServer({
    host: '127.0.0.1',
    port: 0,
    readiness: new Readiness(),
    registry: new Registry(),
    snapshot: new SnapshotStore(),
    discovery: { stalenessMs: () => 0 },
    limits,
    onRefused: (reason) => { refused.push(reason) },
  })
  const address = await health.listen()
  t.teardown(() => health.close())
  return { port: address.port, refused, health }
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

t.test('connections over the cap are closed at accept and counted', async (t) => {
  const { port, refused, health } = await startHealth(t, { ...LIMITS, headersTimeoutMs: 60_000, requestTimeoutMs: 60_000 })
  const held = [0, 1, 2].map(() => openAndWrite(port, 'GET /livez HTTP/1.1\r\nHost: x\r\n'))
  t.teardown(() => { for (const h of held) h.socket.destroy() })
  await waitFor(async () => await health.connectionCount() === 3, { message: 'three connections accepted' })
  const extra = openAndWrite(port, 'GET /livez HTTP/1.1\r\nHost: x\r\n\r\n')
  t.equal(await extra.closed, '', 'the fourth connection is closed without an answer')
  t.same(refused, ['max_connections'])
  for (const h of held) h.socket.destroy()
  await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/livez`)).status === 200, { message: 'probes work again once under the cap' })
})
