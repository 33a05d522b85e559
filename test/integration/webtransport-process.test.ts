/**
 * Rejected or aborted WebTransport sessions never take the router down. The router
 * runs as `node server/main.ts` in a child process here, so a crash (an unhandled rejection
 * or exception anywhere in the session path) would end the process and fail the test,
 * rather than being caught by the test runner. Also: the start-up log says which
 * WebTransport transports are active (HTTP/3 on UDP, HTTP/2 on TCP, the same port number).
 */
import t from 'tap'
import { startWtRouterProcess } from '../fixtures/webtransport-process.ts'
import { openPylonSession, rawConnect, rawRequest, SESSION_PATH } from '../fixtures/webtransport-pylon.ts'
import { next, payload, writeAll } from '../fixtures/webtransport-streams.ts'
import { httpGet } from '../fixtures/router-process.ts'
import { waitFor } from '../fixtures/wait.ts'

// The sessions-ended wait below may take up to 30 s under load, past tap's 30 s per-file default.
t.setTimeout(120_000)

// One router process for the file: starting one takes a few seconds of CPU.
const router = await startWtRouterProcess(t, { pods: ['stargate-0', 'stargate-1'], args: ['--connect-timeout-ms', '500'] })

t.test('the router says at start-up which WebTransport transports are active: HTTP/3 on UDP and HTTP/2 on TCP, one port number', async (t) => {
  const line = router.p.logs().find((l) => typeof l.msg === 'string' && l.msg.startsWith('webtransport tunnel listening'))
  t.ok(line !== undefined, 'one line at start-up')
  const transports = line?.transports as { http2: string, http3: string }
  t.equal(transports.http2, `tcp 127.0.0.1:${router.tunnelPort}`)
  t.equal(transports.http3, `udp 127.0.0.1:${router.tunnelPort}`)
  t.notMatch(router.p.stdout(), /http3 loader|Problem loading/, 'no stray output from the WebTransport library on stdout')
})

t.test('rejected and aborted sessions never take the router process down', async (t) => {
  const refusing = router.stubs.get('stargate-1')!
  refusing.setAnswer((record) => record.headers['x-answer'] === 'hang' ? 'hang' : Number(record.headers['x-answer'] ?? 401))
  const target = router.target('stargate-0')
  const authority = `stargate-0.stargate.external:${router.tunnelPort}`

  // Refused by the router.
  t.equal((await rawRequest(t, target, { ':method': 'GET', ':scheme': 'https', ':path': '/', ':authority': authority })).status, 400)
  t.equal((await rawRequest(t, target, { ':method': 'CONNECT', ':authority': authority })).status, 400)
  t.equal((await openPylonSession(t, { ...target, servername: 'nobody.other.example', verifyName: 'x.stargate.external' })).status, 404)
  // Refused or never answered by the pod.
  for (const answer of ['401', '429', '500', 'hang']) {
    const opened = await openPylonSession(t, router.target('stargate-1'), { headers: { 'x-answer': answer } })
    t.equal(opened.status, answer === 'hang' ? 504 : Number(answer), `pod answer ${answer}`)
  }
  // Aborted: before the pod answers, while idle, and mid-stream, from each side.
  const early = await openPylonSession(t, router.target('stargate-1'), { headers: { 'x-answer': 'hang' }, timeoutMs: 100 })
  early.destroy()
  const idle = await openPylonSession(t, target)
  idle.destroy()
  const busy = await openPylonSession(t, target)
  const stream = await busy.wt!.session.createBidirectionalStream()
  void writeAll(stream.writable, payload(4 * 1024 * 1024, 1)).catch(() => {})
  await waitFor(async () => (await router.metric('stargate_k8s_router_webtransport_bridged_bytes_total', { direction: 'to_upstream' }) ?? 0) > 0, { message: 'bytes flowing' })
  busy.destroy()
  const podSide = await openPylonSession(t, target)
  const atPod = router.stubs.get('stargate-0')!.sessions.at(-1)!
  atPod.wt.session.close({ closeCode: 1, reason: 'pod closes first' })
  t.strictSame(await podSide.wt!.ended, { ok: true, closeCode: 1, reason: 'pod closes first' })
  // A protocol violation on the CONNECT stream: garbage instead of capsules (a capsule
  // header announcing 2^62 - 1 bytes, then noise). The relay passes it on; the pod's
  // library closes the session; nothing else is affected.
  const garbage = await rawConnect(t, target, { ':method': 'CONNECT', ':protocol': 'webtransport', ':scheme': 'https', ':path': SESSION_PATH, ':authority': authority })
  t.equal(garbage.status, 200, 'a session for the garbage')
  garbage.stream.write(Buffer.concat([Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]), payload(64 * 1024, 9)]))
  await waitFor(() => garbage.stream.closed, { timeoutMs: 10_000, message: 'the garbage session closed' })

  // Still alive, ready and relaying.
  // The aborted sessions end by their sockets' closes and the relay's close grace; under CI's
  // load (four files at once on 2 cores) that once took more than 10 s.
  await waitFor(async () => await router.metric('stargate_k8s_router_webtransport_sessions_active') === 0, { timeoutMs: 30_000, message: 'every session ended' })
  t.equal(router.p.child.exitCode, null, 'the router process is running')
  t.equal((await httpGet(router.healthPort, '/readyz')).status, 200, 'and ready')
  const last = await openPylonSession(t, target)
  t.equal(last.status, 200, 'a new session works')
  const hello = await next(last.wt!.session.incomingUnidirectionalStreams)
  t.ok(hello !== null, 'and is bridged')
  t.notMatch(router.p.stderr(), /unhandled|uncaught|TypeError/i, 'nothing on stderr about unhandled errors')
  t.equal(await router.metric('stargate_k8s_router_webtransport_sessions_total', { outcome: 'invalid_connect' }), 2)
  t.equal(await router.metric('stargate_k8s_router_webtransport_sessions_total', { outcome: 'upstream_rejected' }), 3)
})
