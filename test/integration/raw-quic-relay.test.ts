/**
 * SPEC §7: a Pylon's raw QUIC tunnel, dialed to the router's UDP port with the
 * advertised host of a Stargate as SNI, reaches that Stargate pod with the same SNI and ALPN
 * (none for none, as real Pylons and Stargates use raw QUIC);
 * the Stargate's requests travel to the Pylon and its answers come back.
 */
import t from 'tap'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { readAll } from '../fixtures/quic-stargate.ts'

const PODS = ['stargate-0', 'stargate-1', 'stargate-7d9f8b6c4-x2x7q']

t.test('every advertised Stargate is reachable over a raw QUIC tunnel, at the right pod, with the same SNI and ALPN', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: PODS, subnet: '127.0.41' })
  for (const name of PODS) {
    const pylon = await cluster.dial(name)
    await pylon.ready()
    const stub = cluster.stubs.get(name)
    if (stub === undefined) throw new Error('no stub')
    const tunnel = await stub.tunnel()
    t.equal(tunnel.serverName, cluster.host(name), `${name}: the pod saw the Pylon's SNI`)
    t.same(tunnel.offered, [], `${name}: and no ALPN offered, as the Pylon offered none`)
    t.equal(tunnel.alpn, null, `${name}: none negotiated`)
    const answer = await stub.request(tunnel, `request for ${name}`)
    t.equal(answer.toString(), `pylon:request for ${name}`, `${name}: a request from the Stargate is answered by the Pylon`)
  }
  for (const name of PODS) t.equal(cluster.stubs.get(name)?.tunnels.length, 1, `${name} got exactly one tunnel`)
  t.equal(await cluster.outcome('accepted'), PODS.length, 'each tunnel counted as accepted')
})

t.test('streams the Pylon opens reach the Stargate and come back, in open order with the same stream IDs', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.42' })
  const pylon = await cluster.dial('stargate-0')
  await pylon.ready()
  const streams = [0, 1, 2, 3, 4].map(() => pylon.openStream(true))
  streams.forEach((s, i) => { s.end(`stream ${i}`) })
  const echoes = await Promise.all(streams.map((s) => readAll(s)))
  t.same(echoes.map(String), [0, 1, 2, 3, 4].map((i) => `stream ${i}`))
  const tunnel = await cluster.stubs.get('stargate-0')?.tunnel()
  t.same(tunnel?.streams.map((s) => s.id), streams.map((s) => s.id), 'the pod saw the same stream IDs')
})

t.test('an HTTP/3 client offering h3 reaches the pod with ALPN h3, offered unchanged', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.43' })
  const pylon = await cluster.dial('stargate-0', { alpn: ['h3'] })
  await pylon.ready()
  t.equal(pylon.conn.alpn, 'h3')
  const tunnel = await cluster.stubs.get('stargate-0')?.tunnel()
  t.equal(tunnel?.alpn, 'h3')
  t.same(tunnel?.offered, ['h3'])
})
