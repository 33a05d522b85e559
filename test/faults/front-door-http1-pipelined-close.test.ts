// Requests pipelined behind an HTTP/1.1 answer that closes the connection, and behind requests
// still waiting for their turn.
//
// - A POST refused at its head with `connection: close` while its body was still coming (400
//   host_mismatch) had the DELETE pipelined behind it in the same write forwarded to the pod:
//   Node's parser kept reading the same bytes and handed the DELETE over before the 400 was
//   out, and the forwarder only checked whether the socket was already destroyed. The client
//   never got the DELETE's answer (the connection closed after the 400), yet the pod ran it.
//   RFC 9112 §9.6: a server that sends close must not process further requests on that
//   connection. The same held for a connection told to drain (shutdown): requests pipelined
//   after its first `connection: close` answer reached the pod and their answers were lost.
// - A CONNECT pipelined behind a request still in flight had its raw 405 written ahead of that
//   request's answer: the client read the 405 as the answer to its GET, and the GET's real
//   answer was lost. It now waits its turn as every other refusal does: the GET's answer goes
//   out (saying close) and the connection closes.
// - A waiting request refused at once lets the next one run; waiting requests whose client left
//   are counted client_aborted.
//
// What the test sends: raw bytes from a socket to a router process with a real pod (StubLlm).
// What it checks: what the pod saw, the answers the client read, the connection closing, and
// stargate_k8s_router_http_requests_total.
import t from 'tap'
import net from 'node:net'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import { StubLlm } from '../fixtures/stub-llm.ts'
import { probe } from '../fixtures/fault-probe.ts'
import { sleep, waitFor } from '../fixtures/wait.ts'

t.setTimeout(120_000)

const IP = '127.0.1.179'
const HOST = 'stargate-0.stargate.external'

interface Exchange {
  /** Everything the router sent until it closed the connection. */
  readonly received: string
  /** The status of each response in it. */
  readonly statuses: string[]
}

/** Writes bytes in one write; resolves once the router closed the connection (rejects after 15 s). */
function send (port: number, bytes: string): Promise<Exchange> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => { socket.write(bytes) })
    let received = ''
    socket.setEncoding('latin1')
    socket.on('data', (chunk: string) => { received += chunk })
    socket.on('error', () => {})
    const timer = setTimeout(() => { socket.destroy(); reject(new Error(`the router kept the connection open; received ${JSON.stringify(received)}`)) }, 15_000)
    socket.on('close', () => {
      clearTimeout(timer)
      resolve({ received, statuses: [...received.matchAll(/HTTP\/1\.1 (\d{3}) [^\r]*\r\n/g)].map((m) => m[1] as string) })
    })
  })
}

t.test('nothing pipelined behind an answer that closes the connection is processed', async (t) => {
  const llm = await StubLlm.start({ podName: 'stargate-0', ip: IP })
  t.teardown(() => { llm.close() })
  const targets = join(await tempDir(t, 'stargate-pipelined-close-'), 'targets.yaml')
  await writeFile(targets, `targets:\n  - {identity: stargate-0, address: ${IP}, grpcPort: 50051, quicPort: 50052, httpPort: ${llm.port}}\n`)
  const { p, frontDoor, health } = await startReadyRouter(t, ['--targets-file', targets, '--shutdown-drain-timeout-ms', '10000'])
  const router = probe(health)
  const aborted = async (): Promise<number> => await router.metric('stargate_k8s_router_http_requests_total', { outcome: 'client_aborted', status_class: '4xx' }) ?? 0

  // A refusal with `connection: close` while the body is pending, a DELETE behind it.
  const refused = `POST http://other/a HTTP/1.1\r\nhost: ${HOST}\r\ncontent-length: 5\r\n\r\nhello`
  const deleted = `DELETE /echo?deleted HTTP/1.1\r\nhost: ${HOST}\r\n\r\n`
  const abortedBefore = await aborted()
  const warm = `GET /echo?warm HTTP/1.1\r\nhost: ${HOST}\r\nconnection: close\r\n\r\n`
  for (let i = 0; i < 20; i++) {
    // An idle pod connection in the router's pool: a DELETE forwarded would reach the pod at once.
    t.same((await send(frontDoor, warm)).statuses, ['200'], `run ${i}: a request before it is forwarded`)
    const { received, statuses } = await send(frontDoor, refused + deleted)
    t.same(statuses, ['400'], `run ${i}: the client reads exactly the 400`)
    if (i === 0) t.match(received, /x-stargate-error-code: host_mismatch\r\n[^]*connection: close\r\n/i, 'host_mismatch, connection: close')
  }
  await sleep(300)
  t.equal(llm.requests.filter((r) => r.method === 'DELETE').length, 0, 'the pod never received the DELETE')
  t.equal(await aborted() - abortedBefore, 20, 'each DELETE counted client_aborted')

  // A waiting request refused at once (404 unknown_target) lets the next one run, in order.
  const mixed = await send(frontDoor, [
    `GET /slow?ms=500 HTTP/1.1\r\nhost: ${HOST}\r\n\r\n`,
    'GET /echo HTTP/1.1\r\nhost: stargate-9.stargate.external\r\n\r\n',
    `GET /echo?last HTTP/1.1\r\nhost: ${HOST}\r\nconnection: close\r\n\r\n`,
  ].join(''))
  t.same(mixed.statuses, ['200', '404', '200'], 'answers 200, 404, 200 in order')
  t.match(mixed.received, /x-stargate-error-code: unknown_target\r\n/i, 'the 404 is unknown_target')
  t.match(mixed.received, /"url":"\/echo\?last"/, 'the last request was forwarded')

  // Waiting requests whose client left before their turn: counted client_aborted.
  const gone = await aborted()
  const seen = llm.requests.length
  const socket = net.connect(frontDoor, '127.0.0.1', () => {
    socket.write(`GET /slow?ms=1500 HTTP/1.1\r\nhost: ${HOST}\r\n\r\n` + `GET /echo?a HTTP/1.1\r\nhost: ${HOST}\r\n\r\n`.repeat(2))
  })
  socket.on('error', () => {})
  await waitFor(() => llm.requests.length === seen + 1, { message: 'the slow request reached the pod' })
  socket.destroy()
  await waitFor(async () => await aborted() - gone >= 3, { message: 'the slow request and the two waiting ones counted client_aborted' })
  await sleep(300)
  t.equal(await aborted() - gone, 3, 'the two waiting requests (and the slow one, cut) counted client_aborted')
  t.equal(llm.requests.length, seen + 1, 'the waiting requests never reached the pod')

  // A CONNECT pipelined behind a request in flight: that request's answer, then the connection closes.
  const connect = await send(frontDoor, `GET /slow?ms=1500 HTTP/1.1\r\nhost: ${HOST}\r\n\r\nCONNECT x:443 HTTP/1.1\r\nhost: x:443\r\n\r\n`)
  t.same(connect.statuses, ['200'], 'the client reads the GET\'s answer, no 405 in its place')
  t.match(connect.received, /\r\n\r\n\{"pod":"stargate-0"\}$/, 'its body intact')
  t.match(connect.received, /connection: close\r\n/i, 'and it says the connection closes')
  // On an idle connection a CONNECT is still answered 405.
  const idle = await send(frontDoor, 'CONNECT x:443 HTTP/1.1\r\nhost: x:443\r\n\r\n')
  t.same(idle.statuses, ['405'], 'a CONNECT on an idle connection: 405')
  t.match(idle.received, /x-stargate-error-code: method_not_allowed\r\n/i)

  // A connection told to drain (shutdown) while a streamed answer is under way (its head out,
  // so it still says keep-alive): the next request's answer says close (here a 404
  // unknown_target, refused at once), and the request pipelined after it never reaches the pod.
  // Two pod connections in the router's pool: one idle while the streamed answer holds the other.
  const twoPodConnections = `GET /slow?ms=300 HTTP/1.1\r\nhost: ${HOST}\r\nconnection: close\r\n\r\n`
  await Promise.all([send(frontDoor, twoPodConnections), send(frontDoor, twoPodConnections)])
  const before = llm.requests.length
  const body = '{"stream":true,"max_tokens":40}'
  const draining = new Promise<Exchange>((resolve, reject) => {
    const s = net.connect(frontDoor, '127.0.0.1', () => { s.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: ${HOST}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`) })
    let received = ''
    s.setEncoding('latin1')
    s.on('data', (chunk: string) => { received += chunk })
    s.on('error', () => {})
    const timer = setTimeout(() => { s.destroy(); reject(new Error(`the draining connection stayed open; received ${JSON.stringify(received)}`)) }, 15_000)
    s.on('close', () => { clearTimeout(timer); resolve({ received, statuses: [...received.matchAll(/HTTP\/1\.1 (\d{3}) [^\r]*\r\n/g)].map((m) => m[1] as string) }) })
    void waitFor(() => received.includes('data:'), { message: 'the streamed answer started' }).then(() => {
      p.child.kill('SIGTERM')
      setTimeout(() => { s.write(`GET /echo HTTP/1.1\r\nhost: stargate-9.stargate.external\r\n\r\nGET /echo?after HTTP/1.1\r\nhost: ${HOST}\r\n\r\n`) }, 200)
    })
  })
  const drained = await draining
  t.same(llm.requests.slice(before).map((r) => r.url), ['/v1/chat/completions'], 'the request after the answer that closes the connection never reached the pod')
  t.same(drained.statuses, ['200', '404'], 'the client read the streamed answer and the 404, then the connection closed')
  t.match(drained.received, /x-stargate-error-code: unknown_target\r\n[^]*connection: close\r\n|connection: close\r\n[^]*x-stargate-error-code: unknown_target\r\n/i, 'the 404 says the connection closes')
})
