// Pipelined HTTP/1.1 requests were forwarded concurrently. Node's HTTP server hands
// every request it parsed from a read to the application at once, and the forwarder sent each
// to a pod right away, up to the client's share of the pod's connections (256 of 1,024). Four
// connections from four addresses, each pipelining 300 GETs for 10 MiB answers and never
// reading, held all 1,024 connections of the pod and cost 39 MiB of RSS per connection; the
// memory model assumed one request in flight per HTTP/1.1 connection. HTTP/1.1 answers leave
// in request order anyway (RFC 9112 §9.3.2): running them at once bought the client nothing.
//
// The defence (lib/serial-requests.ts, forwarder.ts): an HTTP/1.1 connection's requests are
// forwarded one at a time, and a connection with more than 16 waiting is closed.
//
// What the test sends: 4 connections from 4 addresses each pipelining 16 GETs for 10 MiB and
// never reading; one pipelining 300; a client pipelining 10 GETs and reading the answers. What
// it checks: the pod sees at most one request per connection at a time, the router's RSS, the
// 300-request connection closed and counted, the reading client's 10 answers in order.
import t from 'tap'
import http from 'node:http'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import { probe, rssBytes } from '../fixtures/fault-probe.ts'
import { rawExchange } from '../fixtures/http-client.ts'
import { sleep, waitFor } from '../fixtures/wait.ts'

t.setTimeout(90_000)

const IP = '127.0.1.178'
const HOST = 'stargate-0.stargate.external'

t.test('pipelined HTTP/1.1 requests reach the pod one at a time per connection', async (t) => {
  let open = 0
  let maxOpen = 0
  let seen = 0
  const pod = http.createServer((req, res) => {
    seen++
    open++
    maxOpen = Math.max(maxOpen, open)
    res.on('close', () => { open-- })
    req.resume()
    const url = new URL(req.url ?? '/', 'http://pod')
    if (url.pathname !== '/big') { res.end(`answer ${url.searchParams.get('i') ?? ''}`); return }
    const chunk = Buffer.alloc(64 * 1024, 0x61)
    let left = 160 // 10 MiB
    const pump = (): void => { while (left-- > 0) if (!res.write(chunk)) { res.once('drain', pump); return } res.end() }
    pump()
  })
  await new Promise<void>((resolve) => { pod.listen(0, IP, resolve) })
  t.teardown(() => { pod.closeAllConnections(); pod.close() })
  const targets = join(await tempDir(t, 'stargate-pipelining-'), 'targets.yaml')
  await writeFile(targets, `targets:\n  - {identity: stargate-0, address: ${IP}, grpcPort: 50051, quicPort: 50052, httpPort: ${(pod.address() as AddressInfo).port}}\n`)
  const { p, frontDoor, health } = await startReadyRouter(t, ['--targets-file', targets, '--http-response-stall-timeout-ms', '600000'])
  const router = probe(health)

  // A client that reads: every answer, in order, each request forwarded after the previous one.
  const requests = Array.from({ length: 10 }, (_, i) => `GET /echo?i=${i} HTTP/1.1\r\nhost: ${HOST}\r\n${i === 9 ? 'connection: close\r\n' : ''}\r\n`).join('')
  const answers = await rawExchange(frontDoor, requests)
  t.same([...answers.matchAll(/answer (\d+)/g)].map((m) => Number(m[1])), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], '10 pipelined requests answered in order')
  t.equal(maxOpen, 1, 'the pod saw them one at a time')

  // Readers that never read: one pod request per connection, whatever they pipeline.
  const rssBefore = await rssBytes(p.child.pid as number)
  const sockets: net.Socket[] = []
  t.teardown(() => { for (const s of sockets) s.destroy() })
  for (let c = 0; c < 4; c++) {
    const s = net.connect({ port: frontDoor, host: '127.0.0.1', localAddress: `127.0.5.${c + 1}` }, () => {
      s.write(Array.from({ length: 16 }, (_, i) => `GET /big?i=${i} HTTP/1.1\r\nhost: ${HOST}\r\n\r\n`).join(''))
    })
    s.on('error', () => {})
    s.pause()
    sockets.push(s)
  }
  await waitFor(() => open === 4, { message: 'one request per connection at the pod' })
  await sleep(3000)
  const rssAfter = await rssBytes(p.child.pid as number)
  t.equal(open, 4, `still one per connection after 3 s (${seen - 10} of their 64 requests reached the pod)`)
  t.equal(await router.metric('stargate_k8s_router_http_requests_in_flight'), 4, 'four requests in flight, the rest waiting')
  t.ok(rssAfter - rssBefore < 64 * 1024 * 1024, `RSS grew ${((rssAfter - rssBefore) / 1048576).toFixed(1)} MiB for the 4 connections`)
  for (const s of sockets) s.destroy()
  await waitFor(() => open === 0, { message: 'the pod requests aborted once the clients left' })

  // Beyond the bound: the connection is closed.
  const flood = await rawExchange(frontDoor, Array.from({ length: 300 }, (_, i) => `GET /echo?i=${i} HTTP/1.1\r\nhost: ${HOST}\r\n\r\n`).join(''))
  t.ok(!/answer 299/.test(flood), `a connection pipelining 300 requests is closed before the last is answered (${[...flood.matchAll(/answer /g)].length} answered)`)
  t.equal(await router.metric('stargate_k8s_router_http_client_limit_refusals_total', { reason: 'pipelined_requests' }), 1, `counted as pipelined_requests (${String(await router.metric('stargate_k8s_router_http_client_limit_refusals_total', { reason: 'pipelined_requests' }))})`)
  t.equal(await router.livez(), 200, 'the router serves on')
})
