/**
 * Bad input: every malformed or unroutable session request gets a clear HTTP
 * answer and a counted outcome; a pod's refusal reaches the Pylon as the pod gave it; a pod
 * that cannot be reached gives 502 within --connect-timeout-ms; a leg that dies mid-stream
 * closes the other, and the router keeps serving.
 */
import t, { type Test } from 'tap'
import net from 'node:net'
import { WtCluster } from '../fixtures/webtransport-cluster.ts'
import { rawRequest, SESSION_PATH } from '../fixtures/webtransport-pylon.ts'
import { next, payload, writeAll } from '../fixtures/webtransport-streams.ts'
import { stargateSlice } from '../fixtures/kube-router.ts'
import { waitFor } from '../fixtures/wait.ts'

const CONNECT_TIMEOUT_MS = 600

async function cluster (t: Test, pods = ['stargate-0'], stub: Parameters<typeof WtCluster.start>[1]['stub'] = {}): Promise<WtCluster> {
  return WtCluster.start(t, { pods, stub, routerArgs: ['--connect-timeout-ms', String(CONNECT_TIMEOUT_MS)] })
}

t.test('malformed session requests are refused with 400 and counted as invalid_connect', async (t) => {
  const c = await cluster(t)
  const authority = `stargate-0.stargate.external:${c.tunnelPort}`
  const connect = { ':method': 'CONNECT', ':protocol': 'webtransport', ':scheme': 'https', ':path': SESSION_PATH, ':authority': authority }
  const cases = [
    { name: 'another path', headers: { ...connect, ':path': '/webtransport' }, code: 'wrong_path' },
    { name: 'a CONNECT without :protocol', headers: { ':method': 'CONNECT', ':authority': authority }, code: 'missing_protocol' },
    { name: 'another :protocol', headers: { ...connect, ':protocol': 'websocket' }, code: 'wrong_protocol' },
    { name: 'a GET', headers: { ':method': 'GET', ':scheme': 'https', ':path': SESSION_PATH, ':authority': authority }, code: 'wrong_method' },
  ]
  for (const [i, c2] of cases.entries()) {
    const response = await rawRequest(t, c.target('stargate-0'), c2.headers)
    t.equal(response.status, 400, `${c2.name}: 400`)
    t.equal(response.headers['x-stargate-error-code'], c2.code, `${c2.name}: ${c2.code}`)
    t.match(response.body, /\S/, `${c2.name}: a message`)
    t.equal(await c.metric('invalid_connect'), i + 1)
  }
  t.equal(c.stubs.get('stargate-0')?.requests.length, 0, 'nothing reached the pod')
})

t.test('a session for a host outside the template is refused with 404 unknown target SNI', async (t) => {
  const c = await cluster(t)
  const opened = await c.open('stargate-0', {}, { servername: 'stargate-0.other.example', verifyName: 'stargate-0.stargate.external' })
  t.equal(opened.status, 404)
  t.equal(opened.body.trim(), 'unknown target SNI')
  t.equal(opened.responseHeaders['x-stargate-error-code'], 'unknown_sni')
  t.equal(await c.metric('unknown_sni'), 1)
  t.equal(await c.metric('accepted'), 0, 'a session that routes nowhere is not accepted')
})

t.test('a session without server name or routable :authority is refused as unknown', async (t) => {
  const c = await cluster(t)
  const opened = await c.open('stargate-0', { authority: `127.0.0.1:${c.tunnelPort}` }, { servername: null, verifyName: 'stargate-0.stargate.external' })
  t.equal(opened.status, 404)
  t.equal(await c.metric('unknown_sni'), 1)
})

t.test('a session for a pod that is not ready is refused with 503 target stargate not ready', async (t) => {
  const c = await cluster(t, ['stargate-0', 'stargate-1'])
  c.publish('stargate-1', false)
  await c.waitForTargets(1)
  const opened = await c.open('stargate-1')
  t.equal(opened.status, 503)
  t.equal(opened.body.trim(), 'target stargate not ready')
  t.equal(await c.metric('target_unavailable'), 1)
  t.equal(c.stubs.get('stargate-1')?.requests.length, 0, 'the pod was not dialed')
})

t.test('a pod that refuses the session is answered to the Pylon with its own status and body', async (t) => {
  for (const status of [429, 401]) {
    const c = await cluster(t, ['stargate-0'], { answer: status })
    const opened = await c.open('stargate-0', { headers: { 'x-stargate-auth-token': 'bad-token' } })
    t.equal(opened.status, status, `${status} passed through`)
    t.equal(opened.responseHeaders['x-stub-pod'], 'stargate-0', `${status}: the pod's fields too`)
    t.strictSame(JSON.parse(opened.body), { error: { code: `status_${status}`, pod: 'stargate-0' } }, `${status}: and its body`)
    t.equal(await c.metric('upstream_rejected'), 1)
    t.equal(await c.metric('accepted'), 1, `${status}: accepted once routed, before the pod answered (as the Rust router counts it)`)
    await waitFor(() => c.stubs.get('stargate-0')!.connections === 0, { message: `${status}: the upstream connection is closed` })
  }
})

t.test('a pod that refuses connections gives 502', async (t) => {
  const c = await cluster(t)
  // Listed at an address where nothing listens any more.
  await c.stubs.get('stargate-0')!.close()
  const started = Date.now()
  const opened = await c.open('stargate-0')
  t.equal(opened.status, 502)
  t.equal(opened.body.trim(), 'failed to connect to stargate target')
  t.ok(Date.now() - started < CONNECT_TIMEOUT_MS + 2000, 'answered without waiting for long')
  t.equal(await c.metric('upstream_connect_error'), 1)
  t.equal(await c.metric('accepted'), 1, 'accepted once routed by SNI, before the upstream failed')
})

t.test('a pod that accepts TCP but never speaks TLS gives 502 after the connect timeout', async (t) => {
  const c = await cluster(t)
  const silent = net.createServer(() => {})
  const sockets = new Set<net.Socket>()
  silent.on('connection', (socket) => { sockets.add(socket) })
  await new Promise<void>((resolve) => { silent.listen(0, c.stubs.get('stargate-0')!.ip, resolve) })
  t.teardown(() => {
    for (const socket of sockets) socket.destroy()
    silent.close()
  })
  const port = (silent.address() as net.AddressInfo).port
  c.kube.fake.apply(stargateSlice('stargate-stargate-0', [{ pod: 'stargate-0', ip: c.stubs.get('stargate-0')!.ip }], { ports: { grpc: 50051, quic: port } }))
  await waitFor(async () => (await c.kube.snapshot()).targets[0]?.quicPort === port, { message: 'the new port in the snapshot' })
  const started = Date.now()
  const opened = await c.open('stargate-0')
  const elapsed = Date.now() - started
  t.equal(opened.status, 502)
  t.equal(opened.body.trim(), 'timed out connecting to stargate target')
  t.ok(elapsed >= CONNECT_TIMEOUT_MS - 50, `waited for the connect timeout (${elapsed} ms)`)
  t.equal(await c.metric('upstream_connect_error'), 1)
})

t.test('a pod that never answers the session request gives 504 after the connect timeout', async (t) => {
  const c = await cluster(t, ['stargate-0'], { answer: 'hang' })
  const opened = await c.open('stargate-0')
  t.equal(opened.status, 504)
  t.equal(opened.body.trim(), 'stargate target did not answer the session request in time')
  t.equal(await c.metric('upstream_connect_error'), 1)
})

t.test('a Pylon that dies closes the pod\'s session with reason downstream session aborted', async (t) => {
  const c = await cluster(t, ['stargate-0'], { mode: 'manual' })
  const opened = await c.open('stargate-0')
  const atPod = await c.stubs.get('stargate-0')!.nextSession()
  opened.destroy()
  t.strictSame(await atPod.wt.ended, { ok: true, closeCode: 0, reason: 'downstream session aborted' })
  await waitFor(async () => await c.metric('relay_error') === 1, { message: 'outcome relay_error' })
})

t.test('a Pylon that dies mid-stream resets the pod\'s session, and the router keeps serving', async (t) => {
  const c = await cluster(t, ['stargate-0'], { mode: 'manual' })
  const opened = await c.open('stargate-0')
  const atPod = await c.stubs.get('stargate-0')!.nextSession()
  const stream = await opened.wt!.session.createBidirectionalStream()
  // The library may leave this write pending forever once its connection is gone.
  void writeAll(stream.writable, payload(8 * 1024 * 1024, 1)).catch(() => {})
  const atPodStream = await next(atPod.wt.session.incomingBidirectionalStreams)
  t.ok(atPodStream !== null, 'the stream was flowing')
  opened.destroy()
  // Cut inside a capsule, the pod's leg cannot get a well-formed close: it is reset (CANCEL),
  // unless the cut happened to fall between capsules (then it gets the close capsule).
  const ended = await atPod.wt.ended
  t.ok(ended.ok, 'the pod\'s session closed')
  t.ok(ended.ok && (ended.reason === '' || ended.reason === 'downstream session aborted'), `reset or closed (${JSON.stringify(ended)})`)
  await waitFor(async () => await c.metric('relay_error') === 1, { message: 'outcome relay_error' })
  t.equal(await c.kube.metric('stargate_k8s_router_webtransport_sessions_active'), 0)
  const again = await c.open('stargate-0')
  t.equal(again.status, 200, 'the next session works')
  t.equal((await c.kube.readyz()).status, 200, 'the router is still ready')
})

t.test('a pod that dies closes the Pylon\'s session with reason upstream session aborted', async (t) => {
  const c = await cluster(t, ['stargate-0'], { mode: 'manual' })
  const opened = await c.open('stargate-0')
  const stub = c.stubs.get('stargate-0')!
  await stub.nextSession()
  await stub.close()
  t.strictSame(await opened.wt!.ended, { ok: true, closeCode: 0, reason: 'upstream session aborted' })
  await waitFor(async () => await c.metric('relay_error') === 1, { message: 'outcome relay_error' })
})

t.test('a pod that dies mid-stream ends the Pylon\'s session', async (t) => {
  const c = await cluster(t, ['stargate-0'], { mode: 'manual' })
  const opened = await c.open('stargate-0')
  const stub = c.stubs.get('stargate-0')!
  const atPod = await stub.nextSession()
  const stream = await atPod.wt.session.createBidirectionalStream()
  void writeAll(stream.writable, payload(8 * 1024 * 1024, 2)).catch(() => {})
  t.ok(await next(opened.wt!.session.incomingBidirectionalStreams) !== null, 'the stream was flowing')
  await stub.close()
  const ended = await opened.wt!.ended
  t.ok(ended.ok && (ended.reason === '' || ended.reason === 'upstream session aborted'), `reset or closed (${JSON.stringify(ended)})`)
  await waitFor(async () => await c.metric('relay_error') === 1, { message: 'outcome relay_error' })
})
