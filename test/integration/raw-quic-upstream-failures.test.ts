/**
 * SPEC §7: when the Stargate leg cannot be made or breaks, the Pylon's connection is
 * closed with a reason that says so (never left hanging until its idle timeout), and the
 * tunnel counts as relay_error; a Stargate that closes its tunnel has its code and reason
 * carried to the Pylon.
 */
import t from 'tap'
import { createSocket } from 'node:dgram'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { waitFor } from '../fixtures/wait.ts'

t.test('a Stargate that never answers: the Pylon is told it could not be reached after the connect timeout', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: [], subnet: '127.0.46', args: ['--connect-timeout-ms', '600'] })
  // A bound UDP port that swallows everything: no QUIC answer, no ICMP error either.
  const blackHole = createSocket('udp4')
  await new Promise<void>((resolve) => { blackHole.bind(0, '127.0.46.20', resolve) })
  t.teardown(() => { blackHole.close() })
  let swallowed = 0
  blackHole.on('message', () => { swallowed++ })
  cluster.list('stargate-0', '127.0.46.20', blackHole.address().port, true)
  await cluster.waitForTargets(1)

  const started = Date.now()
  const pylon = await cluster.dial('stargate-0')
  const closed = await pylon.closedWith()
  t.match(closed, { initiator: 'peer', app: true, code: 0, reason: 'stargate stargate-0 could not be reached: connect timeout' })
  t.ok(Date.now() - started < 5000, 'closed soon after the 600 ms connect timeout')
  t.ok(swallowed > 0, 'the router did dial the pod')
  t.equal(await cluster.outcome('relay_error'), 1)
  t.equal(await cluster.kube.metric('stargate_k8s_router_quic_relay_connections_active'), 0)
})

t.test('a Stargate port with nothing listening: the Pylon is told at once', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: [], subnet: '127.0.47', args: ['--connect-timeout-ms', '5000'] })
  const probe = createSocket('udp4')
  await new Promise<void>((resolve) => { probe.bind(0, '127.0.47.20', resolve) })
  const port = probe.address().port
  await new Promise<void>((resolve) => { probe.close(() => { resolve() }) })
  cluster.list('stargate-0', '127.0.47.20', port, true)
  await cluster.waitForTargets(1)

  const started = Date.now()
  const pylon = await cluster.dial('stargate-0')
  const closed = await pylon.closedWith()
  t.match(closed, { initiator: 'peer', app: true, code: 0, reason: /^stargate stargate-0 could not be reached: / })
  t.ok(Date.now() - started < 4000, `closed before the connect timeout (${Date.now() - started} ms)`)
  t.equal(await cluster.outcome('relay_error'), 1)
})

t.test('a Stargate that closes its tunnel mid-transfer: its code and reason reach the Pylon', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.48' })
  const pylon = await cluster.dial('stargate-0')
  await pylon.ready()
  const stream = pylon.openStream(true)
  stream.on('error', () => {})
  const chunk = Buffer.alloc(64 * 1024, 1)
  const writing = setInterval(() => { stream.write(chunk) }, 5)
  t.teardown(() => { clearInterval(writing) })
  const stub = cluster.stubs.get('stargate-0')
  const tunnel = await stub?.tunnel()
  if (tunnel === undefined) throw new Error('no tunnel')
  await waitFor(() => (tunnel.streams[0]?.readableLength ?? 0) > 0 || (tunnel.streams[0]?.writableLength ?? 0) > 0 || tunnel.streams.length > 0)
  tunnel.conn.close(42, 'stargate restarting')
  const closed = await pylon.closedWith()
  clearInterval(writing)
  t.match(closed, { initiator: 'peer', app: true, code: 42, reason: 'stargate restarting' })
  await waitFor(async () => await cluster.outcome('completed') === 1, { message: 'the tunnel counted as completed' })
})

t.test('a Stargate that dies without a word: the Pylon is told the Stargate connection failed', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.49' })
  const pylon = await cluster.dial('stargate-0')
  await pylon.ready()
  const stub = cluster.stubs.get('stargate-0')
  const tunnel = await stub?.tunnel()
  if (tunnel === undefined || stub === undefined) throw new Error('no tunnel')
  stub.kill()
  // The next packet the router sends to the dead pod is refused (ICMP), which ends its leg.
  const stream = pylon.openStream(true)
  stream.on('error', () => {})
  stream.write('hello?')
  const closed = await pylon.closedWith()
  t.match(closed, { initiator: 'peer', app: true, code: 0, reason: /^stargate connection failed: / })
  t.equal(await cluster.outcome('relay_error'), 1)
})

t.test('a Stargate whose certificate the upstream trust does not cover is not relayed to; --quic-insecure relays anyway', async (t) => {
  // No --upstream-tls-cert-path: the trust is the router's own certificate file, which did
  // not issue the pod's certificate.
  const strict = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.67', tlsArgs: async (tls) => ['--tls-cert-path', tls.certPath, '--tls-key-path', tls.keyPath] })
  const refused = await strict.dial('stargate-0')
  t.match(await refused.closedWith(), { initiator: 'peer', app: true, code: 0, reason: /^stargate stargate-0 could not be reached: / }, 'closed: the pod could not be verified')
  t.equal(await strict.outcome('relay_error'), 1)

  const insecure = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.68', tlsArgs: async (tls) => ['--tls-cert-path', tls.certPath, '--tls-key-path', tls.keyPath, '--quic-insecure'] })
  const pylon = await insecure.dial('stargate-0')
  await pylon.ready()
  const tunnel = await insecure.stubs.get('stargate-0')?.tunnel()
  t.ok(tunnel !== undefined, 'with --quic-insecure the pod is reached')
})
