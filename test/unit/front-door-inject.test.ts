// The front door on Fastify: the HTTP error paths through Fastify's lifecycle, driven
// with app.inject (no socket). Every answer carries the catalogue's status, JSON body and
// x-stargate-error-code (lib/http-forward/errors.ts); requests Fastify itself would refuse
// (a media type it cannot parse, a path it cannot decode) are forwarded as before, not 415/400;
// an exception on the way is 500 internal_error, logged with the request id and no secret.
import t, { type Test } from 'tap'
import { FrontDoor, type GrpcMethod, type HttpHandler } from '../../lib/front-door/front-door.ts'
import { HttpForwarder } from '../../lib/http-forward/forwarder.ts'
import { HttpPods } from '../../lib/http-forward/pods.ts'
import { TrustedProxies } from '../../lib/http-forward/trusted-proxies.ts'
import { HTTP_ERRORS, type HttpErrorCode } from '../../lib/http-forward/errors.ts'
import { SnapshotStore } from '../../lib/discovery/snapshot-store.ts'
import type { PodTarget } from '../../lib/discovery/types.ts'
import { compileHostnameTemplate } from '../../lib/routing/hostname-template.ts'
import { createMetrics } from '../../lib/metrics/metrics.ts'
import { createLogSink, type LogSink } from '../fixtures/log-sink.ts'

function target (identity: string, httpPort: number | null): PodTarget {
  // 192.0.2.0/24 (TEST-NET-1): nothing in these tests may reach it.
  return { identity, namespace: 'stargate', address: '192.0.2.1', host: '192.0.2.1', grpcPort: 50051, quicPort: 50052, httpPort, nodeName: null, zone: null, serving: true }
}

/** No gRPC call is made here (app.inject speaks HTTP/1.1 to Fastify only). */
const NO_GRPC: GrpcMethod = { handle: () => {}, end: () => false }

interface Built {
  readonly door: FrontDoor
  readonly sink: LogSink
}

function build (t: Test, targets: readonly PodTarget[], http?: HttpHandler): Built {
  const compiled = compileHostnameTemplate('{pod_name}.stargate.external', 'stargate')
  if (!compiled.ok) throw new Error(compiled.message)
  const snapshot = new SnapshotStore()
  snapshot.markInitialized()
  for (const x of targets) snapshot.stage(x.identity, x)
  snapshot.flush()
  const pods = new HttpPods({ snapshot, connectTimeoutMs: 1000, tls: null, serverName: (x) => x.identity, closeGraceMs: 0, maxConnectionsPerPod: 4 })
  const forwarder = new HttpForwarder({
    snapshot,
    template: compiled.template,
    pods,
    maxBodyBytes: 1024,
    headersTimeoutMs: 1000,
    idleTimeoutMs: 1000,
    requestTimeoutMs: 0,
    maxPendingPerPod: 8,
    bodyBufferBytes: 65536,
    bodyMinBytesPerSecond: 1024,
    bodyRateWindowMs: 60_000,
    bodyDeadlineMs: 900_000,
    responseStallTimeoutMs: 60_000,
    maxPerClientPerPod: 1,
    trustedProxies: new TrustedProxies([]),
    metrics: createMetrics(undefined, { defaultMetrics: false }),
  })
  const sink = createLogSink()
  const door = new FrontDoor({ host: '127.0.0.1', port: 0, logger: sink.logger, tls: null, grpc: { watchStargates: NO_GRPC, registerInferenceServer: NO_GRPC }, http: http ?? forwarder })
  t.teardown(async () => {
    await door.app.close()
    await pods.close(0)
  })
  return { door, sink }
}

function body (code: HttpErrorCode): unknown {
  return { error: { code, message: HTTP_ERRORS[code].message } }
}

t.test('a request with no ready pod is 503 no_ready_targets, echoing the client\'s request id', async (t) => {
  const { door } = build(t, [])
  const res = await door.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { 'content-type': 'application/json', 'x-request-id': 'client-id-1' }, payload: '{}' })
  t.equal(res.statusCode, 503)
  t.equal(res.headers['x-stargate-error-code'], 'no_ready_targets')
  t.equal(res.headers['x-request-id'], 'client-id-1')
  t.same(res.json(), body('no_ready_targets'))
})

t.test('a Host naming no ready pod is 404 unknown_target with a generated request id', async (t) => {
  const { door } = build(t, [target('stargate-0', 8000)])
  const res = await door.app.inject({ method: 'GET', url: '/v1/models', headers: { host: 'stargate-9.stargate.external', 'x-request-id': 'bad id with spaces' } })
  t.equal(res.statusCode, 404)
  t.equal(res.headers['x-stargate-error-code'], 'unknown_target')
  t.match(res.headers['x-request-id'], /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/, 'an id the client may not choose is replaced')
  t.same(res.json(), body('unknown_target'))
})

t.test('a Host naming a ready pod without an http port is 503 target_unavailable', async (t) => {
  const { door } = build(t, [target('stargate-0', null)])
  const res = await door.app.inject({ method: 'GET', url: '/', headers: { host: 'stargate-0.stargate.external' } })
  t.equal(res.statusCode, 503)
  t.same(res.json(), body('target_unavailable'))
})

t.test('a body is never parsed: a media type Fastify cannot parse is no 415, the body limit still applies', async (t) => {
  const { door } = build(t, [target('stargate-0', 8000)])
  const res = await door.app.inject({ method: 'POST', url: '/v1/completions', headers: { 'content-type': 'not a media type', 'content-length': '4096' }, payload: 'x'.repeat(4096) })
  t.equal(res.statusCode, 413)
  t.equal(res.headers['x-stargate-error-code'], 'payload_too_large')
  t.same(res.json(), body('payload_too_large'))
})

t.test('a path Fastify cannot decode is forwarded as sent, not Fastify\'s 400', async (t) => {
  const { door } = build(t, [])
  const res = await door.app.inject({ method: 'GET', url: '/v1/%zz' })
  t.equal(res.statusCode, 503)
  t.equal(res.headers['x-stargate-error-code'], 'no_ready_targets')
})

t.test('an exception while handling a request is 500 internal_error, logged with its id and no secret', async (t) => {
  const failing: HttpHandler = { handle: () => { throw new Error('boom') } }
  const { door, sink } = build(t, [], failing)
  const res = await door.app.inject({ method: 'GET', url: '/', headers: { authorization: 'Bearer sekret-token', 'x-request-id': 'req-42' } })
  t.equal(res.statusCode, 500)
  t.equal(res.headers['x-stargate-error-code'], 'internal_error')
  t.equal(res.headers['x-request-id'], 'req-42')
  t.same(res.json(), body('internal_error'))
  const line = sink.lines().find((l) => l.msg === 'front door request failed')
  t.match(line, { level: 50, requestId: 'req-42', err: 'boom' })
  t.notMatch(sink.text(), 'sekret-token')
})

t.test('a line the forwarder logs for a request carries its id; a level that is off logs nothing', async (t) => {
  // request.log is bound lazily (lib/front-door/request-logger.ts): the id must still be there.
  const logging: HttpHandler = {
    handle: (_req, res, _id, log) => {
      log.debug({ detail: 'hidden' }, 'a debug line')
      log.warn({ pod: 'stargate-0' }, 'upstream request failed')
      res.statusCode = 204
      res.end()
    },
  }
  const { door, sink } = build(t, [], logging)
  const res = await door.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { 'x-request-id': 'req-7' }, payload: '{}' })
  t.equal(res.statusCode, 204)
  t.match(sink.lines().find((l) => l.msg === 'upstream request failed'), { level: 40, requestId: 'req-7', pod: 'stargate-0' })
  t.notOk(sink.lines().some((l) => l.msg === 'a debug line'))
})
