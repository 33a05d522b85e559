// SPEC §12: what an LLM client sees from the limits that keep a slow client from
// costing a pod what it cannot afford. Request bodies are read before a pod connection is
// taken (up to --http-body-buffer-bytes), must keep --http-body-min-bytes-per-second over each
// --http-body-rate-window-ms (408 body_rate_too_low) and end within --http-body-deadline-ms
// (408 body_deadline_exceeded), time the router holds them back not counting; one client
// address holds at most --http-upstream-max-client-share-percent of a pod's connections (429
// client_over_share), the address a trusted proxy names being the client's. A request is
// admitted again once its body is in (the pod may have filled, or left, meanwhile: 503
// upstream_busy, target_unavailable, no_ready_targets, or another pod). Each over HTTP/1.1
// from raw sockets, the rate also over HTTP/2; the failure mode before: a trickling client took
// a pod connection at its request head and kept it for as long as it kept trickling.
import t from 'tap'
import net from 'node:net'
import http from 'node:http'
import http2 from 'node:http2'
import { StubPods } from '../fixtures/stub-pods.ts'
import { sleep, waitFor } from '../fixtures/wait.ts'

t.setTimeout(120_000)

const HOST = 'stargate-0.stargate.external'

interface Raw {
  readonly socket: net.Socket
  text: string
  closed: boolean
  write (data: string): void
}

function raw (port: number, first: string, localAddress = '127.0.0.1'): Raw {
  const socket = net.connect({ port, host: '127.0.0.1', localAddress }, () => { socket.write(first) })
  const client: Raw = {
    socket,
    text: '',
    closed: false,
    write (data) { if (!socket.destroyed) socket.write(data) },
  }
  socket.on('data', (chunk: Buffer) => { client.text += chunk.toString('latin1') })
  socket.on('error', () => {})
  socket.on('close', () => { client.closed = true })
  return client
}

/** Status line, error code and JSON body of a complete raw HTTP/1.1 answer. */
function answer (text: string): { status: string, code: string | undefined, body: string } {
  const head = text.slice(0, text.indexOf('\r\n\r\n'))
  return {
    status: head.slice(0, head.indexOf('\r\n')),
    code: /\r\nx-stargate-error-code: ([^\r]+)/i.exec(head)?.[1],
    body: text.slice(text.indexOf('\r\n\r\n') + 4),
  }
}

function errorJson (code: string, message: string): string {
  return JSON.stringify({ error: { code, message } })
}

/** Writes size bytes of `b`, chunk bytes every intervalMs; stops when the client is answered. */
function pace (client: Raw, size: number, chunk: number, intervalMs: number): () => void {
  let sent = 0
  const timer = setInterval(() => {
    if (client.closed || client.text !== '' || sent >= size) { clearInterval(timer); return }
    const n = Math.min(chunk, size - sent)
    client.write('b'.repeat(n))
    sent += n
  }, intervalMs)
  return () => { clearInterval(timer) }
}

function get (port: number, path: string, options: { localAddress?: string, headers?: Record<string, string> } = {}): Promise<{ status: number, code: string | undefined, body: string, res: http.IncomingMessage }> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path, agent: false, localAddress: options.localAddress, headers: { host: HOST, ...options.headers } }, (res) => {
      if (res.statusCode === 200 && path.startsWith('/sse')) {
        resolve({ status: 200, code: undefined, body: '', res })
        return
      }
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => { body += c })
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, code: res.headers['x-stargate-error-code'] as string | undefined, body, res }) })
    })
    req.on('error', reject)
  })
}

t.test('a body trickling over HTTP/2 below the minimum rate gets 408 body_rate_too_low, and the pod never sees it', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http-body-min-bytes-per-second', '100', '--http-body-rate-window-ms', '500'] })
  const session = http2.connect(`http://127.0.0.1:${pods.kube.frontDoorPort}`)
  t.teardown(() => { session.destroy() })
  const stream = session.request({ ':method': 'POST', ':path': '/echo', ':authority': HOST, 'content-type': 'application/json' })
  const timer = setInterval(() => { if (!stream.closed) stream.write('x') }, 200)
  t.teardown(() => { clearInterval(timer) })
  const reply = await new Promise<{ status: number, code: unknown, body: string, rstCode: number | undefined }>((resolve) => {
    let body = ''
    let head: http2.IncomingHttpHeaders = {}
    stream.on('response', (headers) => { head = headers })
    stream.setEncoding('utf8')
    stream.on('data', (c: string) => { body += c })
    // Closed by the router while the client is still sending (RFC 9113 §8.1: RST_STREAM NO_ERROR).
    stream.on('close', () => { resolve({ status: Number(head[':status']), code: head['x-stargate-error-code'], body, rstCode: stream.rstCode }) })
    stream.on('error', () => {})
  })
  t.same(reply, { status: 408, code: 'body_rate_too_low', body: errorJson('body_rate_too_low', 'the request body arrived more slowly than the router accepts'), rstCode: http2.constants.NGHTTP2_NO_ERROR })
  t.equal(pods.llms.get('stargate-0')?.requests.length, 0)
  t.equal(await pods.kube.metric('stargate_k8s_router_http_client_limit_refusals_total', { reason: 'body_rate_too_low' }), 1)
})

t.test('a body larger than the buffer that slows down after reaching the pod gets 408, and the pod sees the request end', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http-body-buffer-bytes', '1024', '--http-body-min-bytes-per-second', '100', '--http-body-rate-window-ms', '500'] })
  const llm = pods.llms.get('stargate-0')
  const client = raw(pods.kube.frontDoorPort, `POST /echo HTTP/1.1\r\nhost: ${HOST}\r\ncontent-length: 100000\r\n\r\n` + 'a'.repeat(2048))
  t.teardown(() => { client.socket.destroy() })
  await waitFor(() => llm?.requests.length === 1, { message: 'the request at the pod once the buffer is full' })
  const stop = pace(client, 100, 1, 200)
  t.teardown(stop)
  await waitFor(() => client.closed, { timeoutMs: 10_000, message: 'the client answered and closed' })
  const { status, code, body } = answer(client.text)
  t.equal(status, 'HTTP/1.1 408 Request Timeout')
  t.equal(code, 'body_rate_too_low')
  t.equal(body, errorJson('body_rate_too_low', 'the request body arrived more slowly than the router accepts'))
  await waitFor(() => llm?.openResponses === 0, { message: 'the pod saw the request end' })
  await waitFor(() => llm?.connections === 0, { message: 'and its connection closed, none left idle' })
})

t.test('a body still arriving at the deadline gets 408 body_deadline_exceeded, whatever its rate', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http-body-deadline-ms', '1000', '--http-body-min-bytes-per-second', '100', '--http-body-rate-window-ms', '500'] })
  // 100 bytes every 50 ms: 2,000 bytes/s, twenty times the minimum, for 5 s.
  const client = raw(pods.kube.frontDoorPort, `POST /echo HTTP/1.1\r\nhost: ${HOST}\r\ncontent-length: 10000\r\n\r\n`)
  t.teardown(() => { client.socket.destroy() })
  t.teardown(pace(client, 10_000, 100, 50))
  await waitFor(() => client.closed, { timeoutMs: 10_000, message: 'the client answered and closed' })
  const { status, code, body } = answer(client.text)
  t.equal(status, 'HTTP/1.1 408 Request Timeout')
  t.equal(code, 'body_deadline_exceeded')
  t.equal(body, errorJson('body_deadline_exceeded', 'the request body took longer than the router accepts'))
  t.equal(pods.llms.get('stargate-0')?.requests.length, 0)
  t.equal(await pods.kube.metric('stargate_k8s_router_http_client_limit_refusals_total', { reason: 'body_deadline_exceeded' }), 1)
})

t.test('time a body waits for a pod connection counts towards neither its rate nor its deadline', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http-upstream-max-connections', '1', '--http-upstream-max-client-share-percent', '0', '--http-body-buffer-bytes', '1024', '--http-body-deadline-ms', '1000', '--http-body-min-bytes-per-second', '100', '--http-body-rate-window-ms', '500'] })
  const holding = get(pods.kube.frontDoorPort, '/slow?ms=2500')
  await waitFor(() => pods.llms.get('stargate-0')?.requests.length === 1, { message: 'the only connection taken' })
  // Past the buffer, so admitted and then held back (paused) until the connection frees.
  const body = 'c'.repeat(4096)
  const waiting = raw(pods.kube.frontDoorPort, `POST /echo HTTP/1.1\r\nhost: ${HOST}\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n` + body.slice(0, 2048))
  t.teardown(() => { waiting.socket.destroy() })
  await sleep(200)
  waiting.write(body.slice(2048))
  t.equal((await holding).status, 200)
  await waitFor(() => waiting.closed, { timeoutMs: 10_000, message: 'the waiting upload answered' })
  const { status, body: echoed } = answer(waiting.text)
  t.equal(status, 'HTTP/1.1 200 OK', 'forwarded after 2.5 s in the queue, past the 1 s deadline')
  t.equal((JSON.parse(echoed) as { body: string }).body, body)
})

t.test('a body up to the buffer size reaches the pod whole, once it is all in, with a content-length', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true })
  const llm = pods.llms.get('stargate-0')
  const client = raw(pods.kube.frontDoorPort, `POST /echo HTTP/1.1\r\nhost: ${HOST}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n` + '400\r\n' + 'd'.repeat(1024) + '\r\n')
  t.teardown(() => { client.socket.destroy() })
  await sleep(300)
  t.equal(llm?.requests.length, 0, 'not forwarded while its body is incomplete')
  t.equal(llm?.accepted, 0, 'and no pod connection opened for it')
  client.write('400\r\n' + 'e'.repeat(1024) + '\r\n0\r\n\r\n')
  await waitFor(() => client.closed, { message: 'the upload answered' })
  const echo = JSON.parse(answer(client.text).body) as { body: string, headers: Record<string, string> }
  t.equal(echo.body, 'd'.repeat(1024) + 'e'.repeat(1024))
  t.equal(echo.headers['content-length'], '2048', 'sent with its length')
  t.equal(echo.headers['transfer-encoding'], undefined)
})

t.test('a body larger than the buffer takes a pod connection once the buffer is full, and arrives whole', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http-body-buffer-bytes', '1024'] })
  const llm = pods.llms.get('stargate-0')
  const body = Array.from({ length: 4096 }, (_, i) => String.fromCharCode(97 + (i % 26))).join('')
  const client = raw(pods.kube.frontDoorPort, `POST /echo HTTP/1.1\r\nhost: ${HOST}\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n` + body.slice(0, 1000))
  t.teardown(() => { client.socket.destroy() })
  await sleep(300)
  t.equal(llm?.accepted, 0, 'no pod connection while the buffer is not full')
  client.write(body.slice(1000, 2000))
  await waitFor(() => llm?.requests.length === 1, { message: 'the request at the pod once the buffer is full' })
  client.write(body.slice(2000))
  await waitFor(() => client.closed, { message: 'the upload answered' })
  t.equal((JSON.parse(answer(client.text).body) as { body: string }).body, body, 'the buffered bytes and the rest, in order')
})

t.test('one client address holds at most its share of a pod\'s connections: 429 client_over_share at the head', async (t) => {
  // 4 connections, 50 %: two requests per client.
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http-upstream-max-connections', '4', '--http-upstream-max-client-share-percent', '50'] })
  const port = pods.kube.frontDoorPort
  const streams = [await get(port, '/sse-forever'), await get(port, '/sse-forever')]
  t.teardown(() => { for (const s of streams) s.res.destroy() })
  const third = await get(port, '/v1/models')
  t.equal(third.status, 429)
  t.equal(third.code, 'client_over_share')
  t.equal(third.body, errorJson('client_over_share', 'this client holds its share of the stargate\'s connections; retry later'))
  const other = await get(port, '/status/200', { localAddress: '127.0.0.2' })
  t.equal(other.status, 200, 'another address is served')
  t.equal(await pods.kube.metric('stargate_k8s_router_http_client_limit_refusals_total', { reason: 'client_over_share' }), 1)
  for (const s of streams) s.res.destroy()
  await waitFor(async () => (await get(port, '/status/200')).status === 200, { message: 'served again once its streams end' })
})

t.test('a client over its share when its buffered body is complete gets 429 client_over_share then', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http-upstream-max-connections', '4', '--http-upstream-max-client-share-percent', '50'] })
  const port = pods.kube.frontDoorPort
  // Three heads pass (the client holds nothing yet); their bodies complete one after another.
  const uploads = [0, 1, 2].map(() => raw(port, `POST /slow?ms=3000 HTTP/1.1\r\nhost: ${HOST}\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{`))
  t.teardown(() => { for (const u of uploads) u.socket.destroy() })
  await waitFor(async () => await pods.kube.metric('stargate_k8s_router_http_request_bodies_buffering') === 3, { message: 'three bodies being read' })
  for (const u of uploads) { u.write('}'); await sleep(100) }
  await waitFor(() => uploads[2]?.closed === true, { message: 'the third answered' })
  const { status, code, body } = answer(uploads[2]?.text ?? '')
  t.equal(status, 'HTTP/1.1 429 Too Many Requests')
  t.equal(code, 'client_over_share')
  t.equal(body, errorJson('client_over_share', 'this client holds its share of the stargate\'s connections; retry later'))
  await waitFor(() => uploads[0]?.closed === true && uploads[1]?.closed === true, { message: 'the first two answered' })
  t.match(uploads[0]?.text, /^HTTP\/1\.1 200 /)
  t.match(uploads[1]?.text, /^HTTP\/1\.1 200 /)
})

t.test('behind a trusted proxy the client is the one x-forwarded-for names; from anyone else, the peer', async (t) => {
  // 4 connections, 25 %: one request per client.
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http-upstream-max-connections', '4', '--trusted-proxy-cidrs', '127.0.0.1/32'] })
  const port = pods.kube.frontDoorPort
  const viaProxy = (xff: string): Promise<Awaited<ReturnType<typeof get>>> => get(port, '/sse-forever', { headers: { 'x-forwarded-for': xff } })
  const a = await viaProxy('203.0.113.1')
  t.teardown(() => { a.res.destroy() })
  t.equal(a.status, 200)
  const b = await viaProxy('6.6.6.6, 203.0.113.2')
  t.teardown(() => { b.res.destroy() })
  t.equal(b.status, 200, 'another client behind the same proxy is served')
  const again = await viaProxy('203.0.113.2')
  t.equal(again.status, 429, 'the same client again is over its share')
  t.equal(again.code, 'client_over_share')
  const direct = await get(port, '/sse-forever', { localAddress: '127.0.0.3', headers: { 'x-forwarded-for': '203.0.113.9' } })
  t.teardown(() => { direct.res.destroy() })
  t.equal(direct.status, 200)
  const spoofed = await get(port, '/v1/models', { localAddress: '127.0.0.3', headers: { 'x-forwarded-for': '203.0.113.10' } })
  t.equal(spoofed.status, 429, 'an untrusted peer cannot become another client by naming one')
  t.equal(spoofed.code, 'client_over_share')
})

t.test('a pod full when a buffered body is complete gets 503 upstream_busy then, though the head was admitted', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, args: ['--http-upstream-max-connections', '1', '--http-upstream-max-queue', '0', '--http-upstream-max-client-share-percent', '0'] })
  const port = pods.kube.frontDoorPort
  const first = raw(port, `POST /slow?ms=2000 HTTP/1.1\r\nhost: ${HOST}\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{`)
  const second = raw(port, `POST /echo HTTP/1.1\r\nhost: ${HOST}\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{`)
  t.teardown(() => { first.socket.destroy(); second.socket.destroy() })
  await waitFor(async () => await pods.kube.metric('stargate_k8s_router_http_request_bodies_buffering') === 2, { message: 'both bodies being read' })
  first.write('}')
  await waitFor(() => pods.llms.get('stargate-0')?.requests.length === 1, { message: 'the first holding the only connection' })
  second.write('}')
  await waitFor(() => second.closed, { message: 'the second answered' })
  const { status, code } = answer(second.text)
  t.equal(status, 'HTTP/1.1 503 Service Unavailable')
  t.equal(code, 'upstream_busy')
  await waitFor(() => first.closed, { message: 'the first answered' })
  t.match(first.text, /^HTTP\/1\.1 200 /)
})

t.test('a pod that leaves while a request\'s body is read: the named pod is 503 target_unavailable, an unnamed one is replaced', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true })
  const port = pods.kube.frontDoorPort
  const named = raw(port, `POST /echo HTTP/1.1\r\nhost: ${HOST}\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{`)
  const unnamed = raw(port, 'POST /echo HTTP/1.1\r\nhost: llm.example.com\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{')
  t.teardown(() => { named.socket.destroy(); unnamed.socket.destroy() })
  await waitFor(async () => await pods.kube.metric('stargate_k8s_router_http_request_bodies_buffering') === 2, { message: 'both bodies being read' })
  await pods.addPod('stargate-1')
  pods.removePod('stargate-0')
  await waitFor(async () => (await pods.kube.snapshot()).targets.map((x) => x.identity).join() === 'stargate-1', { message: 'only stargate-1 left' })
  named.write('}')
  unnamed.write('}')
  await waitFor(() => named.closed && unnamed.closed, { message: 'both answered' })
  const refused = answer(named.text)
  t.equal(refused.status, 'HTTP/1.1 503 Service Unavailable')
  t.equal(refused.code, 'target_unavailable')
  t.match(unnamed.text, /^HTTP\/1\.1 200 /)
  t.equal((JSON.parse(answer(unnamed.text).body) as { pod: string }).pod, 'stargate-1', 'the unnamed request went to a pod still there')
})

t.test('when no pod is left while a request\'s body is read, it is 503 no_ready_targets', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true })
  const client = raw(pods.kube.frontDoorPort, 'POST /echo HTTP/1.1\r\nhost: llm.example.com\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{')
  t.teardown(() => { client.socket.destroy() })
  await waitFor(async () => await pods.kube.metric('stargate_k8s_router_http_request_bodies_buffering') === 1, { message: 'the body being read' })
  pods.removePod('stargate-0')
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 0, { message: 'no pod left' })
  client.write('}')
  await waitFor(() => client.closed, { message: 'answered' })
  const { status, code } = answer(client.text)
  t.equal(status, 'HTTP/1.1 503 Service Unavailable')
  t.equal(code, 'no_ready_targets')
  t.equal(pods.llms.get('stargate-0')?.requests.length, 0)
})
