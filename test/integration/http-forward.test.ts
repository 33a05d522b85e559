// SPEC §6: LLM client requests are forwarded with undici to the pod the Host names,
// else to the less loaded of two random pods; bodies and SSE stream both ways; headers are
// rewritten as a proxy must. Independent clients: node:http, fetch and curl.
import t from 'tap'
import http from 'node:http'
import http2 from 'node:http2'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { StubPods } from '../fixtures/stub-pods.ts'
import { waitFor } from '../fixtures/wait.ts'
import { request } from '../fixtures/http-client.ts'

const exec = promisify(execFile)

async function curlAvailable (): Promise<boolean> {
  try { await exec('curl', ['--version']); return true } catch { return false }
}
const NO_CURL = (await curlAvailable()) ? false : 'curl is not installed on this machine'

t.test('a request whose Host names a pod lands on that pod', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0', 'stargate-1', 'stargate-2'], http: true })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 3)
  for (const name of ['stargate-0', 'stargate-1', 'stargate-2']) {
    for (let i = 0; i < 3; i++) {
      const reply = await request(pods.kube.frontDoorPort, { host: `${name}.stargate.external:${pods.kube.frontDoorPort}` })
      t.equal(reply.status, 200)
      t.equal(JSON.parse(reply.body).pod, name, `${name}: answered by that pod`)
    }
    t.equal(pods.llms.get(name)?.requests.length, 3, `${name}: saw exactly its requests`)
  }
})

t.test('headers: hop-by-hop removed, x-forwarded-* and x-request-id set, the rest kept', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1)
  const host = `stargate-0.stargate.external:${pods.kube.frontDoorPort}`
  const reply = await request(pods.kube.frontDoorPort, {
    host,
    path: '/echo',
    headers: { connection: 'keep-alive, x-drop-me', 'x-drop-me': 'secret-hop', 'keep-alive': 'timeout=5', 'proxy-connection': 'keep-alive', authorization: 'Bearer sk-test', 'x-custom': 'kept', 'x-forwarded-for': '203.0.113.7' },
  })
  t.equal(reply.status, 200)
  const seen = JSON.parse(reply.body) as { headers: Record<string, string> }
  t.equal(seen.headers['x-drop-me'], undefined, 'a field named by Connection is dropped')
  t.equal(seen.headers['keep-alive'], undefined, 'keep-alive is dropped')
  t.equal(seen.headers['proxy-connection'], undefined, 'proxy-connection is dropped')
  t.equal(seen.headers.authorization, 'Bearer sk-test', 'end-to-end fields pass')
  t.equal(seen.headers['x-custom'], 'kept')
  t.equal(seen.headers.host, host, 'Host is preserved')
  t.equal(seen.headers['x-forwarded-for'], '127.0.0.1', 'the client address replaces an untrusted peer\'s claim (appended only for --trusted-proxy-cidrs)')
  t.equal(seen.headers['x-forwarded-proto'], 'http')
  t.equal(seen.headers['x-forwarded-host'], host)
  t.match(seen.headers['x-request-id'], /^[0-9a-f-]{36}$/, 'a request id is generated')
  t.equal(reply.headers['x-request-id'], seen.headers['x-request-id'], 'and returned to the client')
  const kept = await request(pods.kube.frontDoorPort, { host, path: '/echo', headers: { 'x-request-id': 'client-chosen-42' } })
  t.equal((JSON.parse(kept.body) as { headers: Record<string, string> }).headers['x-request-id'], 'client-chosen-42', 'a client request id is kept')
  t.equal(kept.headers['x-request-id'], 'client-chosen-42')
})

t.test('requests without a pod host spread by load: a slow pod gets fewer', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0', 'stargate-1'], http: true })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 2)
  const slow = pods.llms.get('stargate-0')!
  const fast = pods.llms.get('stargate-1')!
  slow.delayMs = 200
  const host = 'llm.example.com'
  let next = 0
  const worker = async (): Promise<void> => {
    while (next < 80) {
      next++
      const reply = await request(pods.kube.frontDoorPort, { host })
      t.equal(reply.status, 200)
    }
  }
  await Promise.all([worker(), worker(), worker(), worker(), worker(), worker()])
  t.ok(slow.requests.length + fast.requests.length === 80, 'every request was answered by one of the pods')
  t.ok(slow.requests.length > 0, `the slow pod still gets some (${slow.requests.length})`)
  t.ok(slow.requests.length * 3 < fast.requests.length, `the slow pod gets far fewer (${slow.requests.length} vs ${fast.requests.length})`)
})

t.test('SSE tokens reach the client as the pod sends them', async (t) => {
  const TOKEN_INTERVAL_MS = 150
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: { tokenIntervalMs: TOKEN_INTERVAL_MS } })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1)
  const arrivals: number[] = []
  await new Promise<void>((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: pods.kube.frontDoorPort, path: '/v1/chat/completions', method: 'POST', headers: { host: `stargate-0.stargate.external:${pods.kube.frontDoorPort}`, 'content-type': 'application/json' }, agent: false }, (res) => {
      t.equal(res.headers['content-type'], 'text/event-stream')
      let buffered = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => {
        buffered += c
        let end = buffered.indexOf('\n\n')
        while (end >= 0) {
          if (buffered.startsWith('data: {')) arrivals.push(performance.now() + performance.timeOrigin)
          buffered = buffered.slice(end + 2)
          end = buffered.indexOf('\n\n')
        }
      })
      res.on('end', resolve)
    })
    req.on('error', reject)
    req.end(JSON.stringify({ model: 'm', stream: true, max_tokens: 8 }))
  })
  const sent = pods.llms.get('stargate-0')!.tokenSentAt[0]!
  t.equal(arrivals.length, 8, 'every token arrived')
  t.ok(arrivals[7]! - arrivals[0]! > 300, 'tokens arrived spread out, not in one burst at the end')
  // Buffering would hold a token at least until the next one is sent: compared with when the pod
  // actually sent the next one, so a late timer in the pod cannot fail it.
  const late = arrivals.slice(0, 7).flatMap((at, i) => at < (sent[i + 1] as number) ? [] : [`token ${i} arrived ${(at - (sent[i + 1] as number)).toFixed(1)} ms after token ${i + 1} was sent`])
  t.strictSame(late, [], `each token arrived before the next was sent (tokens every ${TOKEN_INTERVAL_MS} ms)`)
})

t.test('a client that disconnects mid-stream makes the router close the upstream request', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: { tokenIntervalMs: 20 } })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1)
  const llm = pods.llms.get('stargate-0')!
  await new Promise<void>((resolve) => {
    const req = http.request({ host: '127.0.0.1', port: pods.kube.frontDoorPort, path: '/sse-forever', method: 'GET', headers: { host: `stargate-0.stargate.external:${pods.kube.frontDoorPort}` }, agent: false }, (res) => {
      let tokens = 0
      res.on('data', () => {
        if (++tokens === 3) { req.destroy(); resolve() }
      })
    })
    req.on('error', () => {})
    req.end()
  })
  await waitFor(() => llm.openResponses === 0, { message: 'the pod to see its response closed' })
  t.equal(llm.requests.length, 1, 'one upstream request'); t.equal(llm.requests[0]?.aborted, true, 'the upstream request was aborted, not left running')
  await waitFor(async () => (await pods.kube.metric('stargate_k8s_router_http_requests_in_flight')) === 0)
  t.equal(await pods.kube.metric('stargate_k8s_router_http_requests_total', { outcome: 'client_aborted' }), 1)
})

t.test('a slow reader makes the router pause the pod instead of buffering', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1)
  const llm = pods.llms.get('stargate-0')!
  const req = http.request({ host: '127.0.0.1', port: pods.kube.frontDoorPort, path: '/bulk?mb=64', method: 'GET', headers: { host: `stargate-0.stargate.external:${pods.kube.frontDoorPort}` }, agent: false })
  req.on('error', () => {})
  t.teardown(() => { req.destroy() })
  const res = await new Promise<http.IncomingMessage>((resolve) => { req.on('response', resolve); req.end() })
  res.pause()
  await waitFor(() => llm.bulkWritten > 0)
  await new Promise((resolve) => setTimeout(resolve, 1500))
  const plateau = llm.bulkWritten
  await new Promise((resolve) => setTimeout(resolve, 1000))
  t.ok(llm.bulkWritten < 32 * 1024 * 1024, `the pod wrote only what socket buffers hold (${(llm.bulkWritten / 1048576).toFixed(1)} MiB of 64)`)
  t.equal(llm.bulkWritten, plateau, 'and is then held back')
  res.resume()
  let received = 0
  res.on('data', (c: Buffer) => { received += c.length })
  await new Promise((resolve) => res.on('end', resolve))
  t.equal(received, 64 * 1024 * 1024, 'once the client reads, everything arrives')
})

t.test('HTTP/2 clients are forwarded too (h2c prior knowledge)', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0', 'stargate-1'], http: true })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 2)
  const session = http2.connect(`http://127.0.0.1:${pods.kube.frontDoorPort}`)
  t.teardown(() => { session.close() })
  const reply = await new Promise<{ status: number, body: string }>((resolve, reject) => {
    const stream = session.request({ ':method': 'POST', ':path': '/echo', ':authority': `stargate-1.stargate.external:${pods.kube.frontDoorPort}`, 'content-type': 'application/json' })
    let body = ''
    let status = 0
    stream.on('response', (h) => { status = Number(h[':status']) })
    stream.setEncoding('utf8')
    stream.on('data', (c: string) => { body += c })
    stream.on('end', () => { resolve({ status, body }) })
    stream.on('error', reject)
    stream.end('{"hello":"h2"}')
  })
  t.equal(reply.status, 200)
  const seen = JSON.parse(reply.body) as { pod: string, body: string, headers: Record<string, string> }
  t.equal(seen.pod, 'stargate-1', ':authority picks the pod')
  t.equal(seen.body, '{"hello":"h2"}', 'the body arrives')
  t.equal(seen.headers.host, `stargate-1.stargate.external:${pods.kube.frontDoorPort}`, ':authority becomes Host upstream')
})

t.test('curl over HTTP/1.1 and HTTP/2 gets answers and streams', { skip: NO_CURL }, async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: { tokenIntervalMs: 5 } })
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1)
  const url = `http://127.0.0.1:${pods.kube.frontDoorPort}/v1/chat/completions`
  const host = `stargate-0.stargate.external:${pods.kube.frontDoorPort}`
  for (const version of ['--http1.1', '--http2-prior-knowledge']) {
    const json = await exec('curl', ['-sS', version, '-H', `Host: ${host}`, '-H', 'content-type: application/json', '-d', '{"model":"m"}', '-D', '-', url])
    t.match(json.stdout, /^HTTP\/(1\.1|2) 200/, `${version}: 200`)
    t.match(json.stdout, /"pod":"stargate-0"/, `${version}: the pod answered`)
    const sse = await exec('curl', ['-sS', '-N', version, '-H', `Host: ${host}`, '-d', '{"model":"m","stream":true,"max_tokens":5}', url])
    t.equal(sse.stdout.split('\n\n').filter((e) => e.startsWith('data: {')).length, 5, `${version}: five SSE tokens`)
    t.match(sse.stdout, /data: \[DONE\]/)
  }
})
