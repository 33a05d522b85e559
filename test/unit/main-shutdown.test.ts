// server/main.ts signals in a child process (SPEC §11): SIGTERM/SIGINT fail /readyz,
// drain and exit 0, as soon as nothing is left open; a second signal exits at once; a signal
// during start-up exits cleanly.
import t from 'tap'
import net from 'node:net'
import { execFile } from 'node:child_process'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { waitFor } from '../fixtures/wait.ts'
import { writeFile } from 'node:fs/promises'
import { GRPC_PYLON_DIAL_ADDR, exitWithin, httpGet, oneTargetFile, startProcess, startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import { holdOpenEnv } from '../fixtures/hold-open.ts'
import { StargateWatchClient } from '../fixtures/stargate-watch-client.ts'

const exec = promisify(execFile)

// Child processes on a small shared machine: allow more than tap's default 30 s per file.
t.setTimeout(240_000)

t.test('a ready router shuts down on SIGTERM or SIGINT with exit 0 and a last "shutdown complete" log line', async (t) => {
  await Promise.all((['SIGTERM', 'SIGINT'] as const).map(async (signal) => {
    const { p, health } = await startReadyRouter(t)
    t.equal((await httpGet(health, '/readyz')).body, 'ready\n', signal)
    p.child.kill(signal)
    t.strictSame(await exitWithin(p, 15_000), { code: 0, signal: null }, signal)
    const logs = p.logs()
    t.match(logs.find((l) => l.msg === 'signal received'), { signal }, `${signal}: logs the signal`)
    t.equal(logs.at(-1)?.msg, 'shutdown complete', signal)
    t.equal(p.stderr(), '', signal)
  }))
})

t.test('with a Watch stream and an idle keep-alive connection open, SIGTERM exits 0 as soon as they are closed, not at the 30 s drain timeout', async (t) => {
  // SPEC §11: the Watch stream ends at once (UNAVAILABLE) and its connection gets GOAWAY, the
  // idle connection is closed at once: nothing is left, so nothing waits for the timeout.
  const { p, frontDoor } = await startReadyRouter(t, ['--shutdown-drain-timeout-ms', '30000'])
  const watch = new StargateWatchClient(`127.0.0.1:${frontDoor}`)
  t.teardown(() => { watch.close() })
  await watch.next()
  const idle = net.connect(frontDoor, '127.0.0.1')
  t.teardown(() => { idle.destroy() })
  idle.on('error', () => {})
  await new Promise((resolve) => { idle.once('connect', resolve) })
  const sentAt = Date.now()
  p.child.kill('SIGTERM')
  t.strictSame(await exitWithin(p, 20_000), { code: 0, signal: null })
  t.ok(Date.now() - sentAt < 20_000, `exited ${Date.now() - sentAt} ms after the SIGTERM`)
  t.match(watch.error, { code: 14, details: 'router is shutting down' }, 'the Watch stream ended UNAVAILABLE')
  const drained = p.logs().find((l) => l.msg === 'shutdown: connections drained')
  t.ok(Number(drained?.elapsedMs) < 5000, `the router's own count: connections gone after ${String(drained?.elapsedMs)} ms`)
})

t.test('a second signal during a long drain exits at once with code 1', async (t) => {
  // A pod that reads a forwarded request and never answers keeps the drain busy (idle
  // connections and partial request heads do not: they are closed at once).
  const pod = net.createServer((socket) => { socket.on('error', () => {}) })
  await new Promise<void>((resolve) => { pod.listen(0, '127.0.1.77', resolve) })
  t.teardown(() => { pod.close() })
  const seen = new Promise<void>((resolve) => { pod.once('connection', () => { resolve() }) })
  const targets = join(await tempDir(t, 'stargate-targets-'), 'targets.yaml')
  await writeFile(targets, `targets:\n  - {identity: stargate-0, address: 127.0.1.77, grpcPort: 50051, quicPort: 50052, httpPort: ${(pod.address() as net.AddressInfo).port}}\n`)
  const { p, health, frontDoor } = await startReadyRouter(t, ['--targets-file', targets, '--shutdown-drain-timeout-ms', '20000'])
  const socket = net.connect(frontDoor, '127.0.0.1')
  t.teardown(() => { socket.destroy() })
  socket.on('error', () => {})
  socket.write('GET /v1/models HTTP/1.1\r\nhost: router\r\n\r\n')
  await seen

  p.child.kill('SIGTERM')
  await waitFor(async () => {
    const readyz = await httpGet(health, '/readyz')
    return readyz.status === 503 && readyz.body === 'not ready: draining: shutting down\n'
  }, { message: '/readyz to report draining' })
  t.equal(p.child.exitCode, null, 'still draining the open request')

  const sentAt = Date.now()
  p.child.kill('SIGTERM')
  t.strictSame(await exitWithin(p, 10_000), { code: 1, signal: null })
  t.ok(Date.now() - sentAt < 10_000, 'exits long before the 20 s drain deadline')
  t.ok(p.logs().some((l) => l.msg === 'second signal: exiting at once'), 'logs why it exits early')
})

t.test('a signal while the router is still starting exits 0 without finishing the start-up, before anything listens', async (t) => {
  // The start-up is held at opening the targets file (test/fixtures/hold-open.ts), however
  // fast or loaded the machine is; the file itself is valid, so a start-up that was not held
  // would listen and fail the test.
  const targets = await oneTargetFile(t)
  await Promise.all((['SIGTERM', 'SIGINT'] as const).map(async (signal) => {
    const p = await startProcess(t, ['--discovery', 'file', '--targets-file', targets, '--grpc-pylon-dial-addr', GRPC_PYLON_DIAL_ADDR,
      '--listen-addr', '127.0.0.1:0', '--health-listen-addr', '127.0.0.1:0', '--reverse-tunnel-listen-addr', '127.0.0.1:0'], holdOpenEnv(targets))
    await waitFor(() => p.logs().some((l) => l.msg === 'starting stargate router'), { timeoutMs: 30_000, message: 'the starting log line' })
    p.child.kill(signal)
    // The handler runs when the event loop turns: on a loaded machine that waits for the
    // router's modules to load (13 s seen at load average 8), so the bound is generous.
    t.strictSame(await exitWithin(p, 60_000), { code: 0, signal: null }, signal)
    const logs = p.logs()
    // Not necessarily the last line: the start-up runs on while the logs are flushed (the TLS
    // set-up's self-signed identity line was seen after it under load).
    t.match(logs.find((l) => l.msg === 'signal received during start-up: exiting'), { signal }, `${signal}: says why it stops`)
    t.notOk(logs.some((l) => l.msg === 'stargate router listening'), `${signal}: never listened`)
    t.equal(p.stderr(), '', signal)
  }))
})

t.test('a FIFO as the targets file is refused without holding the start-up, and SIGTERM still exits 0', async (t) => {
  // open(2) of a FIFO with no writer blocks, holding a libuv thread that process.exit() then
  // waits for, so the router would never exit. Opened O_NONBLOCK and refused as not a regular
  // file, it is one more unreadable targets file.
  const fifo = join(await tempDir(t), 'targets.yaml')
  await exec('mkfifo', [fifo])
  const p = await startProcess(t, ['--discovery', 'file', '--targets-file', fifo, '--grpc-pylon-dial-addr', GRPC_PYLON_DIAL_ADDR,
    '--listen-addr', '127.0.0.1:0', '--health-listen-addr', '127.0.0.1:0', '--reverse-tunnel-listen-addr', '127.0.0.1:0'])
  const listening = await waitFor(() => p.logs().find((l) => l.msg === 'stargate router listening'), { timeoutMs: 60_000, message: 'the listening log line' })
  t.match(p.logs().find((l) => l.msg === 'targets file rejected; keeping the last good targets'), { failure: 'unreadable', detail: `${fifo} is not a regular file (a FIFO)` })
  const readyz = await httpGet((listening.health as { port: number }).port, '/readyz')
  t.equal(readyz.status, 503, 'not ready without targets')
  p.child.kill('SIGTERM')
  t.strictSame(await exitWithin(p, 30_000), { code: 0, signal: null })
  t.equal(p.logs().at(-1)?.msg, 'shutdown complete')
})
