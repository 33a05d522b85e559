// Fault suite: the router runs out of file descriptors (provoked with a low
// `ulimit -n` in the child). libuv accepts and closes what it cannot keep (its reserve-descriptor
// trick), so connections beyond the limit are dropped without an accept error reaching Node;
// every operation that needs a new descriptor fails cleanly: a request whose pod connection
// cannot be opened is a 502, not a crash. Once descriptors free up the router serves again, and
// none leaked. (When the trick's reserve is gone the error does reach the listening server: that
// path is test/integration/front-door-accept-errors.test.ts.)
import t from 'tap'
import net from 'node:net'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import { openFds, probe } from '../fixtures/fault-probe.ts'
import { StubLlm } from '../fixtures/stub-llm.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(120_000)

const FD_LIMIT = 64

/** Sends one request on an open connection and resolves with the status line. */
function ask (socket: net.Socket, path: string): Promise<string> {
  return new Promise((resolve) => {
    let text = ''
    const onData = (chunk: Buffer): void => {
      text += chunk.toString('latin1')
      const end = text.indexOf('\r\n\r\n')
      if (end < 0) return
      const length = Number(/content-length: (\d+)/i.exec(text)?.[1] ?? 0)
      if (text.length < end + 4 + length) return
      socket.off('data', onData)
      resolve(text.slice(0, text.indexOf('\r\n')))
    }
    socket.on('data', onData)
    socket.write(`GET ${path} HTTP/1.1\r\nhost: llm.example\r\n\r\n`)
  })
}

t.test('at the descriptor limit the router keeps running, fails what needs a descriptor cleanly, and recovers without a leak', async (t) => {
  const llm = await StubLlm.start({ podName: 'stargate-0', ip: '127.0.1.81' })
  t.teardown(() => { llm.close() })
  const targets = join(await tempDir(t, 'stargate-targets-'), 'targets.yaml')
  await writeFile(targets, `targets:\n  - {identity: stargate-0, address: 127.0.1.81, grpcPort: 50051, quicPort: 50052, httpPort: ${llm.port}}\n`)
  const { p, health, frontDoor } = await startReadyRouter(t, ['--targets-file', targets], { fdLimit: FD_LIMIT })
  const pid = p.child.pid as number
  const router = probe(health)
  const before = await openFds(pid)

  // A client connection opened first, and the pod connection pool emptied of idle sockets.
  const client = await new Promise<net.Socket>((resolve) => { const s = net.connect(frontDoor, '127.0.0.1', () => { resolve(s) }) })
  t.teardown(() => { client.destroy() })
  t.equal(await ask(client, '/status/200'), 'HTTP/1.1 200 OK', 'served before the limit')

  const held: net.Socket[] = []
  t.teardown(() => { for (const s of held) s.destroy() })
  const fill = async (): Promise<void> => {
    for (let i = 0; i < 8; i++) {
      const socket = net.connect(frontDoor, '127.0.0.1')
      socket.on('error', () => {})
      held.push(socket)
    }
    await new Promise((resolve) => { setTimeout(resolve, 50) })
  }
  await waitFor(async () => { await fill(); return await openFds(pid) >= FD_LIMIT }, { message: 'the router at its descriptor limit', timeoutMs: 30_000 })
  const dropped = net.connect(frontDoor, '127.0.0.1')
  dropped.on('error', () => {})
  await new Promise<void>((resolve) => { dropped.on('close', () => { resolve() }) })
  t.pass('a connection beyond the limit is closed, not kept')

  // A new pod connection needs a descriptor too: the request fails with a 502, the process lives.
  llm.close()
  const restarted = await StubLlm.start({ podName: 'stargate-0', ip: '127.0.1.81', port: llm.port })
  t.teardown(() => { restarted.close() })
  // The pooled pod connection closed and freed a descriptor: take it too.
  await waitFor(async () => { await fill(); return await openFds(pid) >= FD_LIMIT }, { message: 'the router at its limit again', timeoutMs: 30_000 })
  t.match(await ask(client, '/status/200'), /^HTTP\/1\.1 50[23] /, 'a request needing a new pod connection fails cleanly')
  t.equal(p.child.exitCode, null, 'the router is still running')

  for (const socket of held) socket.destroy()
  await waitFor(async () => await router.livez() === 200, { message: '/livez 200 once descriptors are free', timeoutMs: 20_000 })
  t.equal(await ask(client, '/status/200'), 'HTTP/1.1 200 OK', 'served again')
  client.destroy()
  await waitFor(async () => await router.metric('stargate_k8s_router_front_door_connections') === 0, { message: 'every front-door connection closed' })
  await waitFor(async () => await openFds(pid) <= before + 1, { message: `descriptors back to ${before} (+1: the pooled pod connection)` })
  t.pass('no descriptor leaked')
})
