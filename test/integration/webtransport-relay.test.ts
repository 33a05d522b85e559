/**
 * SPEC §7: a Pylon's WebTransport session to /_stargate/webtransport reaches the
 * Stargate pod named by its TLS server name (or :authority without one), with every CONNECT
 * header as the Pylon sent it. Pods are stub Stargate WebTransport endpoints on their own
 * loopback IPs; each greets a session with its pod name on a unidirectional stream.
 */
import t from 'tap'
import { WtCluster } from '../fixtures/webtransport-cluster.ts'
import { next, readAll } from '../fixtures/webtransport-streams.ts'
import { StargateWatchClient } from '../fixtures/stargate-watch-client.ts'
import type { PylonSession } from '../fixtures/webtransport-pylon.ts'
import { createCa, createLeaf } from '../fixtures/certs.ts'
import { waitFor } from '../fixtures/wait.ts'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const PODS = ['stargate-0', 'stargate-1', 'stargate-7d9f8b6c4-x2x7q']

async function greeting (pylon: PylonSession): Promise<string> {
  if (pylon.wt === null) throw new Error(`no session: ${pylon.status} ${pylon.body}`)
  const hello = await next(pylon.wt.session.incomingUnidirectionalStreams)
  if (hello === null) throw new Error('the pod sent no greeting')
  return (await readAll(hello)).toString()
}

t.test('every advertised Stargate is reachable over WebTransport through the router, at the right pod', async (t) => {
  const cluster = await WtCluster.start(t, { pods: PODS })
  // WatchStargates over the cleartext front door (h2c, as a Gateway in front forwards it; the
  // TLS identity is the tunnels'), as a Pylon learns the targets.
  const watch = new StargateWatchClient(cluster.kube.address)
  t.teardown(() => { watch.close() })
  const message = await watch.next((m) => m.stargates.length === PODS.length)
  for (const info of message.stargates) {
    const host = info.advertise_addr.slice(0, info.advertise_addr.lastIndexOf(':'))
    const pylon = await cluster.open(info.stargate_id, {}, { servername: host })
    t.equal(pylon.status, 200, `${host}: accepted`)
    t.equal(await greeting(pylon), info.stargate_id, `${host}: reached ${info.stargate_id}`)
    const seen = cluster.stubs.get(info.stargate_id)?.requests.at(-1)
    t.equal(seen?.servername, host, `${host}: the pod saw the same server name`)
    t.equal(seen?.headers[':authority'], `${host}:${cluster.tunnelPort}`, `${host}: and the same :authority`)
  }
  for (const pod of PODS) t.equal(cluster.stubs.get(pod)?.requests.length, 1, `${pod} got exactly its own session`)
  t.equal(await cluster.metric('accepted'), PODS.length)
  t.equal(await cluster.kube.metric('stargate_k8s_router_webtransport_sessions_active'), PODS.length)
})

t.test('a Pylon that sends no server name reaches the pod named by :authority', async (t) => {
  const cluster = await WtCluster.start(t, { pods: PODS.slice(0, 2) })
  const pylon = await cluster.open('stargate-1', { authority: `stargate-1.stargate.external:${cluster.tunnelPort}` }, {
    servername: null,
    verifyName: 'stargate-1.stargate.external',
  })
  t.equal(pylon.status, 200)
  t.equal(await greeting(pylon), 'stargate-1')
  t.equal(cluster.stubs.get('stargate-1')?.requests[0]?.servername, 'stargate-1.stargate.external', 'the upstream handshake names the pod')
})

t.test('the pod receives every CONNECT header the Pylon sent, repeated ones repeated, in order', async (t) => {
  const cluster = await WtCluster.start(t, { pods: ['stargate-0'] })
  const pylon = await cluster.open('stargate-0', {
    path: '/_stargate/webtransport?pylon=eu-1',
    headers: {
      'x-inference-server-id': 'inference-server-42',
      'x-stargate-auth-token': 'pylon-token-Zm9vYmFy',
      'x-stargate-capability': ['chat', 'embeddings', 'rerank'],
      'user-agent': 'pylon/1.2.3',
    },
  })
  t.equal(pylon.status, 200)
  const seen = cluster.stubs.get('stargate-0')?.requests[0]
  const authority = `stargate-0.stargate.external:${cluster.tunnelPort}`
  t.strictSame(seen?.rawHeaders, [
    ':method', 'CONNECT',
    ':protocol', 'webtransport',
    ':scheme', 'https',
    ':path', '/_stargate/webtransport?pylon=eu-1',
    ':authority', authority,
    'origin', `https://${authority}`,
    'x-inference-server-id', 'inference-server-42',
    'x-stargate-auth-token', 'pylon-token-Zm9vYmFy',
    'x-stargate-capability', 'chat',
    'x-stargate-capability', 'embeddings',
    'x-stargate-capability', 'rerank',
    'user-agent', 'pylon/1.2.3',
  ])
  t.notMatch(cluster.kube.logs.text(), 'pylon-token-Zm9vYmFy', 'the token is never logged')
})

t.test('the pod is told the Pylon\'s WebTransport flow-control settings', async (t) => {
  const cluster = await WtCluster.start(t, { pods: ['stargate-0'] })
  const pylon = await cluster.open('stargate-0')
  t.equal(pylon.status, 200)
  t.strictSame(cluster.stubs.get('stargate-0')?.requests[0]?.remoteSettings, { 11105: 16384, 11106: 16384, 11107: 16384, 11108: 100, 11109: 100 })
})

t.test('with --client-ca-path only Pylons with a client certificate from that CA get a session', async (t) => {
  const pylonCa = await createCa({ name: 'pylon ca' })
  const dir = await mkdtemp(join(tmpdir(), 'stargate-wt-mtls-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  await writeFile(join(dir, 'pylons.crt'), pylonCa.certPem)
  const cluster = await WtCluster.start(t, { pods: ['stargate-0'], routerArgs: ['--client-ca-path', join(dir, 'pylons.crt')] })
  const pylonCert = await createLeaf(pylonCa, { dnsNames: ['pylon-1.pylons.example'], clientAuth: true })
  const allowed = await cluster.open('stargate-0', {}, { clientCert: pylonCert })
  t.equal(allowed.status, 200, 'a Pylon with a certificate from the CA is bridged')
  t.equal(await greeting(allowed), 'stargate-0')
  await t.rejects(cluster.open('stargate-0'), 'a Pylon without a certificate is refused during the handshake')
  await waitFor(async () => (await cluster.kube.metric('stargate_k8s_router_tls_handshake_failures_total', { listener: 'webtransport' }) ?? 0) >= 1, { message: 'the failed handshake counted' })
  t.equal(cluster.stubs.get('stargate-0')?.requests.length, 1, 'only the allowed session reached the pod')
})
