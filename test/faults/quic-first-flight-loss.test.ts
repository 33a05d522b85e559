// A ClientHello split over several Initial datagrams, one of which is lost on the way. The router
// holds an incomplete first flight until its hello can be routed; it held it 2 s from the first
// datagram, but a client retransmits on its PTO schedule (RFC 9002, no RTT sample yet: 1 s, then
// 2 s later, then 4 s later for ngtcp2's gtlsclient, which resends one datagram each time, oldest
// first): with the second datagram of gtlsclient's two-datagram hello lost, its bytes came again
// about 3 s after the first, the flight had expired, the retransmissions started a new one with
// another gap, and the handshake never completed (no answer from the router at all). One lost
// datagram on the path was enough.
//
// The router now holds a flight as long as new hello bytes keep coming (the pending timeout
// after the last datagram that brought some, 4 s; a repeat extends nothing), never past the
// handshake timeout (--connect-timeout-ms) from its first datagram. Real clients, each
// configured as it really is, go through a UDP proxy that loses one datagram of the first flight
// once (test/fixtures/quic-flight-proxy.ts), each datagram of it in turn, at the default
// --connect-timeout-ms (5 s): gtlsclient with a finite-field key share (two datagrams, its own
// ALPN h3), an HTTP/3 GET to gtlsserver; and Chromium (its own post-quantum hello, two datagrams,
// sometimes three), a WebTransport session. The real Pylon's quinn + rustls hello, offering no
// ALPN, fits one datagram, so it has no split flight to lose part of. The bounds of a held flight
// (pending timeout, handshake timeout, repeats) are in
// test/integration/quic-engine-first-flight.test.ts; a gap that never fills, and floods, in
// quic-first-flight-limits.test.ts.
import t from 'tap'
import { createHash } from 'node:crypto'
import { FlightLossProxy } from '../fixtures/quic-flight-proxy.ts'
import { ngtcp2ExamplesSkip } from '../fixtures/ngtcp2-examples.ts'
import { startGtlsSplitHello } from '../fixtures/gtls-split-hello.ts'
import { H3Cluster } from '../fixtures/h3-cluster.ts'
import { ECHO_SESSION_PAGE, chromiumSkip, echoSession, launchChromium, openPage } from '../fixtures/chromium.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(240_000)

const skipNgtcp2 = await ngtcp2ExamplesSkip()
const skipChromium = await chromiumSkip()

// The router's default: the cluster fixtures shorten it, and a lost last datagram comes again
// only about 3 s after the rest.
const CONNECT_TIMEOUT = ['--connect-timeout-ms', '5000']

/** `offset+length` as [start, end). */
function span (range: string): [number, number] {
  const [offset, length] = range.split('+').map(Number) as [number, number]
  return [offset, offset + length]
}

/**
 * When bytes of the lost datagram first reached the router again (ms after the first datagram),
 * for the test's message; a client may frame its resent CRYPTO differently (Chromium does).
 */
function recovery (proxy: FlightLossProxy): string {
  const lost = proxy.lost
  if (lost === undefined) return 'nothing lost'
  const overlaps = (range: string): boolean => lost.crypto.some((l) => span(l)[0] < span(range)[1] && span(range)[0] < span(l)[1])
  const again = proxy.seen.find((d) => !d.lost && d.at >= lost.at && d.crypto.some(overlaps))
  return `CRYPTO ${lost.crypto.join(',')} lost at ${lost.at} ms, sent again at ${again === undefined ? 'never' : `${again.at} ms`}`
}

t.test('control: gtlsclient through the same proxy with nothing lost gets its GET', { skip: skipNgtcp2 }, async (t) => {
  const pod = await startGtlsSplitHello(t, { subnet: '127.0.175', size: 64 * 1024 + 3, args: CONNECT_TIMEOUT })
  const proxy = await FlightLossProxy.start(t, { routerPort: pod.cluster.tunnelPort, lose: -1 })
  const got = await pod.fetch(proxy.port, { idleTimeout: '15s', waitMs: 40_000 })
  t.equal(proxy.flight, 2, 'the hello took two datagrams')
  t.equal(proxy.lost, undefined, 'none was lost')
  t.equal(got.code, 0, `gtlsclient exited cleanly (${got.output})`)
  t.ok(got.intact, `the ${pod.size}-byte body arrived intact`)
})

t.test('ngtcp2\'s gtlsclient whose two-datagram ClientHello loses either datagram once: its HTTP/3 GET arrives intact', { skip: skipNgtcp2 }, async (t) => {
  const pod = await startGtlsSplitHello(t, { subnet: '127.0.176', size: 64 * 1024 + 3, args: CONNECT_TIMEOUT })
  for (let lose = 0; lose < 2; lose++) {
    const proxy = await FlightLossProxy.start(t, { routerPort: pod.cluster.tunnelPort, lose })
    const got = await pod.fetch(proxy.port, { idleTimeout: '15s', waitMs: 40_000 })
    t.equal(proxy.flight, 2, 'the hello took two datagrams')
    t.equal(got.code, 0, `datagram ${lose} of 2 lost once: gtlsclient exited ${String(got.code)} after ${got.took} ms (${recovery(proxy)}) ${got.code === 0 ? '' : got.output}`)
    t.ok(got.intact, `the ${pod.size}-byte body arrived intact`)
  }
  await waitFor(async () => await pod.cluster.outcome('completed') === 2, { message: 'both tunnels counted as completed' })
  t.equal(await pod.cluster.kube.metric('stargate_k8s_router_quic_handshake_failures_total', { reason: 'protocol' }) ?? 0, 0, 'no handshake failed')
})

t.test('Chromium\'s ClientHello over several datagrams loses its first or second datagram once: its WebTransport session opens and echoes', { skip: skipChromium }, async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], routerArgs: CONNECT_TIMEOUT })
  const browser = await launchChromium(t, [cluster.host('stargate-0')])
  const page = await openPage(t, browser, ECHO_SESSION_PAGE)
  const hash = [...createHash('sha256').update(cluster.routerLeaf.x509.raw).digest()]
  // Its hello takes two datagrams, sometimes three (its padding and GREASE vary): the first and
  // the second exist either way. Each loss goes through a proxy of its own, so a connection of
  // its own.
  for (let lose = 0; lose < 2; lose++) {
    const proxy = await FlightLossProxy.start(t, { routerPort: cluster.port, lose })
    const url = `https://${cluster.host('stargate-0')}:${proxy.port}/_stargate/webtransport`
    const startedAt = Date.now()
    const echoed = await echoSession(page, url, hash, 'after a loss')
    const took = Date.now() - startedAt
    t.ok(proxy.flight >= 2, `Chromium's hello took ${proxy.flight} datagrams`)
    t.ok(proxy.lost !== undefined, `datagram ${lose} was lost`)
    t.equal(echoed, 'after a loss', `datagram ${lose} of ${proxy.flight} lost once: the session opened after ${took} ms (${recovery(proxy)}) and the Stargate echoed its stream`)
  }
  t.equal(await cluster.metric('accepted'), 2, 'both sessions accepted')
})
