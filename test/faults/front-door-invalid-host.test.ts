// A Host (HTTP/1.1) or :authority (HTTP/2) that is not a valid host[:port] is the client's
// fault and is answered 400 bad_request before it is routed. The failure mode: a host that
// opens an IPv6 bracket and never closes it ("[", "[::1", "[1.2.3.4") went on to undici, which
// asserts while deriving a TLS server name from it (getHostname: assert(idx !== -1)); the
// client got 502 upstream_error, the router logged `upstream request failed` at warn naming a
// healthy pod, and http_requests_total{outcome="upstream_error"}, what operators alert on,
// moved at any client's will. RFC 9112 §3.2: a Host field with an invalid value is answered
// 400; RFC 9110 §7.2 / RFC 3986 §3.2.2: the host is a reg-name, an IPv4 address or a bracketed
// IP literal.
//
// What the test sends: GET with each such host over HTTP/1.1 (raw bytes) and as :authority over
// h2c (Node's client); what it checks: 400 bad_request each time, the pod saw nothing, no
// upstream_error counted, no warn line blaming a pod.
import t from 'tap'
import http from 'node:http'
import http2 from 'node:http2'
import type { AddressInfo } from 'node:net'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import { probe } from '../fixtures/fault-probe.ts'
import { rawExchange } from '../fixtures/http-client.ts'

t.setTimeout(60_000)

const IP = '127.0.1.172'
const HOSTS = ['[', '[::1', '[1.2.3.4', '[::1]x', 'stargate-0.stargate.external:http']
/** Userinfo (RFC 9110 §4.2.4): 400 over HTTP/1.1; over HTTP/2 nghttp2 resets the stream itself (RFC 9113 §8.3.1). */
const USERINFO = 'user@stargate-0.stargate.external'

function h2Get (port: number, authority: string): Promise<{ status: number, code: string } | { reset: number }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`)
    session.on('error', reject)
    const stream = session.request({ ':method': 'GET', ':path': '/v1/models', ':authority': authority })
    stream.on('response', (headers) => {
      resolve({ status: Number(headers[':status']), code: String(headers['x-stargate-error-code']) })
      session.close()
    })
    stream.on('error', () => {})
    stream.on('close', () => {
      resolve({ reset: stream.rstCode })
      session.close()
    })
    stream.resume()
    stream.end()
  })
}

t.test('a Host or :authority that is no valid host[:port] is a bad request, not a pod failure', async (t) => {
  let podSaw = 0
  const pod = http.createServer((req, res) => { podSaw++; req.resume(); res.end('ok') })
  await new Promise<void>((resolve) => { pod.listen(0, IP, resolve) })
  t.teardown(() => { pod.closeAllConnections(); pod.close() })
  const targets = join(await tempDir(t, 'stargate-host-'), 'targets.yaml')
  await writeFile(targets, `targets:\n  - {identity: stargate-0, address: ${IP}, grpcPort: 50051, quicPort: 50052, httpPort: ${(pod.address() as AddressInfo).port}}\n`)
  const { p, frontDoor, health } = await startReadyRouter(t, ['--targets-file', targets])
  for (const host of HOSTS) {
    const answer = await rawExchange(frontDoor, `GET /v1/models HTTP/1.1\r\nhost: ${host}\r\nconnection: close\r\n\r\n`)
    t.match(answer.split('\r\n')[0], /^HTTP\/1\.1 400 /, `HTTP/1.1 Host ${host}: 400 (got ${answer.split('\r\n')[0] ?? ''})`)
    t.match(answer, /x-stargate-error-code: bad_request/i, `HTTP/1.1 Host ${host}: the code bad_request`)
    t.same(await h2Get(frontDoor, host), { status: 400, code: 'bad_request' }, `h2 :authority ${host}: 400 bad_request`)
  }
  const userinfo = await rawExchange(frontDoor, `GET /v1/models HTTP/1.1\r\nhost: ${USERINFO}\r\nconnection: close\r\n\r\n`)
  t.match(userinfo, /^HTTP\/1\.1 400 [^]*x-stargate-error-code: bad_request/i, 'HTTP/1.1 Host with userinfo: 400 bad_request')
  t.same(await h2Get(frontDoor, USERINFO), { reset: http2.constants.NGHTTP2_PROTOCOL_ERROR }, 'h2 :authority with userinfo: reset by nghttp2 (PROTOCOL_ERROR)')
  const absolute = await rawExchange(frontDoor, 'GET http://[::1/v1/models HTTP/1.1\r\nhost: stargate-0.stargate.external\r\nconnection: close\r\n\r\n')
  t.match(absolute.split('\r\n')[0], /^HTTP\/1\.1 400 /, 'an absolute-form target with an unbalanced bracket: 400')
  t.equal(podSaw, 0, 'the pod saw nothing')
  const router = probe(health)
  t.equal(await router.metricSum('stargate_k8s_router_http_requests_total', { outcome: 'upstream_error' }), 0, 'no upstream_error counted against the pod')
  t.equal(await router.metricSum('stargate_k8s_router_http_requests_total', { outcome: 'bad_request' }), HOSTS.length * 2 + 2, 'each counted as bad_request')
  const blamed = p.logs().filter((l) => l.msg === 'upstream request failed' || (typeof l.level === 'number' && l.level >= 40 && l.pod !== undefined))
  t.same(blamed, [], 'no warn line names the pod')
})
