// FAILS at 25c8c0e (independent attack run): a Host (or :authority) that opens an IPv6 bracket
// and never closes it ("[", "[::1", "[1.2.3.4") is answered 502 upstream_error, and the router
// logs `upstream request failed` at warn naming the pod, with err ERR_ASSERTION. The request
// never reached the pod: undici asserts while deriving a TLS server name from the host
// (lib/core/util.js getHostname: assert(idx !== -1)). errors.md promises 400 bad_request for a
// header that cannot be sent upstream as given; instead any client can make the router blame
// a healthy pod, and move http_requests_total{outcome="upstream_error"} (what an operator
// alerts on) at will. Over HTTP/2 the same authority gets the same 502.
//
// What the test sends: GET with Host "[::1" over HTTP/1.1; what it checks: 400 bad_request, the
// pod saw nothing, no upstream_error counted.
import t from 'tap'
import http from 'node:http'
import net, { type AddressInfo } from 'node:net'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import { probe } from '../fixtures/fault-probe.ts'

t.setTimeout(60_000)

const IP = '127.0.1.172'

function rawRequest (port: number, request: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1', () => { socket.write(request) })
    let text = ''
    socket.setEncoding('latin1')
    socket.on('data', (chunk: string) => { text += chunk })
    socket.on('error', () => {})
    socket.on('close', () => { resolve(text) })
  })
}

t.test('a Host with an unbalanced IPv6 bracket is a bad request, not a pod failure', async (t) => {
  let podSaw = 0
  const pod = http.createServer((req, res) => { podSaw++; req.resume(); res.end('ok') })
  await new Promise<void>((resolve) => { pod.listen(0, IP, resolve) })
  t.teardown(() => { pod.closeAllConnections(); pod.close() })
  const targets = join(await tempDir(t, 'stargate-host-'), 'targets.yaml')
  await writeFile(targets, `targets:\n  - {identity: stargate-0, address: ${IP}, grpcPort: 50051, quicPort: 50052, httpPort: ${(pod.address() as AddressInfo).port}}\n`)
  const { frontDoor, health } = await startReadyRouter(t, ['--targets-file', targets])
  const answer = await rawRequest(frontDoor, 'GET /v1/models HTTP/1.1\r\nhost: [::1\r\nconnection: close\r\n\r\n')
  t.match(answer.split('\r\n')[0], /^HTTP\/1\.1 400 /, `400 (got ${answer.split('\r\n')[0] ?? ''})`)
  t.match(answer, /x-stargate-error-code: bad_request/i, 'with the code bad_request')
  t.equal(podSaw, 0, 'the pod saw nothing')
  t.equal(await probe(health).metricSum('stargate_k8s_router_http_requests_total', { outcome: 'upstream_error' }), 0, 'no upstream_error counted against the pod')
})
