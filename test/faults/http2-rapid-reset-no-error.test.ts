// The rapid-reset guard (CVE-2023-44487, SPEC §12, lib/http2-admission.ts) did not
// see a client that resets its streams with RST_STREAM NO_ERROR: it counted a stream as reset
// only when its code was not NO_ERROR, and a stream reset with code 0 looked completed. 28
// streams a second, each forwarded to the pod and reset 20 ms later, ran for 20 s on one
// connection (569 requests reached the pod) and were never stopped; a burst was stopped only
// by nghttp2's own limit (GOAWAY INTERNAL_ERROR after about 1,000, not counted as a rapid
// reset). Every HTTP/2 listener runs the guard: the front door in cleartext and over TLS, and
// WebTransport over HTTP/2.
//
// What the test sends, on each listener: a burst (300 requests, each reset with RST_STREAM
// NO_ERROR in the next write) and a paced run (28 requests a second, each reset 20 ms after
// it was sent); what it checks: the connection gets GOAWAY ENHANCE_YOUR_CALM and
// stargate_k8s_router_http2_rapid_reset_closes_total counts it.
import t, { type Test } from 'tap'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import { FLAG, FRAME, RawH2Client, frame, type Fields } from '../fixtures/raw-h2.ts'
import { silentPort } from '../fixtures/h2-stream-burst.ts'
import { createCa, createLeaf } from '../fixtures/certs.ts'
import { probe, type Probe } from '../fixtures/fault-probe.ts'
import { sleep, waitFor } from '../fixtures/wait.ts'

t.setTimeout(180_000)

const IP = '127.0.1.171'
const POD_HOST = 'stargate-0.stargate.external'
const NO_ERROR = Buffer.alloc(4)

interface Listener {
  readonly client: RawH2Client
  readonly router: Probe
  readonly request: Fields
  /** Whether the streams opened reached the pod (front door) or wait for it (WebTransport). */
  readonly podRequests: () => number
}

type Shape = 'burst' | 'paced'

/** A pod that answers its LLM requests 2 s late: every stream is still open when it is reset. */
async function slowPod (t: Test): Promise<{ port: number, requests: () => number }> {
  let requests = 0
  const pod = http.createServer((req, res) => { requests++; req.resume(); setTimeout(() => { if (!res.destroyed) res.end('late') }, 2000) })
  await new Promise<void>((resolve) => { pod.listen(0, IP, resolve) })
  t.teardown(() => { pod.closeAllConnections(); pod.close() })
  return { port: (pod.address() as AddressInfo).port, requests: () => requests }
}

async function tlsFiles (t: Test, dnsNames: string[]): Promise<{ cert: string, key: string, ca: string }> {
  const ca = await createCa({ name: 'rapid reset ca' })
  const leaf = await createLeaf(ca, { dnsNames })
  const dir = await tempDir(t, 'stargate-rr-tls-')
  await writeFile(join(dir, 'tls.crt'), leaf.chainPem)
  await writeFile(join(dir, 'tls.key'), leaf.keyPem)
  return { cert: join(dir, 'tls.crt'), key: join(dir, 'tls.key'), ca: ca.certPem }
}

async function targetsFile (t: Test, httpPort: number, quicPort: number): Promise<string> {
  const file = join(await tempDir(t, 'stargate-rr-'), 'targets.yaml')
  await writeFile(file, `targets:\n  - {identity: stargate-0, address: ${IP}, grpcPort: 50051, quicPort: ${quicPort}, httpPort: ${httpPort}}\n`)
  return file
}

const LISTENERS: Record<string, (t: Test) => Promise<Listener>> = {
  'front door (h2c)': async (t) => {
    const pod = await slowPod(t)
    const { frontDoor, health } = await startReadyRouter(t, ['--targets-file', await targetsFile(t, pod.port, 50052)])
    const client = await RawH2Client.connect(frontDoor)
    return { client, router: probe(health), request: [[':method', 'GET'], [':scheme', 'http'], [':path', '/slow'], [':authority', 'llm.example']], podRequests: pod.requests }
  },
  'front door (TLS)': async (t) => {
    const pod = await slowPod(t)
    const tls = await tlsFiles(t, ['router.example'])
    const { frontDoor, health } = await startReadyRouter(t, ['--targets-file', await targetsFile(t, pod.port, 50052), '--front-door-tls', '--tls-cert-path', tls.cert, '--tls-key-path', tls.key])
    const client = await RawH2Client.connectTls(frontDoor, { ca: tls.ca, servername: 'router.example' })
    return { client, router: probe(health), request: [[':method', 'GET'], [':scheme', 'https'], [':path', '/slow'], [':authority', 'router.example']], podRequests: pod.requests }
  },
  'WebTransport over HTTP/2': async (t) => {
    // A pod whose QUIC port never answers: every session request waits for it when reset.
    const quicPort = await silentPort(t, IP)
    const tls = await tlsFiles(t, ['*.stargate.external'])
    const started = await startReadyRouter(t, [
      '--targets-file', await targetsFile(t, 1, quicPort),
      '--tunnel-protocol', 'webtransport', '--tls-cert-path', tls.cert, '--tls-key-path', tls.key,
      '--webtransport-max-sessions-per-connection', '1000', '--connect-timeout-ms', '60000',
    ])
    const listening = await waitFor(() => started.p.logs().find((l) => typeof l.msg === 'string' && l.msg.startsWith('webtransport tunnel listening')), { message: 'the webtransport listening log line' })
    const client = await RawH2Client.connectTls((listening.tcp as { port: number }).port, { ca: tls.ca, servername: POD_HOST })
    const router = probe(started.health)
    return {
      client,
      router,
      request: [[':method', 'CONNECT'], [':protocol', 'webtransport'], [':scheme', 'https'], [':path', '/_stargate/webtransport'], [':authority', POD_HOST]],
      podRequests: () => 0,
    }
  },
}

async function send (listener: Listener, shape: Shape): Promise<void> {
  const { client, request } = listener
  // CONNECT streams stay open for the session; the front door's GETs end with their HEADERS.
  const flags = FLAG.END_HEADERS | (request[0]?.[1] === 'CONNECT' ? 0 : FLAG.END_STREAM)
  if (shape === 'burst') {
    for (let batch = 0; batch < 6 && !client.closed; batch++) {
      const ids = Array.from({ length: 50 }, (_, i) => 1 + 2 * (batch * 50 + i))
      client.write(Buffer.concat(ids.map((id) => frame(FRAME.HEADERS, flags, id, client.encode(request)))))
      await sleep(20)
      client.write(Buffer.concat(ids.map((id) => frame(FRAME.RST_STREAM, 0, id, NO_ERROR))))
      await sleep(5)
    }
    return
  }
  // 28 a second, each reset 20 ms after it was sent, for up to 15 s.
  for (let i = 0; i < 28 * 15 && !client.closed; i++) {
    const id = 1 + 2 * i
    client.write(frame(FRAME.HEADERS, flags, id, client.encode(request)))
    await sleep(20)
    client.write(frame(FRAME.RST_STREAM, 0, id, NO_ERROR))
    await sleep(1000 / 28 - 20)
  }
}

for (const [name, start] of Object.entries(LISTENERS)) {
  for (const shape of ['burst', 'paced'] as const) {
    t.test(`${name}: requests reset with RST_STREAM NO_ERROR (${shape}) close the connection as rapid resets`, async (t) => {
      const listener = await start(t)
      t.teardown(() => { listener.client.close() })
      const sending = send(listener, shape)
      const goaway = await listener.client.waitFrame((f) => f.type === FRAME.GOAWAY, 30_000).catch(() => null)
      await sending
      t.equal(goaway === null ? 'none' : goaway.payload.readUInt32BE(4), 0xb, 'the connection is told GOAWAY ENHANCE_YOUR_CALM')
      t.equal(await listener.router.metric('stargate_k8s_router_http2_rapid_reset_closes_total'), 1, 'and counted as a rapid reset')
      if (shape === 'paced' && name.startsWith('front door')) t.ok(listener.podRequests() < 300, `the pod saw ${listener.podRequests()} of them before the connection was closed`)
    })
  }
}
