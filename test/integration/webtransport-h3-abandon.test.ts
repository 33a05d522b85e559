/**
 * WebTransport-over-HTTP/3 sessions opened and abandoned in every phase (before the pod
 * answers, idle, in the middle of a stream, by dropping the connection without a word) leave no
 * tunnel, no upstream connection and no session slot behind.
 */
import t from 'tap'
import { H3Cluster } from '../fixtures/h3-cluster.ts'
import { inBatches } from '../fixtures/h3-pylon.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(120_000)

t.test('sessions opened and abandoned in every phase leave nothing behind', async (t) => {
  // Short idle timeouts so connections dropped without a word end within the test (their slots
  // are held until then); a cap below the 120 sessions opened then proves every slot came back.
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], routerArgs: ['--connect-timeout-ms', '2000', '--relay-idle-timeout-ms', '2000', '--relay-keep-alive-ms', '500', '--webtransport-max-sessions', '40'] })
  await inBatches(120, 20, async (i) => {
    switch (i % 4) {
      case 0: { // gone before the pod answers: the handshake only, then dropped
        const result = await cluster.open('stargate-0', { holdRequest: true, timeoutMs: 50 })
        result.h3?.quic.destroy()
        return
      }
      case 1: { // gone while idle, without a word
        const result = await cluster.open('stargate-0')
        result.h3?.quic.destroy()
        return
      }
      case 2: { // gone mid-stream
        const result = await cluster.open('stargate-0')
        const stream = await result.session?.open(true)
        stream?.write(Buffer.alloc(256 * 1024, 1))
        result.h3?.quic.destroy()
        return
      }
      default: { // closed properly
        const result = await cluster.open('stargate-0')
        result.h3?.close(0x100, 'bye')
      }
    }
  })
  await waitFor(async () => await cluster.kube.metric('stargate_k8s_router_webtransport_sessions_active') === 0, { timeoutMs: 20_000, message: 'no session left' })
  await waitFor(() => cluster.pods.get('stargate-0')!.connections === 0, { timeoutMs: 20_000, message: 'no upstream connection left' })
  // Every slot came back: as many sessions as the cap allows open at once.
  const again = await inBatches(40, 20, () => cluster.open('stargate-0'))
  t.equal(again.filter((s) => s.status === 200).length, 40, '40 new sessions, the whole cap, are accepted afterwards')
  for (const s of again) s.session?.close(0, 'done')
})
