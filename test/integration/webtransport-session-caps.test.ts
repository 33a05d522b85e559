/**
 * Over HTTP/2 every WebTransport session has an
 * upstream TCP+TLS+HTTP/2 connection of its own, so one Pylon connection could make the
 * router open up to 1,000 connections to a pod. Sessions are capped per Pylon connection
 * (--webtransport-max-sessions-per-connection, 429) and in total (--webtransport-max-sessions,
 * 503), pending and bridged alike; a refusal names its cap and is counted in
 * webtransport_sessions_refused_total, and the room comes back when a session ends.
 */
import t from 'tap'
import type { ClientHttp2Session, ClientHttp2Stream, IncomingHttpHeaders } from 'node:http2'
import { WtCluster } from '../fixtures/webtransport-cluster.ts'
import { SESSION_PATH, connectHttp2 } from '../fixtures/webtransport-pylon.ts'
import { waitFor } from '../fixtures/wait.ts'

/** A second session request on an existing Pylon connection: its status, error code and body. */
async function connectOn (connection: ClientHttp2Session, authority: string): Promise<{ status: number, code: string | undefined, body: string, stream: ClientHttp2Stream }> {
  const stream = connection.request({ ':method': 'CONNECT', ':protocol': 'webtransport', ':scheme': 'https', ':path': SESSION_PATH, ':authority': authority }, { endStream: false })
  stream.on('error', () => {})
  const headers = await new Promise<IncomingHttpHeaders | null>((resolve) => {
    stream.once('response', resolve)
    stream.once('close', () => { resolve(null) })
  })
  const status = Number(headers?.[':status'] ?? 0)
  let body = ''
  if (status !== 200) {
    // A refusal ends its stream; an accepted session stays open (the test's teardown closes it).
    stream.setEncoding('utf8')
    stream.on('data', (chunk: string) => { body += chunk })
    await new Promise((resolve) => { stream.once('close', resolve) })
  }
  return { status, code: headers?.['x-stargate-error-code'] as string | undefined, body, stream }
}

function refused (cluster: WtCluster, reason: string): Promise<number | undefined> {
  return cluster.kube.metric('stargate_k8s_router_webtransport_sessions_refused_total', { reason })
}

t.test('a second session on one Pylon connection is refused with 429 while the first is open', async (t) => {
  const cluster = await WtCluster.start(t, { pods: ['stargate-0'] })
  const { session: connection } = await connectHttp2(t, cluster.target('stargate-0'))
  const authority = `stargate-0.stargate.external:${cluster.tunnelPort}`
  const first = await connectOn(connection, authority)
  t.equal(first.status, 200)
  const second = await connectOn(connection, authority)
  t.equal(second.status, 429)
  t.equal(second.code, 'connection_session_limit')
  t.match(second.body, /too many webtransport sessions on this connection/)
  t.equal(await refused(cluster, 'connection_limit'), 1)
  t.equal(cluster.stubs.get('stargate-0')?.requests.length, 1, 'the pod never saw the refused session')
  // The first session is unharmed; once it ends, the same connection may open another.
  t.equal(await cluster.kube.metric('stargate_k8s_router_webtransport_sessions_active'), 1)
  first.stream.close()
  await waitFor(async () => await cluster.kube.metric('stargate_k8s_router_webtransport_sessions_active') === 0, { message: 'the first session ended' })
  const third = await connectOn(connection, authority)
  t.equal(third.status, 200, 'room again after the first session ended')
  third.stream.close()
})

t.test('sessions beyond --webtransport-max-sessions are refused with 503, and the pod sees no more connections', async (t) => {
  const cluster = await WtCluster.start(t, { pods: ['stargate-0'], routerArgs: ['--webtransport-max-sessions', '2'] })
  const a = await cluster.open('stargate-0')
  const b = await cluster.open('stargate-0')
  t.equal(a.status, 200)
  t.equal(b.status, 200)
  const c = await cluster.open('stargate-0')
  t.equal(c.status, 503)
  t.equal(c.responseHeaders['x-stargate-error-code'], 'total_session_limit')
  t.match(c.body, /as many webtransport sessions as it may/)
  t.equal(await refused(cluster, 'total_limit'), 1)
  t.equal(cluster.stubs.get('stargate-0')?.connections, 2, 'one upstream connection per session, no more')
  a.wt?.session.close({ closeCode: 0, reason: 'done' })
  await waitFor(async () => await cluster.kube.metric('stargate_k8s_router_webtransport_sessions_active') === 1, { message: 'one session left' })
  const d = await cluster.open('stargate-0')
  t.equal(d.status, 200, 'room again after a session ended')
})
