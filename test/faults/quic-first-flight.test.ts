// SPEC §12: a ClientHello split over several Initial datagrams that arrive out of
// order. The router reassembled the hello to read its SNI, but then handed the datagrams to
// ngtcp2 in arrival order, and ngtcp2 refuses a new connection whose first packet does not carry
// CRYPTO offset 0: every order but the sent one got CONNECTION_CLOSE 0x0a PROTOCOL_VIOLATION.
// Chromium's post-quantum ClientHello spans two datagrams, so one reorder on the network broke a
// browser's handshake.
//
// Real clients, each configured as it really is, whose hellos span datagrams go through a proxy
// that reorders the first flight (test/fixtures/quic-flight-proxy.ts): ngtcp2's gtlsclient with
// a finite-field key share (two datagrams, its own ALPN h3), both orders, and after a Retry, an
// HTTP/3 GET to gtlsserver; and Chromium (its own post-quantum hello, two datagrams, sometimes
// three), a WebTransport session, the datagram with the hello's start sent last. The real
// Pylon's quinn + rustls hello, offering no ALPN, fits one datagram, and no real client here
// sends a three-datagram hello on demand: the six orders of three parts are in
// test/integration/quic-engine-first-flight.test.ts, with a real ClientHello cut into Initials
// built by hand. Incomplete flights, and floods of them, are in quic-first-flight-limits.test.ts.
import t from 'tap'
import { createHash } from 'node:crypto'
import { FlightReorderProxy } from '../fixtures/quic-flight-proxy.ts'
import { ngtcp2ExamplesSkip } from '../fixtures/ngtcp2-examples.ts'
import { startGtlsSplitHello } from '../fixtures/gtls-split-hello.ts'
import { H3Cluster } from '../fixtures/h3-cluster.ts'
import { ECHO_SESSION_PAGE, chromiumSkip, echoSession, launchChromium, openPage } from '../fixtures/chromium.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(180_000)

const skipNgtcp2 = await ngtcp2ExamplesSkip()
const skipChromium = await chromiumSkip()

t.test('ngtcp2\'s gtlsclient with a two-datagram ClientHello, in either arrival order: its HTTP/3 GET arrives intact', { skip: skipNgtcp2 }, async (t) => {
  const pod = await startGtlsSplitHello(t, { subnet: '127.0.151', size: 256 * 1024 + 3 })
  const orders = [[0, 1], [1, 0]]
  for (const order of orders) {
    const proxy = await FlightReorderProxy.start(t, { routerPort: pod.cluster.tunnelPort, order })
    const got = await pod.fetch(proxy.port, { idleTimeout: '10s', waitMs: 30_000 })
    t.same(proxy.flights, [2], `the hello took two datagrams, sent to the router in the order ${order.join(', ')}`)
    t.equal(got.code, 0, `gtlsclient exited cleanly (${got.output})`)
    t.ok(got.intact, `the ${pod.size}-byte body arrived intact`)
  }
  await waitFor(async () => await pod.cluster.outcome('completed') === orders.length, { message: 'each tunnel counted as completed' })
  t.equal(await pod.cluster.kube.metric('stargate_k8s_router_quic_handshake_failures_total', { reason: 'protocol' }) ?? 0, 0, 'no handshake failed')
})

// ngtcp2 does not insist on CRYPTO offset 0 first from a client that answered a Retry: this
// covers the held flight of a client with a Retry token.
t.test('with --quic-retry, gtlsclient\'s two-datagram ClientHello is reordered before and after the Retry, and its GET arrives intact', { skip: skipNgtcp2 }, async (t) => {
  const pod = await startGtlsSplitHello(t, { subnet: '127.0.152', size: 64 * 1024 + 3, args: ['--quic-retry'] })
  const proxy = await FlightReorderProxy.start(t, { routerPort: pod.cluster.tunnelPort, order: [1, 0] })
  const got = await pod.fetch(proxy.port, { idleTimeout: '10s', waitMs: 30_000 })
  t.same(proxy.flights, [2, 2], 'both of its first flights took two datagrams, each sent second first')
  t.equal(await pod.cluster.kube.metric('stargate_k8s_router_quic_stateless_packets_total', { type: 'retry' }), 2, 'each datagram of the first flight got a stateless Retry (no state kept)')
  t.equal(got.code, 0, `gtlsclient exited cleanly (${got.output})`)
  t.ok(got.intact, `the ${pod.size}-byte body arrived intact`)
})

t.test('Chromium\'s ClientHello over several datagrams, the one with its start sent last: its WebTransport session opens and echoes', { skip: skipChromium }, async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'] })
  // Chromium's hello takes two datagrams, sometimes three (its padding and GREASE vary), and
  // it scrambles its CRYPTO frames: the datagram with offset 0 is held back until the others went.
  const proxy = await FlightReorderProxy.start(t, { routerPort: cluster.port, order: 'start-last' })
  const browser = await launchChromium(t, [cluster.host('stargate-0')])
  const page = await openPage(t, browser, ECHO_SESSION_PAGE)
  const hash = [...createHash('sha256').update(cluster.routerLeaf.x509.raw).digest()]
  const url = `https://${cluster.host('stargate-0')}:${proxy.port}/_stargate/webtransport`
  const echoed = await echoSession(page, url, hash, 'reordered hello')
  t.ok(proxy.flights.length === 1 && (proxy.flights[0] ?? 0) >= 2, `Chromium's hello took ${proxy.flights.join(', ')} datagrams, the one with its start sent to the router last`)
  t.equal(echoed, 'reordered hello', 'the session opened and the Stargate echoed its stream')
  t.equal(await cluster.metric('accepted'), 1, 'one session accepted')
})
