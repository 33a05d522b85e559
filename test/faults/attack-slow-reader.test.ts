// FAILS at 25c8c0e (independent attack run): a client that stops reading a large response
// holds the pod's connection for as long as it likes. The router stops reading the pod when the
// client's socket is full (backpressure, as it should), but no timer runs while it waits:
// --http-idle-timeout-ms ("longest silence on a forwarded request or response body") only
// counts the pod's silence, undici's body timeout is paused with the body, and
// --http-request-timeout-ms is off by default. Ten connections that each asked for a 100 MiB
// answer and never read held ten pod connections for the whole 21 s observed with a 5 s idle
// timeout; at the defaults (25 % client share of 1,024 connections) four addresses hold all of
// a pod's connections, paying nothing but idle TCP connections: the mirror image of the slow
// request bodies SPEC §12 now bounds ("a slow client costs a pod nothing it cannot afford").
// It needs an answer larger than the socket buffers on the way (about 10 MiB on loopback), so
// long LLM answers and bulk endpoints are exposed, small JSON answers are not.
//
// What the test sends: one connection asking for the stub pod's 64 MiB /bulk answer and never
// reading, with --http-idle-timeout-ms 2000; what it checks: within 10 s the router has let go
// of the pod's connection (the request is no longer in flight).
import t from 'tap'
import net from 'node:net'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import { StubLlm } from '../fixtures/stub-llm.ts'
import { probe } from '../fixtures/fault-probe.ts'
import { sleep, waitFor } from '../fixtures/wait.ts'

t.setTimeout(60_000)

const IP = '127.0.1.176'

t.test('a client that never reads a large answer does not keep the pod connection past the idle timeout', async (t) => {
  const llm = await StubLlm.start({ podName: 'stargate-0', ip: IP, tokenIntervalMs: 50 })
  t.teardown(() => { llm.close() })
  const targets = join(await tempDir(t, 'stargate-slow-reader-'), 'targets.yaml')
  await writeFile(targets, `targets:\n  - {identity: stargate-0, address: ${IP}, grpcPort: 50051, quicPort: 50052, httpPort: ${llm.port}}\n`)
  const { frontDoor, health } = await startReadyRouter(t, ['--targets-file', targets, '--http-idle-timeout-ms', '2000'])
  const router = probe(health)
  const socket = net.connect(frontDoor, '127.0.0.1', () => { socket.write('GET /bulk?mb=64 HTTP/1.1\r\nhost: stargate-0.stargate.external\r\n\r\n') })
  socket.on('error', () => {})
  socket.pause()
  t.teardown(() => { socket.destroy() })
  await waitFor(async () => await router.metric('stargate_k8s_router_http_requests_in_flight') === 1, { message: 'the request in flight' })
  await waitFor(() => llm.bulkWritten > 0, { message: 'the pod answering' })
  await sleep(1000)
  const stalledAt = llm.bulkWritten
  t.ok(stalledAt < 64 * 1024 * 1024, `the answer stalled (${Math.round(stalledAt / 1048576)} MiB of 64 written)`)
  const released = await waitFor(async () => await router.metric('stargate_k8s_router_http_requests_in_flight') === 0 && llm.connections === 0, { timeoutMs: 10_000 }).then(() => true, () => false)
  t.ok(released, `the pod connection was let go within 10 s (in flight: ${String(await router.metric('stargate_k8s_router_http_requests_in_flight'))}, pod connections: ${llm.connections})`)
})
