// A request the client is told was refused must never reach a pod. An HTTP/1.0
// request with `Transfer-Encoding: chunked` followed by more bytes was forwarded to the pod
// while the client got 400: Node's parser read the request (head, chunked body, end) and the
// front door handed it on, then llhttp refused the bytes after it (HPE_CLOSED_CONNECTION: data
// after a request that closes the connection) and the client-error handler wrote a 400 over
// the request in flight. The same happened to any request followed by bytes the parser
// refuses. Now (RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing)
// that request is refused with 400 bad_request before it is routed and nothing pipelined
// behind it is read, and a parse error while a request is in flight leaves that request's own
// answer to the client (§9.6: bytes after a request that closes the connection are not
// processed), or cuts the connection when it breaks into the body being forwarded. Raw bytes
// on a socket; the pod records every request head it reads.
import t from 'tap'
import net from 'node:net'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import { RawHttpPod, type PodBehaviour } from '../fixtures/raw-http-pod.ts'
import { probe } from '../fixtures/fault-probe.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(120_000)

const POD_IP = '127.0.1.131'
const HOST = 'stargate-0.stargate.external'
const SMUGGLED = 'GET /smuggled HTTP/1.1\r\nhost: stargate-0.stargate.external\r\n\r\n'

/** Answers every request 200 `ok` at once, or never when its path says so (`/hold`), and records whether a body ended. */
function pod (bodies: Map<string, string>): PodBehaviour {
  return (socket, head) => {
    const path = head.split(' ')[1] ?? ''
    if (path.startsWith('/hold')) {
      let body = ''
      socket.on('data', (chunk: Buffer) => { body += chunk.toString('latin1') })
      socket.on('close', () => { bodies.set(path, body) })
      return
    }
    socket.end('HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok')
  }
}

interface Exchange {
  /** Everything the router sent on the connection until it closed it. */
  readonly received: string
  /** The responses in it, by status line. */
  readonly statuses: string[]
}

/** Writes the parts with a pause between them; resolves once the router closed the connection. */
function send (port: number, parts: readonly string[], pauseMs = 200): Promise<Exchange> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1')
    let received = ''
    socket.on('data', (chunk: Buffer) => { received += chunk.toString('latin1') })
    socket.on('error', () => {})
    const timer = setTimeout(() => { socket.destroy(); reject(new Error(`the router kept the connection open; received ${JSON.stringify(received)}`)) }, 15_000)
    socket.on('close', () => {
      clearTimeout(timer)
      resolve({ received, statuses: [...received.matchAll(/HTTP\/1\.1 (\d{3}) [^\r]*\r\n/g)].map((m) => m[1] as string) })
    })
    socket.once('connect', async () => {
      for (const [i, part] of parts.entries()) {
        if (i > 0) await new Promise((r) => setTimeout(r, pauseMs))
        if (!socket.destroyed) socket.write(part)
      }
    })
  })
}

t.test('a request the client is told was refused never reaches the pod', async (t) => {
  const bodies = new Map<string, string>()
  const stargate = await RawHttpPod.start(POD_IP, pod(bodies))
  t.teardown(() => { stargate.close() })
  const targets = join(await tempDir(t, 'stargate-targets-'), 'targets.yaml')
  await writeFile(targets, `targets:\n  - {identity: stargate-0, address: ${POD_IP}, grpcPort: 50051, quicPort: 50052, httpPort: ${stargate.port}}\n`)
  // No body buffering, so a request's head reaches the pod before its body is in: the case
  // where a body that breaks off must cut the pod's connection (with the default buffer a body
  // this small never reaches the pod at all).
  const { health, frontDoor } = await startReadyRouter(t, ['--targets-file', targets, '--http-body-buffer-bytes', '0'])
  const router = probe(health)
  const paths = (): string[] => stargate.heads.map((head) => head.split(' ')[1] as string)

  const refusals = [
    { what: 'HTTP/1.0 chunked, then a pipelined request', bytes: [`POST /v1/a HTTP/1.0\r\nhost: ${HOST}\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n${SMUGGLED}`] },
    { what: 'HTTP/1.0 keep-alive chunked, then a pipelined request', bytes: [`POST /v1/b HTTP/1.0\r\nhost: ${HOST}\r\nconnection: keep-alive\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n${SMUGGLED}`] },
    { what: 'HTTP/1.0 chunked, the body and a request later', bytes: [`POST /v1/c HTTP/1.0\r\nhost: ${HOST}\r\nconnection: keep-alive\r\ntransfer-encoding: chunked\r\n\r\n`, '5\r\nhello\r\n0\r\n\r\n', SMUGGLED] },
    { what: 'HTTP/1.0 with Transfer-Encoding: identity', bytes: [`POST /v1/d HTTP/1.0\r\nhost: ${HOST}\r\ntransfer-encoding: identity\r\n\r\nhello${SMUGGLED}`] },
  ]
  for (const { what, bytes } of refusals) {
    const { received, statuses } = await send(frontDoor, bytes)
    t.same(statuses, ['400'], `${what}: one answer, 400`)
    t.match(received, /x-stargate-error-code: bad_request\r\n/i, `${what}: the documented code`)
    t.match(received, /connection: close\r\n/i, `${what}: the connection closes with it`)
  }
  // Anything forwarded would have reached the pod by now: it answers at once.
  await new Promise((resolve) => setTimeout(resolve, 500))
  t.same(paths(), [], 'the pod received none of the refused requests, nor what was pipelined behind them')

  // Bytes the parser refuses after a complete request: that request's own answer, nothing else.
  const close = await send(frontDoor, [`POST /v1/close HTTP/1.1\r\nhost: ${HOST}\r\nconnection: close\r\ncontent-length: 5\r\n\r\nhello${SMUGGLED}`])
  t.same(close.statuses, ['200'], 'after a request with connection: close, the extra bytes are ignored: the client gets the pod\'s answer, no 400')
  const garbage = await send(frontDoor, [`GET /v1/garbage HTTP/1.1\r\nhost: ${HOST}\r\n\r\nNOT HTTP\r\n\r\n`])
  t.same(garbage.statuses, ['200'], 'after a keep-alive request, unparseable bytes: the pod\'s answer, no 400')
  t.match(garbage.received, /connection: close\r\n/i, 'and its answer says the connection closes')
  t.same(paths(), ['/v1/close', '/v1/garbage'], 'the pod received exactly the requests the client got answers for')

  // A chunked body that breaks off into bytes the parser refuses, once the pod has the head.
  // (Requests pipelined behind the refusals above are counted client_aborted too: never answered.)
  const abortedBefore = await router.metric('stargate_k8s_router_http_requests_total', { outcome: 'client_aborted', status_class: '4xx' }) ?? 0
  const cut = await send(frontDoor, [`POST /hold HTTP/1.1\r\nhost: ${HOST}\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n`, 'zz\r\nnot a chunk\r\n\r\n'], 500)
  t.same(cut.statuses, [], 'a body broken mid-request cuts the connection: no 400 for a request the pod has')
  const held = await waitFor(() => bodies.get('/hold'), { message: 'the pod\'s connection closed' })
  t.notMatch(held, /0\r\n\r\n$/, `the pod never got the end of that body (it got ${JSON.stringify(held)})`)
  await waitFor(async () => await router.metric('stargate_k8s_router_http_requests_total', { outcome: 'client_aborted', status_class: '4xx' }) === abortedBefore + 1, { message: 'counted as client_aborted' })

  // With nothing in flight, a parse error is still answered 400.
  const plain = await send(frontDoor, ['NOT HTTP\r\n\r\n'])
  t.same(plain.statuses, ['400'], 'bytes that are not HTTP on a fresh connection: 400')
  t.equal(await router.livez(), 200)
})
