// The WebTransport-over-HTTP/2 listener (TCP on the tunnel port) had neither a TLS handshake
// timeout of its own nor a connection cap: 1,000 clients dripping a ClientHello a byte a second
// kept their sockets for Node's default 120 s, and 19,900 idle connections were all accepted
// until the router held 19,928 of its 20,000 descriptors. Now it takes the front door's
// --tls-handshake-timeout-ms and --front-door-max-connections.
//
// What the test sends: silent connections and a ClientHello dripped a byte every 100 ms to a
// router with a 500 ms handshake timeout and a cap of 8; what it checks: each is closed at the
// timeout and counted as a handshake failure, connections beyond the cap are closed at accept
// and counted, and a WebTransport Pylon still gets its session afterwards.
import t from 'tap'
import net from 'node:net'
import { startWtRouterProcess } from '../fixtures/webtransport-process.ts'
import { openPylonSession } from '../fixtures/webtransport-pylon.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(60_000)

const CAP = 8

/** Opens a TCP connection; resolves with how long it stayed open (ms), once the router closes it. */
function held (port: number, drip: boolean): { closedAfter: Promise<number>, socket: net.Socket } {
  const started = performance.now()
  const socket = net.connect(port, '127.0.0.1')
  socket.on('error', () => {})
  if (drip) {
    // The first bytes of a TLS record holding a ClientHello, a byte at a time.
    const bytes = Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, ...Array(32).fill(7)])
    let i = 0
    const timer = setInterval(() => { if (i < bytes.length && !socket.destroyed) socket.write(bytes.subarray(i, ++i)) }, 100)
    socket.on('close', () => { clearInterval(timer) })
  }
  return { socket, closedAfter: new Promise((resolve) => { socket.on('close', () => { resolve(performance.now() - started) }) }) }
}

t.test('slow handshakes are cut at the timeout and connections beyond the cap are refused, on the WebTransport TCP listener', async (t) => {
  const router = await startWtRouterProcess(t, { pods: ['stargate-0'], args: ['--tls-handshake-timeout-ms', '500', '--front-door-max-connections', String(CAP)] })
  const failuresBefore = await router.metric('stargate_k8s_router_tls_handshake_failures_total', { listener: 'webtransport' }) ?? 0
  const slow = [held(router.tunnelPort, false), held(router.tunnelPort, true), held(router.tunnelPort, true)]
  const times = await Promise.all(slow.map((c) => c.closedAfter))
  t.ok(times.every((ms) => ms >= 400 && ms < 5000), `silent and dripping handshakes closed after ${times.map((ms) => ms.toFixed(0)).join(', ')} ms (timeout 500 ms; Node's default was 120 s)`)
  await waitFor(async () => (await router.metric('stargate_k8s_router_tls_handshake_failures_total', { listener: 'webtransport' }) ?? 0) >= failuresBefore + 3, { message: 'each counted as a handshake failure' })

  // Up to the cap the connections are held (they are mid-handshake, each dripping), the next is closed at accept.
  const within = Array.from({ length: CAP }, () => held(router.tunnelPort, true))
  t.teardown(() => { for (const c of within) c.socket.destroy() })
  await new Promise((resolve) => { setTimeout(resolve, 150) })
  const beyond = held(router.tunnelPort, false)
  t.ok(await beyond.closedAfter < 400, 'the connection beyond the cap is closed at accept, not at the handshake timeout')
  await waitFor(async () => (await router.metric('stargate_k8s_router_connections_refused_total', { listener: 'webtransport', reason: 'max_connections' }) ?? 0) >= 1, { message: 'counted as refused' })
  await Promise.all(within.map((c) => c.closedAfter))

  const session = await openPylonSession(t, router.target('stargate-0'))
  t.equal(session.status, 200, 'a Pylon gets its session afterwards')
  t.equal(router.p.child.exitCode, null, 'the router runs')
})
