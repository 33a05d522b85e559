/**
 * SPEC §11: on shutdown the raw QUIC listener stops taking tunnels (a Pylon that
 * arrives is refused from its Initial: APPLICATION_ERROR, which carries no reason there, RFC 9000
 * §10.2.3) and, after the drain, closes the open ones on both legs with application code 0 and
 * reason 'router shutdown'.
 */
import t from 'tap'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { waitFor } from '../fixtures/wait.ts'

t.test('router shutdown closes open tunnels on both legs with reason router shutdown', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.64' })
  const pylon = await cluster.dial('stargate-0')
  await pylon.ready()
  const tunnel = await cluster.stubs.get('stargate-0')?.tunnel()
  if (tunnel === undefined) throw new Error('no tunnel')
  await cluster.kube.router.shutdown()
  t.match(await pylon.closedWith(), { initiator: 'peer', app: true, code: 0, reason: 'router shutdown' }, 'the Pylon is told')
  t.match(await waitFor(() => tunnel.closed), { initiator: 'peer', app: true, code: 0, reason: 'router shutdown' }, 'so is the Stargate')
})

t.test('once shutdown has begun, a new tunnel is refused from its Initial', async (t) => {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet: '127.0.65' })
  const open = await cluster.dial('stargate-0')
  await open.ready()
  // The Pylon's handshake can complete before the router's: wait until the tunnel is relayed.
  await cluster.stubs.get('stargate-0')?.tunnel()
  cluster.kube.router.tunnel.stopAccepting()
  const late = await cluster.dial('stargate-0')
  t.match(await late.closedWith(), { initiator: 'peer', app: false, code: 0x0c, reason: '', established: false }, 'refused from its Initial: APPLICATION_ERROR, no reason phrase')
  t.equal(open.closed, null, 'the tunnel opened before keeps running until the drain ends')
  t.equal(cluster.stubs.get('stargate-0')?.tunnels.length, 1, 'the late one never reached the pod')
})
