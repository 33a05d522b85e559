/**
 * SPEC §7: every way a WebTransport-over-HTTP/3 session is refused, with what the
 * Pylon sees and the outcome counted. SNI rejections close the QUIC connection from the
 * Initial (APPLICATION_ERROR with no reason phrase, RFC 9000 §10.2.3; the reason is in the
 * router's metrics and log);
 * a bad session request is answered 400 (invalid_connect); a pod that cannot be reached, does
 * not speak WebTransport or does not answer gives 502 (upstream_connect_error); a pod's refusal
 * reaches the Pylon with its own status and body (upstream_rejected).
 */
import t from 'tap'
import dgram from 'node:dgram'
import { H3Cluster } from '../fixtures/h3-cluster.ts'
import { waitFor } from '../fixtures/wait.ts'

t.test('SNI rejections close the connection from the Initial with APPLICATION_ERROR and no reason; the reason is counted and logged', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0', 'stargate-1'] })
  cluster.publish('stargate-1', false)
  await cluster.waitForTargets(1)
  const cases: readonly [sni: string | null, outcome: string][] = [
    [null, 'missing_sni'],
    ['nobody.other.example', 'unknown_sni'],
    [cluster.host('stargate-1'), 'target_unavailable'],
  ]
  for (const [sni, outcome] of cases) {
    const result = await cluster.open(null, { sni })
    t.equal(result.status, 0, `${outcome}: no answer`)
    t.match(result.close, { app: false, code: 0x0c, reasonText: '' }, `${outcome}: the Pylon reads APPLICATION_ERROR and no reason`)
    t.equal(result.close?.established, false, `${outcome}: refused before the handshake completed`)
    const logged = cluster.kube.logs.lines().filter((l) => l.msg === 'webtransport http/3 handshake refused' && l.sni === sni)
    t.match(logged, [{ reason: outcome }], `${outcome}: the router logs why`)
    t.equal(await cluster.metric(outcome), 1, `${outcome} counted`)
    t.equal(await cluster.kube.metric('stargate_k8s_router_quic_handshake_failures_total', { reason: outcome }), 1, `${outcome}: a refused handshake of the tunnel port`)
  }
  t.equal(await cluster.metric('accepted'), 0, 'none of them counted as accepted')
})

t.test('a session request that is not a WebTransport CONNECT to /_stargate/webtransport is answered 400', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'] })
  const cases: readonly [label: string, options: Parameters<H3Cluster['open']>[1], code: string][] = [
    ['wrong path', { path: '/other' }, 'wrong_path'],
    ['GET', { method: 'GET', protocol: null }, 'wrong_method'],
    ['another protocol', { protocol: 'connect-udp' }, 'wrong_protocol'],
  ]
  let n = 0
  for (const [label, options, code] of cases) {
    const result = await cluster.open('stargate-0', options)
    t.equal(result.status, 400, label)
    t.match(result.fields, [['content-type', 'text/plain; charset=utf-8'], ['x-stargate-error-code', code]], `${label}: ${code}`)
    t.match(result.body, /webtransport|:protocol/, `${label}: a message says what was wrong`)
    t.equal(await cluster.metric('invalid_connect'), ++n)
  }
  t.equal(cluster.pods.get('stargate-0')?.requests.length, 0, 'the pod never saw them')
})

t.test('a connection that sends no session request within --connect-timeout-ms is closed (invalid_connect)', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], routerArgs: ['--connect-timeout-ms', '300'] })
  const result = await cluster.open('stargate-0', { timeoutMs: 3000, holdRequest: true })
  t.equal(result.status, 0)
  t.match(result.close?.reasonText, /no webtransport session request/)
  await waitFor(async () => await cluster.metric('invalid_connect') === 1, { message: 'counted invalid_connect' })
})

t.test('a pod that cannot be reached gives 502 upstream_connect_error', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], routerArgs: ['--connect-timeout-ms', '1000'] })
  // A UDP port nobody answers on: the pod's address is published, its listener is gone.
  const blackHole = dgram.createSocket('udp4')
  await new Promise<void>((resolve) => { blackHole.bind(0, cluster.pods.get('stargate-0')!.ip, () => { resolve() }) })
  t.teardown(() => { blackHole.close() })
  cluster.kube.fake.apply((await import('../fixtures/kube-router.ts')).stargateSlice('stargate-stargate-0', [{ pod: 'stargate-0', ip: cluster.pods.get('stargate-0')!.ip, ready: true }], { ports: { grpc: 50051, quic: blackHole.address().port } }))
  await waitFor(async () => (await cluster.kube.snapshot()).targets[0]?.quicPort === blackHole.address().port, { message: 'the pod moved to the black hole' })
  const started = Date.now()
  const result = await cluster.open('stargate-0')
  t.equal(result.status, 502)
  t.match(result.fields, [['content-type', 'text/plain; charset=utf-8'], ['x-stargate-error-code', 'upstream_timeout']])
  t.ok(Date.now() - started >= 900, 'after the connect timeout')
  t.equal(await cluster.metric('upstream_connect_error'), 1)
})

t.test('a pod whose port refuses (ICMP port unreachable) gives 502 at once, not after the timeout', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], routerArgs: ['--connect-timeout-ms', '10000'] })
  const ip = cluster.pods.get('stargate-0')!.ip
  const closed = dgram.createSocket('udp4')
  await new Promise<void>((resolve) => { closed.bind(0, ip, () => { resolve() }) })
  const port = closed.address().port
  closed.close()
  const { stargateSlice } = await import('../fixtures/kube-router.ts')
  cluster.kube.fake.apply(stargateSlice('stargate-stargate-0', [{ pod: 'stargate-0', ip, ready: true }], { ports: { grpc: 50051, quic: port } }))
  await waitFor(async () => (await cluster.kube.snapshot()).targets[0]?.quicPort === port, { message: 'the pod moved to a closed port' })
  const started = Date.now()
  const result = await cluster.open('stargate-0')
  t.equal(result.status, 502)
  t.match(result.fields, [['content-type', 'text/plain; charset=utf-8'], ['x-stargate-error-code', 'upstream_unreachable']])
  t.ok(Date.now() - started < 5000, `refused in ${Date.now() - started} ms, well before the 10 s connect timeout`)
  t.equal(await cluster.metric('upstream_connect_error'), 1)
})

t.test('a pod whose certificate does not verify gives 502 upstream_connect_error', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: [] })
  const { createCa, createLeaf } = await import('../fixtures/certs.ts')
  const other = await createCa({ name: 'another ca' })
  const leaf = await createLeaf(other, { dnsNames: [cluster.host('stargate-9')] })
  const { H3Stargate } = await import('../fixtures/h3-stargate.ts')
  const pod = H3Stargate.start({ podName: 'stargate-9', ip: '127.0.99.9', certPem: leaf.chainPem, keyPem: leaf.keyPem })
  t.teardown(() => { pod.close() })
  cluster.pods.set('stargate-9', pod)
  cluster.publish('stargate-9', true)
  await cluster.waitForTargets(1)
  const result = await cluster.open('stargate-9')
  t.equal(result.status, 502)
  t.match(result.fields, [['content-type', 'text/plain; charset=utf-8'], ['x-stargate-error-code', 'upstream_unreachable']])
  t.equal(pod.requests.length, 0, 'nothing was sent to a pod that failed verification')
  t.equal(await cluster.kube.metric('stargate_k8s_router_quic_handshake_failures_total', { reason: 'upstream_certificate' }), 1, 'counted as a refused upstream certificate')
  t.equal(await cluster.metric('upstream_connect_error'), 1)
})

t.test('a pod that offers no WebTransport in its SETTINGS gives 502', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { noWebTransport: true } })
  const result = await cluster.open('stargate-0')
  t.equal(result.status, 502)
  t.match(result.fields, [['content-type', 'text/plain; charset=utf-8'], ['x-stargate-error-code', 'upstream_no_webtransport']])
  t.equal(await cluster.metric('upstream_connect_error'), 1)
})

t.test('a pod that never answers the session request gives 502 after the connect timeout', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { silent: true }, routerArgs: ['--connect-timeout-ms', '500'] })
  const result = await cluster.open('stargate-0')
  t.equal(result.status, 502)
  t.match(result.fields, [['content-type', 'text/plain; charset=utf-8'], ['x-stargate-error-code', 'upstream_timeout']])
  t.equal(cluster.pods.get('stargate-0')?.requests.length, 1, 'the pod got the request')
  t.equal(await cluster.metric('upstream_connect_error'), 1)
})

t.test('a pod that refuses the session (401, 429) is answered to the Pylon with its own status, fields and body', async (t) => {
  for (const status of [401, 429]) {
    const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { answer: { status, body: `refused with ${status}`, fields: [['retry-after', '3'], ['x-stargate-reason', 'token']] } } })
    const result = await cluster.open('stargate-0')
    t.equal(result.status, status)
    t.same(result.fields, [['retry-after', '3'], ['x-stargate-reason', 'token']])
    t.equal(result.body, `refused with ${status}`)
    t.equal(await cluster.metric('upstream_rejected'), 1)
  }
})

t.test('sessions beyond --webtransport-max-sessions are refused with 503', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], routerArgs: ['--webtransport-max-sessions', '1'] })
  const first = await cluster.open('stargate-0')
  t.equal(first.status, 200)
  const second = await cluster.open('stargate-0')
  t.equal(second.status, 503)
  t.match(second.fields, [['content-type', 'text/plain; charset=utf-8'], ['x-stargate-error-code', 'total_session_limit']])
  t.equal(await cluster.kube.metric('stargate_k8s_router_webtransport_sessions_refused_total', { reason: 'total_limit' }), 1)
  // Each connection is told it may hold one session (--webtransport-max-sessions-per-connection).
  t.equal(first.h3?.core.peerSettings?.webTransportMaxSessions, 1)
  first.session?.close(0, 'done')
  await waitFor(async () => await cluster.metric('completed') === 1, { message: 'the first session ended' })
  const third = await cluster.open('stargate-0')
  t.equal(third.status, 200, 'room again once the first ended')
})
