/**
 * A real browser through the router. Chromium's WebTransport (the most widely
 * deployed implementation; draft-02 by default) opens a session from a page on localhost
 * through the router's UDP tunnel port to a Stargate fixture, echoes on bidi streams opened by
 * each side, sends uni streams both ways and datagrams both ways, and closes with a code and
 * reason that the Stargate sees. Chromium sends a GREASE capsule and SETTINGS the router must
 * ignore, and drops its connection after the session without a CONNECTION_CLOSE.
 */
import t from 'tap'
import { createHash } from 'node:crypto'
import { H3Cluster } from '../fixtures/h3-cluster.ts'
import { chromiumSkip, launchChromium, openPage } from '../fixtures/chromium.ts'
import { endWith, readAll } from '../fixtures/h3-wt-session.ts'
import { waitFor } from '../fixtures/wait.ts'

const skip = await chromiumSkip()

// The page's side: everything through WebTransport, results reported back to the test.
const PAGE = `
async function readText (readable) {
  const reader = readable.getReader(); let text = ''
  for (;;) { const { value, done } = await reader.read(); if (done) return text; text += new TextDecoder().decode(value) }
}
async function session (url, hash) {
  const log = {}
  const wt = new WebTransport(url, { serverCertificateHashes: [{ algorithm: 'sha-256', value: new Uint8Array(hash) }] })
  await wt.ready
  log.ready = true
  // Bidi streams the Stargate opens: echoed back.
  const echoIncoming = (async () => {
    const reader = wt.incomingBidirectionalStreams.getReader()
    const { value } = await reader.read()
    const text = await readText(value.readable)
    const writer = value.writable.getWriter(); await writer.write(new TextEncoder().encode(text)); await writer.close()
    log.podBidi = text
  })()
  // A bidi stream of ours, echoed by the Stargate.
  const bidi = await wt.createBidirectionalStream()
  const w = bidi.writable.getWriter(); await w.write(new TextEncoder().encode('bidi from chromium')); await w.close()
  log.bidiEcho = await readText(bidi.readable)
  // Uni both ways.
  const uni = await wt.createUnidirectionalStream()
  const uw = uni.getWriter(); await uw.write(new TextEncoder().encode('uni from chromium')); await uw.close()
  const unis = wt.incomingUnidirectionalStreams.getReader()
  log.podUni = await readText((await unis.read()).value)
  // Datagrams both ways (lossy by nature: retried until one answer comes).
  const dw = wt.datagrams.writable.getWriter(); const dr = wt.datagrams.readable.getReader()
  for (let i = 0; i < 20 && log.datagram === undefined; i++) {
    await dw.write(new TextEncoder().encode('datagram ' + i))
    const got = await Promise.race([dr.read(), new Promise((r) => setTimeout(() => r(null), 250))])
    if (got !== null) log.datagram = new TextDecoder().decode(got.value)
  }
  await echoIncoming
  // Closing a session abandons its streams (bytes not yet sent included): wait until the
  // Stargate says it has everything.
  log.go = await readText((await unis.read()).value)
  wt.close({ closeCode: 4242, reason: 'bye from chromium' })
  await wt.closed
  log.closed = true
  return log
}`

t.test('Chromium opens a WebTransport session through the router and uses every part of it', { skip }, async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' } })
  const pod = cluster.pods.get('stargate-0')!
  const browser = await launchChromium(t, [cluster.host('stargate-0')])
  const page = await openPage(t, browser, PAGE)
  const hash = [...createHash('sha256').update(cluster.routerLeaf.x509.raw).digest()]
  const url = `https://${cluster.host('stargate-0')}:${cluster.port}/_stargate/webtransport`
  const inPage = page.evaluate(([u, h]) => (globalThis as unknown as { session: (u: string, h: number[]) => Promise<Record<string, unknown>> }).session(u as string, h as number[]), [url, hash] as const)

  const atPod = await pod.nextSession(20_000)
  if (atPod === null) return t.fail(`no session reached the pod: ${JSON.stringify(await inPage.catch((e: Error) => e.message))}`)
  t.match(pod.requests[0]?.fields, [[':method', 'CONNECT'], [':protocol', 'webtransport'], [':scheme', 'https'], [':authority', `${cluster.host('stargate-0')}:${cluster.port}`], [':path', '/_stargate/webtransport']], 'Chromium\'s CONNECT, copied to the pod')
  t.ok(pod.requests[0]?.fields.some(([name, value]) => name === 'sec-webtransport-http3-draft02' && value === '1'), 'with Chromium\'s own fields')
  // The pod's side of the exchange.
  const podBidi = await atPod.open(true)
  // Caught at once: a failure is reported below with what the page saw, not as an unhandled rejection.
  const podBidiEcho = readAll(podBidi).then((b) => b.toString(), (err: Error) => `error: ${err.message}`)
  await endWith(podBidi, Buffer.from('bidi from the pod'))
  const chromiumBidi = await atPod.incomingBidi.next()
  if (chromiumBidi === null) return t.fail('no bidi stream from Chromium')
  chromiumBidi.pipe(chromiumBidi)
  const chromiumUni = await atPod.incomingUni.next()
  t.equal(chromiumUni === null ? null : (await readAll(chromiumUni)).toString(), 'uni from chromium', 'Chromium\'s uni stream reached the pod')
  await endWith(await atPod.open(false), Buffer.from('uni from the pod'))
  const datagram = await atPod.datagrams.next()
  t.match(datagram?.toString(), /^datagram \d+$/, 'a datagram from Chromium reached the pod')
  atPod.sendDatagram(Buffer.from(`echo ${datagram?.toString() ?? ''}`))

  t.equal(await podBidiEcho, 'bidi from the pod', 'Chromium echoed the pod\'s stream')
  await endWith(await atPod.open(false), Buffer.from('close now'))
  const log = await inPage
  t.match(log, {
    ready: true,
    bidiEcho: 'bidi from chromium',
    podBidi: 'bidi from the pod',
    podUni: 'uni from the pod',
    datagram: /^echo datagram \d+$/,
    go: 'close now',
    closed: true,
  })
  t.same(await atPod.ended, { how: 'closed', code: 4242, reason: 'bye from chromium' }, 'the Stargate sees Chromium\'s close code and reason')
  await waitFor(() => pod.connections === 0, { timeoutMs: 5000, message: 'the pod\'s connection closed after the session (Chromium sends no CONNECTION_CLOSE)' })
  t.equal(await cluster.metric('completed'), 1)
})
