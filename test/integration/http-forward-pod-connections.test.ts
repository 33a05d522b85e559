// A pod's connections for LLM requests (lib/http-forward/pod-connections.ts) against a
// real HTTP server on loopback. The failure mode: with undici's Pool, every request aborted
// while it held a pod connection left a fresh idle connection behind (undici put the aborted
// request back as pending and reconnected for it: +1,022 idle pod connections after 2,100
// aborted uploads, kept 30 s), and a queued request whose client had left still got a
// connection opened for it. Here an abort closes its connection and opens none, a departed
// waiter is skipped, and a connection opened for a request that ended meanwhile is closed.
import t from 'tap'
import http from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import { buildConnector } from 'undici'
import { lateConnect, PodConnections, UpstreamAbortError, type PodRequest, type PodSlot } from '../../lib/http-forward/pod-connections.ts'
import { sleep, waitFor } from '../fixtures/wait.ts'

const IP = '127.0.118.20'

/** An HTTP/1.1 pod: /hold/<n> is answered when the test says so (held), anything else at once. */
class Pod {
  port = 0
  readonly paths: string[] = []
  readonly held = new Map<string, http.ServerResponse>()
  accepted = 0
  open = 0
  readonly #server: http.Server

  constructor () {
    this.#server = http.createServer((req, res) => {
      this.paths.push(req.url ?? '')
      req.resume()
      if ((req.url ?? '').startsWith('/hold')) this.held.set(req.url ?? '', res)
      else res.end('ok')
    })
    this.#server.keepAliveTimeout = 60_000
    this.#server.on('connection', (socket: Socket) => {
      this.accepted++
      this.open++
      socket.once('close', () => { this.open-- })
    })
  }

  static async start (t: { teardown: (fn: () => void) => void }): Promise<Pod> {
    const pod = new Pod()
    await new Promise<void>((resolve) => { pod.#server.listen(0, IP, resolve) })
    pod.port = (pod.#server.address() as AddressInfo).port
    t.teardown(() => { pod.#server.closeAllConnections(); pod.#server.close() })
    return pod
  }
}

/** A request as the forwarder's Exchange behaves: ends for the router when done is set. */
class Get implements PodRequest {
  slot: PodSlot | null = null
  waiting = false
  sent = false
  done = false
  readonly path: string
  readonly outcome: Promise<string>
  #settle: (outcome: string) => void = () => {}
  constructor (path: string) {
    this.path = path
    this.outcome = new Promise((resolve) => { this.#settle = resolve })
  }

  dispatchOptions (): { method: 'GET', path: string } { return { method: 'GET', path: this.path } }
  onConnect (): void {
    if (this.done) {
      lateConnect(this)
      throw new UpstreamAbortError()
    }
    this.sent = true
  }

  onHeaders (): boolean { return true }
  onData (): boolean { return true }
  onComplete (): void { this.#settle('complete') }
  onError (err: Error & { code?: string }): void { this.#settle(err.code ?? err.message) }
}

/** One connection to the pod. */
function connections (port: number, connect: buildConnector.connector | null = null): PodConnections {
  return new PodConnections({ origin: `http://${IP}:${port}`, connections: 1, keepAliveTimeoutMs: 30_000, connect: connect ?? { timeout: 5000 } })
}

t.test('a running request ended by the router closes its connection, and no other is opened', async (t) => {
  const pod = await Pod.start(t)
  const pool = connections(pod.port)
  t.teardown(() => pool.destroy())
  const get = new Get('/hold/1')
  pool.submit(get)
  await waitFor(() => pod.paths.length === 1, { message: 'the request at the pod' })
  get.done = true
  pool.release(get, false)
  t.equal(await get.outcome, 'STARGATE_UPSTREAM_ABORTED', 'undici reports the abort to the request')
  await waitFor(() => pod.open === 0, { message: 'the pod sees its connection closed' })
  await sleep(300)
  t.equal(pod.accepted, 1, 'no connection was opened after the abort')
  t.equal(pool.holding, 0)
})

t.test('a waiting request whose client left is skipped: the connection goes to the next one', async (t) => {
  const pod = await Pod.start(t)
  const pool = connections(pod.port)
  t.teardown(() => pool.destroy())
  const first = new Get('/hold/1')
  const gone = new Get('/gone')
  const next = new Get('/next')
  pool.submit(first)
  pool.submit(gone)
  pool.submit(next)
  t.equal(pool.waiting, 2)
  gone.done = true
  pool.release(gone, false)
  t.equal(pool.waiting, 1, 'the departed request left the queue')
  await waitFor(() => pod.held.has('/hold/1'), { message: 'the first request at the pod' })
  pod.held.get('/hold/1')?.end('done')
  t.equal(await first.outcome, 'complete')
  pool.release(first, true)
  t.equal(await next.outcome, 'complete', 'the next live request runs')
  t.same(pod.paths, ['/hold/1', '/next'], 'the departed one never reached the pod')
  t.equal(pod.accepted, 1, 'on the same connection')
})

/** A connector whose connects complete only when open() is called. */
function gatedConnector (): { connect: buildConnector.connector, open: () => void } {
  const real = buildConnector({ timeout: 5000 })
  const pending: Array<() => void> = []
  return {
    connect: (options, callback) => { pending.push(() => { real(options, callback) }) },
    open: () => { for (const go of pending.splice(0)) go() },
  }
}

t.test('a connection opened for a request that ended meanwhile is closed, not left idle', async (t) => {
  const pod = await Pod.start(t)
  const gate = gatedConnector()
  const pool = connections(pod.port, gate.connect)
  t.teardown(() => pool.destroy())
  const get = new Get('/late')
  pool.submit(get)
  get.done = true
  pool.release(get, false)
  gate.open()
  t.equal(await get.outcome, 'STARGATE_UPSTREAM_ABORTED', 'the request is dropped when undici offers it')
  await waitFor(() => pod.accepted === 1, { message: 'the connection reached the pod' })
  await waitFor(() => pod.open === 0, { message: 'the fresh connection closed' })
  t.same(pod.paths, [], 'nothing was sent on it')
})

t.test('a connection opened for a request that ended meanwhile serves the request given it next', async (t) => {
  const pod = await Pod.start(t)
  const gate = gatedConnector()
  const pool = connections(pod.port, gate.connect)
  t.teardown(() => pool.destroy())
  const gone = new Get('/gone')
  pool.submit(gone)
  const next = new Get('/next')
  pool.submit(next)
  gone.done = true
  pool.release(gone, false)
  gate.open()
  t.equal(await next.outcome, 'complete')
  t.same(pod.paths, ['/next'])
  t.equal(pod.accepted, 1, 'on the connection opened for the departed one')
  t.equal(pod.open, 1, 'which stays open for the next request')
})

t.test('close() lets waiting requests run, then refuses new ones; destroy() fails what waits', async (t) => {
  const pod = await Pod.start(t)
  const pool = connections(pod.port)
  const first = new Get('/hold/1')
  const second = new Get('/second')
  pool.submit(first)
  pool.submit(second)
  const closed = pool.close()
  const refused = new Get('/refused')
  pool.submit(refused)
  t.equal(await refused.outcome, 'UND_ERR_CLOSED', 'a request after close() is refused')
  await waitFor(() => pod.held.has('/hold/1'))
  pod.held.get('/hold/1')?.end('done')
  await first.outcome
  pool.release(first, true)
  t.equal(await second.outcome, 'complete', 'the waiting request ran')
  pool.release(second, true)
  await closed
  await waitFor(() => pod.open === 0, { message: 'close() ends with every connection closed' })

  const other = connections(pod.port)
  const running = new Get('/hold/2')
  const waiting = new Get('/never')
  other.submit(running)
  other.submit(waiting)
  await waitFor(() => pod.held.has('/hold/2'))
  await other.destroy()
  t.equal(await waiting.outcome, 'UND_ERR_DESTROYED', 'destroy() fails a waiting request')
  t.equal(await running.outcome, 'UND_ERR_DESTROYED', 'and cuts a running one')
})

// A connection undici refuses to set up threw from submit: the forwarder calls it from a
// request body's 'end' handler, so the router exited on the first POST to such a pod (an
// IPv6 zone id in a targets file made undici's origin unparsable).
t.test('a connection that cannot be set up fails the request, not the caller', async (t) => {
  const pool = new PodConnections({ origin: 'http://[fe80::1%lo]:8000', connections: 1, keepAliveTimeoutMs: 30_000, connect: { timeout: 5000 } })
  t.teardown(() => pool.destroy())
  const get = new Get('/x')
  t.doesNotThrow(() => { pool.submit(get) })
  t.equal(await get.outcome, 'ERR_INVALID_URL', 'the request gets the error')
  t.equal(pool.holding, 0, 'no connection held')
  t.equal(pool.waiting, 0, 'nothing queued')
})
