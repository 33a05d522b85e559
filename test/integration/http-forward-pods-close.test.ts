/**
 * HttpPods.close() is idempotent and a second call waits for the
 * first, as undici's dispatcher-base.js keeps its first close(). Before, a second call found
 * the pools already taken out and resolved at once, while the first was still waiting out
 * its grace for a request in flight. A real pod on loopback that reads a request and never
 * answers holds the pool open.
 */
import t from 'tap'
import { SnapshotStore } from '../../lib/discovery/snapshot-store.ts'
import { HttpPods } from '../../lib/http-forward/pods.ts'
import type { PodRequest, PodSlot } from '../../lib/http-forward/pod-connections.ts'
import { RawHttpPod } from '../fixtures/raw-http-pod.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(60_000)

const POD_IP = '127.0.118.10'

/** A GET through the pod's connections; answer resolves with 'answered' or the error's message. */
class Get implements PodRequest {
  slot: PodSlot | null = null
  waiting = false
  sent = false
  readonly answer: Promise<string>
  #settle: (outcome: string) => void = () => {}
  constructor () {
    this.answer = new Promise((resolve) => { this.#settle = resolve })
  }

  dispatchOptions (): { method: 'GET', path: string } { return { method: 'GET', path: '/v1/models' } }
  onConnect (): void { this.sent = true }
  onHeaders (): boolean { return true }
  onData (): boolean { return true }
  onComplete (): void { this.#settle('answered') }
  onError (err: Error): void { this.#settle(err.message) }
}

t.test('a second close() of the HTTP pods returns the first one\'s completion, which ends after the request in flight is cut', async (t) => {
  let podSawClose = false
  const pod = await RawHttpPod.start(POD_IP, (socket) => { socket.once('close', () => { podSawClose = true }) })
  t.teardown(() => { pod.close() })
  const store = new SnapshotStore()
  store.stage('stargate-0', { identity: 'stargate-0', namespace: 'default', address: POD_IP, host: POD_IP, grpcPort: 50051, quicPort: 4433, httpPort: pod.port, nodeName: null, zone: null, serving: true })
  store.markInitialized()
  store.flush()
  const pods = new HttpPods({ snapshot: store, connectTimeoutMs: 10_000, tls: null, serverName: () => 'stargate-0', closeGraceMs: 60_000, maxConnectionsPerPod: 1 })
  const http = pods.get('stargate-0')
  if (http === undefined) throw new Error('the pod is in the snapshot')
  const get = new Get()
  http.connections.submit(get)
  await waitFor(() => pod.heads.length === 1, { timeoutMs: 20_000, message: 'the request at the pod' })

  const first = pods.close(100)
  const second = pods.close()
  t.equal(second, first, 'the same completion')
  await second
  t.ok(http.connections.destroyed, 'when the second call resolves, the first one\'s grace has run out and the connections are destroyed')
  t.not(await get.answer, 'answered', 'the request in flight was cut')
  t.ok(await waitFor(() => podSawClose, { timeoutMs: 20_000, message: 'the pod sees its connection closed' }), 'the pod sees its connection closed')
  t.equal(pods.size, 0, 'no pod is offered any more')
})
