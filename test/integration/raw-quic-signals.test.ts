/**
 * SPEC §7 (the Rust router dropped these): stream resets, STOP_SENDING and
 * connection closes cross the tunnel with their codes and reasons, in both directions.
 */
import t from 'tap'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { openDuplex, readAll, type AcceptedTunnel } from '../fixtures/quic-stargate.ts'
import type { PylonTunnel } from '../fixtures/quic-pylon.ts'
import type { Teardown } from '../fixtures/kube-router.ts'
import { waitFor } from '../fixtures/wait.ts'
import { QuicStreamError, type QuicDuplex } from '../../lib/quic/stream-duplex.ts'

function errorOf (stream: QuicDuplex): Promise<QuicStreamError> {
  return new Promise((resolve, reject) => {
    stream.once('error', (err) => { if (err instanceof QuicStreamError) resolve(err); else reject(err) })
    stream.once('end', () => { reject(new Error('ended without an error')) })
    stream.resume()
  })
}

async function connected (t: Teardown, subnet: string): Promise<{ cluster: QuicCluster, pylon: PylonTunnel, tunnel: AcceptedTunnel }> {
  const cluster = await QuicCluster.start(t, { pods: ['stargate-0'], subnet })
  const pylon = await cluster.dial('stargate-0')
  await pylon.ready()
  const tunnel = await cluster.stubs.get('stargate-0')?.tunnel()
  if (tunnel === undefined) throw new Error('no tunnel')
  return { cluster, pylon, tunnel }
}

t.test('a Pylon that resets a stream: the Stargate sees the reset with its code', async (t) => {
  const { pylon, tunnel } = await connected(t, '127.0.53')
  const stream = pylon.openStream(true)
  stream.on('error', () => {})
  stream.write('partial request')
  const atStargate = await waitFor(() => tunnel.streams[0])
  // The stub echoes; replace its pipe with a reader that reports the error.
  atStargate.unpipe()
  const failure = errorOf(atStargate)
  stream.resetWrite(77)
  t.match(await failure, { kind: 'reset', code: 77 })
})

t.test('a Stargate that resets its answer: the Pylon sees the reset with its code', async (t) => {
  const { pylon, tunnel } = await connected(t, '127.0.54')
  const request = openDuplex(tunnel.conn, true)
  if (request === null) throw new Error('no stream')
  request.on('error', () => {})
  request.write('a request whose answer is abandoned')
  const atPylon = await waitFor(() => pylon.streams[0])
  const failure = errorOf(atPylon)
  request.resetWrite(0x10c)
  t.match(await failure, { kind: 'reset', code: 0x10c })
})

t.test('STOP_SENDING crosses the tunnel with its code', async (t) => {
  const { pylon, tunnel } = await connected(t, '127.0.55')
  const upload = pylon.openStream(true)
  upload.write('first part')
  const atStargate = await waitFor(() => tunnel.streams[0])
  atStargate.unpipe()
  atStargate.on('error', () => {})
  const failure = new Promise<QuicStreamError>((resolve) => { upload.once('error', (err) => { resolve(err as QuicStreamError) }) })
  atStargate.stopSending(9)
  // The Pylon learns it on its next write (or at once when the reset frame arrives).
  const writer = setInterval(() => { if (!upload.destroyed) upload.write('more') }, 10)
  t.teardown(() => { clearInterval(writer) })
  t.match(await failure, { kind: 'stop_sending', code: 9 })
  clearInterval(writer)
})

t.test('the Pylon closing its connection: the Stargate gets the same code and reason', async (t) => {
  const { pylon, tunnel } = await connected(t, '127.0.56')
  pylon.conn.close(0x1234, 'pylon shutting down')
  const closed = await waitFor(() => tunnel.closed)
  t.match(closed, { initiator: 'peer', app: true, code: 0x1234, reason: 'pylon shutting down' })
})

t.test('a Stargate that answers and finishes: the Pylon reads the whole answer and FIN', async (t) => {
  const { cluster, tunnel } = await connected(t, '127.0.57')
  const stub = cluster.stubs.get('stargate-0')
  const answer = await stub?.request(tunnel, 'ping')
  t.equal(answer?.toString(), 'pylon:ping')
  const again = openDuplex(tunnel.conn, true)
  if (again === null) throw new Error('no stream')
  again.end()
  t.equal((await readAll(again)).toString(), 'pylon:', 'an empty request (FIN only) is answered too')
})
