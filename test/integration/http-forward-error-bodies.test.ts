// One error catalogue: the front door's own refusals (a request Node's parser gives up
// on, an oversized header list over HTTP/1.1 and HTTP/2) and a request target undici cannot send
// upstream carry the same JSON body and x-stargate-error-code as the forwarder's errors, from
// HTTP_ERRORS (lib/http-forward/errors.ts; docs/errors.md).
import t from 'tap'
import http2 from 'node:http2'
import { StubPods } from '../fixtures/stub-pods.ts'
import { waitFor } from '../fixtures/wait.ts'
import { rawExchange } from '../fixtures/http-client.ts'

function raw (port: number, bytes: string): Promise<string> {
  return rawExchange(port, bytes, 5000)
}

/** Status line, the x-stargate-error-code field and the JSON body of a raw HTTP/1.1 answer. */
function parsed (answer: string): { status: string, header: string | undefined, body: unknown } {
  const [head = '', body = ''] = answer.split('\r\n\r\n', 2)
  const lines = head.split('\r\n')
  const header = lines.find((line) => line.toLowerCase().startsWith('x-stargate-error-code:'))?.slice(22).trim()
  return { status: lines[0] ?? '', header, body: body === '' ? null : JSON.parse(body) }
}

t.test('a request line Node cannot parse is 400 bad_request with the catalogue body', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1)
  const answer = parsed(await raw(pods.kube.frontDoorPort, 'HELLO THERE\r\n\r\n'))
  t.same(answer, { status: 'HTTP/1.1 400 Bad Request', header: 'bad_request', body: { error: { code: 'bad_request', message: 'malformed request: it cannot be parsed or forwarded as sent' } } })
})

t.test('an asterisk-form request (OPTIONS *) cannot be forwarded: 400 bad_request, nothing reaches a pod', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1)
  const answer = parsed(await raw(pods.kube.frontDoorPort, 'OPTIONS * HTTP/1.1\r\nHost: stargate-0.stargate.external\r\nConnection: close\r\n\r\n'))
  t.equal(answer.status, 'HTTP/1.1 400 Bad Request')
  t.equal(answer.header, 'bad_request')
  t.same(answer.body, { error: { code: 'bad_request', message: 'malformed request: it cannot be parsed or forwarded as sent' } })
  t.equal(pods.llms.get('stargate-0')?.requests.length, 0, 'nothing reached the pod')
})

t.test('oversized HTTP/1.1 request headers are 431 headers_too_large naming the limit', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http2-max-header-list-bytes', '4096'] })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1)
  const answer = parsed(await raw(pods.kube.frontDoorPort, `GET / HTTP/1.1\r\nHost: stargate-0.stargate.external\r\nX-Pad: ${'p'.repeat(8000)}\r\n\r\n`))
  t.same(answer, { status: 'HTTP/1.1 431 Request Header Fields Too Large', header: 'headers_too_large', body: { error: { code: 'headers_too_large', message: 'request headers exceed 4096 bytes' } } })
})

t.test('oversized HTTP/2 request headers are 431 headers_too_large with the same body', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http2-max-header-list-bytes', '4096'] })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1)
  const session = http2.connect(`http://127.0.0.1:${pods.kube.frontDoorPort}`)
  t.teardown(() => { session.destroy() })
  session.on('error', () => {})
  const answer = await new Promise<{ status: unknown, header: unknown, body: string }>((resolve, reject) => {
    const stream = session.request({ ':path': '/', ':authority': 'stargate-0.stargate.external', 'x-pad': 'p'.repeat(8000) })
    let body = ''
    let head: http2.IncomingHttpHeaders = {}
    stream.setEncoding('utf8')
    stream.on('response', (headers) => { head = headers })
    stream.on('data', (chunk: string) => { body += chunk })
    stream.on('end', () => { resolve({ status: head[':status'], header: head['x-stargate-error-code'], body }) })
    stream.on('error', reject)
  })
  t.same({ ...answer, body: JSON.parse(answer.body) }, { status: 431, header: 'headers_too_large', body: { error: { code: 'headers_too_large', message: 'request headers exceed 4096 bytes' } } })
  t.equal(pods.llms.get('stargate-0')?.requests.length, 0, 'nothing reached the pod')
})
