// Request lines and targets Node's HTTP/1.1 parser takes but that are no request to forward,
// each answered with a documented code (docs/errors.md) instead of being forwarded or dropped:
//
// - CONNECT (HTTP/1.1): Node hands the socket to a 'connect' listener, and without one closes
//   it unanswered; the client saw its connection closed with no status. Now 405
//   method_not_allowed with `allow`, the connection closed. Over HTTP/2 the same 405.
// - `GET /a` (HTTP/0.9 form, no version) and `GET /a HTTP/2.0` on an HTTP/1.1 connection were
//   forwarded to the pod as GETs. RFC 9112 §2.3: neither is HTTP/1.x; HTTP/2 starts with its
//   preface. Now 400 bad_request and 505 http_version_not_supported, the connection closed,
//   nothing pipelined behind them read.
// - A `#fragment` in the request target reached the pod as part of the path. RFC 9112 §3.2: a
//   request target never carries a fragment. Now 400 bad_request, over HTTP/1.1 (origin and
//   absolute form) and HTTP/2.
//
// What the test sends: those bytes from a raw socket (HTTP/1.1) and Node's HTTP/2 client; what
// it checks: the status, the x-stargate-error-code and the body code the client gets, the
// connection closing where it must, and that the pod saw none of these requests.
import t from 'tap'
import http2 from 'node:http2'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import { StubLlm } from '../fixtures/stub-llm.ts'
import { rawExchange } from '../fixtures/http-client.ts'

t.setTimeout(60_000)

const IP = '127.0.1.177'
const HOST = 'stargate-0.stargate.external'

interface Answer { status: string, code: string, bodyCode: string, allow: string, closed: boolean, rest: string }

/** The first response of a raw HTTP/1.1 exchange; closed: the router closed the connection (before the client's 3 s). */
async function raw (port: number, bytes: string): Promise<Answer> {
  const started = Date.now()
  const out = await rawExchange(port, bytes, 3000)
  const [head = '', body = ''] = out.split('\r\n\r\n')
  const field = (name: string): string => new RegExp(`^${name}: (.*)$`, 'im').exec(head)?.[1] ?? ''
  let bodyCode: string
  try {
    bodyCode = (JSON.parse(body.slice(0, Number(field('content-length')) || body.length)) as { error: { code: string } }).error.code
  } catch {
    bodyCode = '(no JSON body)'
  }
  return { status: head.split('\r\n')[0] ?? '', code: field('x-stargate-error-code'), bodyCode, allow: field('allow'), closed: Date.now() - started < 2500, rest: out.slice(head.length + 4 + (Number(field('content-length')) || 0)) }
}

function h2 (port: number, headers: http2.OutgoingHttpHeaders): Promise<{ status: number, code: string }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`)
    session.on('error', reject)
    const stream = session.request(headers, { endStream: headers[':method'] !== 'CONNECT' })
    stream.on('response', (h) => { resolve({ status: Number(h[':status']), code: String(h['x-stargate-error-code']) }); session.close() })
    stream.on('error', () => {})
    stream.on('close', () => { resolve({ status: -stream.rstCode, code: '' }); session.close() })
    stream.resume()
  })
}

t.test('request lines and targets that are no request to forward get their documented answer', async (t) => {
  const llm = await StubLlm.start({ podName: 'stargate-0', ip: IP })
  t.teardown(() => { llm.close() })
  const targets = join(await tempDir(t, 'stargate-request-line-'), 'targets.yaml')
  await writeFile(targets, `targets:\n  - {identity: stargate-0, address: ${IP}, grpcPort: 50051, quicPort: 50052, httpPort: ${llm.port}}\n`)
  const { frontDoor } = await startReadyRouter(t, ['--targets-file', targets])
  const pipelined = `GET /echo HTTP/1.1\r\nhost: ${HOST}\r\n\r\n`

  const connect = await raw(frontDoor, `CONNECT ${HOST}:443 HTTP/1.1\r\nhost: ${HOST}:443\r\n\r\n${pipelined}`)
  t.match(connect, { status: 'HTTP/1.1 405 Method Not Allowed', code: 'method_not_allowed', bodyCode: 'method_not_allowed', allow: /GET.*POST/, closed: true, rest: '' }, 'HTTP/1.1 CONNECT: 405 method_not_allowed, connection closed')

  const v09 = await raw(frontDoor, `GET /echo\r\n\r\n${pipelined}`)
  t.match(v09, { status: 'HTTP/1.1 400 Bad Request', code: 'bad_request', bodyCode: 'bad_request', closed: true, rest: '' }, 'HTTP/0.9 request line: 400 bad_request, connection closed, nothing after it answered')

  const v09host = await raw(frontDoor, `GET /echo\r\nhost: ${HOST}\r\n\r\n`)
  t.match(v09host, { status: 'HTTP/1.1 400 Bad Request', code: 'bad_request', closed: true }, 'HTTP/0.9 request line with a Host: 400 bad_request')

  const v20 = await raw(frontDoor, `GET /echo HTTP/2.0\r\nhost: ${HOST}\r\n\r\n${pipelined}`)
  t.match(v20, { status: 'HTTP/1.1 505 HTTP Version Not Supported', code: 'http_version_not_supported', bodyCode: 'http_version_not_supported', closed: true, rest: '' }, 'HTTP/2.0 request line: 505 http_version_not_supported, connection closed')

  const fragment = await raw(frontDoor, `GET /echo#frag HTTP/1.1\r\nhost: ${HOST}\r\nconnection: close\r\n\r\n`)
  t.match(fragment, { status: 'HTTP/1.1 400 Bad Request', code: 'bad_request', bodyCode: 'bad_request' }, 'a #fragment in an origin-form target: 400 bad_request')
  const absolute = await raw(frontDoor, `GET http://${HOST}/echo?a=1#frag HTTP/1.1\r\nhost: ${HOST}\r\nconnection: close\r\n\r\n`)
  t.match(absolute, { status: 'HTTP/1.1 400 Bad Request', code: 'bad_request' }, 'a #fragment in an absolute-form target: 400 bad_request')
  t.same(await h2(frontDoor, { ':method': 'GET', ':path': '/echo#frag', ':authority': HOST }), { status: 400, code: 'bad_request' }, 'a #fragment in an HTTP/2 :path: 400 bad_request')
  t.same(await h2(frontDoor, { ':method': 'CONNECT', ':authority': `${HOST}:443` }), { status: 405, code: 'method_not_allowed' }, 'an HTTP/2 CONNECT: 405 method_not_allowed')

  t.equal(llm.requests.length, 0, 'the pod saw none of them')
  const ok = await raw(frontDoor, `GET /echo?a=1 HTTP/1.1\r\nhost: ${HOST}\r\nconnection: close\r\n\r\n`)
  t.match(ok.status, /^HTTP\/1\.1 200 /, 'an ordinary request is forwarded')
  t.equal(llm.requests.length, 1)
})
