// A pipelined HTTP/1.1 request that waits its turn is run by the forwarder itself (nextOnLine),
// out of Fastify's lifecycle: an exception while handling it would otherwise reach no error
// handler and leave the client without an answer. It gets 500 internal_error, the line
// 'front door request failed' is logged with its request id, and the connection serves on.
//
// The exception comes from an injected dependency: the snapshot reader the forwarder routes
// by, which fails from its second read on (the first request is routed, the waiting one is not).
// Raw bytes on a real socket to the front door, a real pod (StubLlm).
import t from 'tap'
import { FrontDoor, type GrpcMethod } from '../../lib/front-door/front-door.ts'
import { HttpForwarder } from '../../lib/http-forward/forwarder.ts'
import { HttpPods } from '../../lib/http-forward/pods.ts'
import { TrustedProxies } from '../../lib/http-forward/trusted-proxies.ts'
import { SnapshotStore } from '../../lib/discovery/snapshot-store.ts'
import type { SnapshotReader } from '../../lib/discovery/types.ts'
import { compileHostnameTemplate } from '../../lib/routing/hostname-template.ts'
import { createMetrics } from '../../lib/metrics/metrics.ts'
import { createLogSink } from '../fixtures/log-sink.ts'
import { StubLlm } from '../fixtures/stub-llm.ts'
import { rawExchange } from '../fixtures/http-client.ts'

const IP = '127.0.1.181'
const HOST = 'stargate-0.stargate.external'
const NO_GRPC: GrpcMethod = { handle: () => {}, end: () => false }

t.test('a waiting request whose handling throws gets 500 internal_error', async (t) => {
  const llm = await StubLlm.start({ podName: 'stargate-0', ip: IP })
  t.teardown(() => { llm.close() })
  const compiled = compileHostnameTemplate('{pod_name}.stargate.external', 'stargate')
  if (!compiled.ok) throw new Error(compiled.message)
  const store = new SnapshotStore()
  store.markInitialized()
  store.stage('stargate-0', { identity: 'stargate-0', namespace: 'stargate', address: IP, host: IP, grpcPort: 50051, quicPort: 50052, httpPort: llm.port, nodeName: null, zone: null, serving: true })
  store.flush()
  let reads = 0
  const failing: SnapshotReader = {
    current: () => {
      if (++reads > 1) throw new Error('snapshot unreadable')
      return store.current()
    },
    subscribe: (listener) => store.subscribe(listener),
  }
  const pods = new HttpPods({ snapshot: store, connectTimeoutMs: 1000, tls: null, serverName: (x) => x.identity, closeGraceMs: 0, maxConnectionsPerPod: 4 })
  const metrics = createMetrics(undefined, { defaultMetrics: false })
  const forwarder = new HttpForwarder({
    snapshot: failing,
    template: compiled.template,
    pods,
    maxBodyBytes: 1024,
    headersTimeoutMs: 5000,
    idleTimeoutMs: 5000,
    requestTimeoutMs: 0,
    maxPendingPerPod: 8,
    bodyBufferBytes: 65536,
    bodyMinBytesPerSecond: 0,
    bodyRateWindowMs: 60_000,
    bodyDeadlineMs: 0,
    responseStallTimeoutMs: 60_000,
    maxPerClientPerPod: 0,
    trustedProxies: new TrustedProxies([]),
    metrics,
  })
  const sink = createLogSink()
  const door = new FrontDoor({ host: '127.0.0.1', port: 0, logger: sink.logger, tls: null, grpc: { watchStargates: NO_GRPC, registerInferenceServer: NO_GRPC }, http: forwarder })
  const { port } = await door.listen()
  t.teardown(async () => {
    await door.close(0)
    await pods.close(0)
  })

  const out = await rawExchange(port, [
    `GET /slow?ms=300 HTTP/1.1\r\nhost: ${HOST}\r\n\r\n`,
    `GET /echo HTTP/1.1\r\nhost: ${HOST}\r\nx-request-id: waiting-1\r\n\r\n`,
    `GET /echo?last HTTP/1.1\r\nhost: ${HOST}\r\nconnection: close\r\n\r\n`,
  ].join(''))
  const statuses = [...out.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => m[1])
  t.same(statuses, ['200', '500', '500'], 'the first forwarded; the waiting ones, whose routing throws, 500 (the connection served on)')
  t.match(out, /x-stargate-error-code: internal_error\r\n[^]*x-request-id: waiting-1\r\n/i, 'internal_error with the request\'s id')
  t.same(llm.requests.map((r) => r.url), ['/slow?ms=300'], 'the pod saw only the first')
  const line = sink.lines().find((l) => l.msg === 'front door request failed')
  t.match(line, { level: 50, requestId: 'waiting-1', err: 'snapshot unreadable' }, 'logged with its request id')
})
