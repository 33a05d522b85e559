// A ClientHello split over several Initial datagrams, one of which is lost on the way. The router
// holds an incomplete first flight until its hello can be routed; it held it 2 s from the first
// datagram, but a client retransmits on its PTO schedule (RFC 9002, no RTT sample yet: 1 s, then
// 2 s later, then 4 s later), oldest datagram first: quinn 0.11 (the real Pylon's stack) resends
// two datagrams each time, ngtcp2's gtlsclient one. With the last datagram of a three-datagram
// quinn hello lost, its bytes came again 3 s after the others: the flight had expired, the
// retransmissions started a new one with another gap, and the handshake never completed (no
// answer from the router at all). gtlsclient's two-datagram hello failed the same way when its
// second datagram was lost. One lost datagram on the path was enough.
//
// The router now holds a flight as long as new hello bytes keep coming (the pending timeout
// after the last datagram that brought some, 4 s; a repeat extends nothing), never past the
// handshake timeout (--connect-timeout-ms) from its first datagram. The clients go through a UDP
// proxy that loses one datagram of the first flight once (test/fixtures/quic-flight-proxy.ts),
// each datagram of it in turn, at the default --connect-timeout-ms (5 s): the quinn Pylon
// offering a long ALPN list (two and three datagrams) relaying to a quinn Stargate, and
// gtlsclient with a finite-field key share (two datagrams), an HTTP/3 GET to gtlsserver. The
// bounds of a held flight (pending timeout, handshake timeout, repeats) are in
// test/integration/quic-engine-first-flight.test.ts; a gap that never fills, and floods, in
// quic-first-flight-limits.test.ts.
import t from 'tap'
import { createHash, randomBytes } from 'node:crypto'
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { FlightLossProxy } from '../fixtures/quic-flight-proxy.ts'
import { QuinnPeer, quinnPeerSkip } from '../fixtures/quinn-peer.ts'
import { GTLS_CLIENT, ngtcp2ExamplesSkip, run, startGtlsServer } from '../fixtures/ngtcp2-examples.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(240_000)

const skipQuinn = await quinnPeerSkip(t)
const skipNgtcp2 = await ngtcp2ExamplesSkip()

// The router's default: the QuicCluster fixture shortens it, and a lost last datagram comes
// again only 3 s after the rest.
const CONNECT_TIMEOUT = ['--connect-timeout-ms', '5000']

/** ALPN offers that make quinn's ClientHello take two or three 1200-byte Initial datagrams. */
function alpnList (count: number): string[] {
  return Array.from({ length: count }, (_, i) => `stargate-tunnel-${String(i).padStart(4, '0')}`)
}
const SPLIT = { 2: alpnList(60), 3: alpnList(130) } as const

/** When the lost datagram's bytes reached the router again (ms after the first datagram), for the test's message. */
function recovery (proxy: FlightLossProxy): string {
  const lost = proxy.lost
  if (lost === undefined) return 'nothing lost'
  const again = proxy.seen.find((d) => !d.lost && d.at >= lost.at && d.crypto.some((range) => lost.crypto.includes(range)))
  return `CRYPTO ${lost.crypto.join(',')} lost at ${lost.at} ms, sent again at ${again === undefined ? 'never' : `${again.at} ms`}`
}

t.test('control: through the same proxy with nothing lost, the handshake completes', { skip: skipQuinn }, async (t) => {
  const cluster = await QuicCluster.start(t, { pods: [], subnet: '127.0.175', args: CONNECT_TIMEOUT })
  await cluster.addQuinnPod('stargate-0', '127.0.175.10', { accept: 'echo', alpn: [SPLIT[3][0] as string] })
  const proxy = await FlightLossProxy.start(t, { routerPort: cluster.tunnelPort, lose: -1 })
  const pylon = await QuinnPeer.client(t, { connect: `127.0.0.1:${proxy.port}`, sni: 'stargate-0.stargate.external', caPath: cluster.tls.caPath, alpn: SPLIT[3] })
  t.equal((await pylon.established(1, 20_000)).alpn, SPLIT[3][0], 'established')
  t.equal(proxy.flight, 3, 'the hello took three datagrams')
  t.equal(proxy.lost, undefined, 'none was lost')
})

t.test('a quinn Pylon whose two- or three-datagram ClientHello loses any one datagram once gets its tunnel', { skip: skipQuinn }, async (t) => {
  const cluster = await QuicCluster.start(t, { pods: [], subnet: '127.0.174', args: CONNECT_TIMEOUT })
  const stargate = await cluster.addQuinnPod('stargate-0', '127.0.174.10', { accept: 'echo', alpn: [SPLIT[3][0] as string] })
  let tunnels = 0
  for (const parts of [2, 3] as const) {
    for (let lose = 0; lose < parts; lose++) {
      const proxy = await FlightLossProxy.start(t, { routerPort: cluster.tunnelPort, lose })
      const pylon = await QuinnPeer.client(t, { connect: `127.0.0.1:${proxy.port}`, sni: 'stargate-0.stargate.external', caPath: cluster.tls.caPath, alpn: SPLIT[parts] })
      const outcome = await pylon.established(1, 20_000).then((e) => `established in ${Math.round(e.handshake_ms)} ms`, (err: Error) => `not established: ${err.message.split('\n')[0] ?? ''}`)
      t.equal(proxy.flight, parts, `the hello took ${parts} datagrams`)
      t.match(outcome, /^established/, `datagram ${lose} of ${parts} lost once: ${outcome} (${recovery(proxy)})`)
      if (!outcome.startsWith('established')) continue
      tunnels++
      const message = `lost ${lose} of ${parts}`
      const stream = await pylon.open(1, 'bi')
      await pylon.write(1, stream, message)
      await pylon.finish(1, stream)
      t.match(await pylon.recvDone(1, stream), { fin: true, sha256: createHash('sha256').update(message).digest('hex') }, 'and the tunnel relays to the Stargate and back')
      await pylon.close(1, 0, 'done')
    }
  }
  t.equal(await cluster.outcome('accepted'), tunnels, 'each tunnel was accepted once')
  t.equal(await cluster.kube.metric('stargate_k8s_router_quic_handshake_failures_total', { reason: 'protocol' }) ?? 0, 0, 'no handshake failed')
  t.equal((await stargate.waitEvents('connected', {}, tunnels)).length, tunnels, 'the Stargate saw each tunnel')
})

t.test('ngtcp2\'s gtlsclient whose two-datagram ClientHello loses either datagram once: its HTTP/3 GET arrives intact', { skip: skipNgtcp2 }, async (t) => {
  // This gtlsclient build sends "localhost" as SNI for an IP (see raw-quic-interop.test.ts):
  // the pod is named localhost under the template {pod_name}.
  const cluster = await QuicCluster.start(t, { pods: [], subnet: '127.0.176', hosts: ['localhost'], args: ['--advertised-hostname-template', '{pod_name}', ...CONNECT_TIMEOUT] })
  const htdocs = join(cluster.tls.dir, 'htdocs')
  await mkdir(htdocs)
  const body = randomBytes(64 * 1024 + 3)
  await writeFile(join(htdocs, 'model.bin'), body)
  await writeFile(join(cluster.tls.dir, 'pod.crt'), cluster.tls.stargate.chainPem)
  await writeFile(join(cluster.tls.dir, 'pod.key'), cluster.tls.stargate.keyPem)
  const server = await startGtlsServer(t, { host: '127.0.176.10', htdocs, keyPath: join(cluster.tls.dir, 'pod.key'), certPath: join(cluster.tls.dir, 'pod.crt') })
  cluster.list('localhost', '127.0.176.10', server.port, true)
  await cluster.waitForTargets(1)

  for (let lose = 0; lose < 2; lose++) {
    const downloads = join(cluster.tls.dir, `downloads-${lose}`)
    await mkdir(downloads)
    const proxy = await FlightLossProxy.start(t, { routerPort: cluster.tunnelPort, lose })
    // An 8192-bit finite-field key share (1,024 bytes) before the X25519 one: GnuTLS sends both,
    // and the hello no longer fits one Initial.
    const startedAt = Date.now()
    const client = run(t, GTLS_CLIENT, [
      '--quiet', '--exit-on-all-streams-close', '--download', downloads, '--timeout', '15s',
      '--groups=-GROUP-ALL:+GROUP-FFDHE8192:+GROUP-X25519',
      'localhost', String(proxy.port), `https://localhost:${proxy.port}/model.bin`,
    ])
    const code = await Promise.race([client.exited, new Promise<'timeout'>((resolve) => { setTimeout(() => { resolve('timeout') }, 40_000).unref() })])
    const took = Date.now() - startedAt
    t.equal(proxy.flight, 2, 'the hello took two datagrams')
    t.equal(code, 0, `datagram ${lose} of 2 lost once: gtlsclient exited ${String(code)} after ${took} ms (${recovery(proxy)}) ${code === 0 ? '' : client.output().slice(-300)}`)
    const downloaded = await readFile(join(downloads, 'model.bin')).catch(() => Buffer.alloc(0))
    t.equal(createHash('sha256').update(downloaded).digest('hex'), createHash('sha256').update(body).digest('hex'), `the ${body.length}-byte body arrived intact`)
  }
  await waitFor(async () => await cluster.outcome('completed') === 2, { message: 'both tunnels counted as completed' })
})
