// SPEC §7 (WebTransport): which requests are session requests (400 otherwise), which pod a
// session goes to (SNI, else :authority), and what the pod's CONNECT carries.
import t from 'tap'
import http2, { type IncomingHttpHeaders } from 'node:http2'
import {
  REJECTIONS, SESSION_PATH, checkConnect, downstreamResponseHeaders, hostOf, routeSession, upstreamHeaders,
} from '../../lib/tunnel/webtransport-connect.ts'
import { WEBTRANSPORT_OUTCOMES } from '../../lib/tunnel/webtransport-metrics.ts'
import { compileHostnameTemplate, type HostnameTemplate } from '../../lib/routing/hostname-template.ts'
import { SnapshotStore } from '../../lib/discovery/snapshot-store.ts'
import type { PodTarget, TargetSnapshot } from '../../lib/discovery/types.ts'

function compile (source: string): HostnameTemplate {
  const result = compileHostnameTemplate(source, 'stargate')
  if (!result.ok) throw new Error(result.message)
  return result.template
}

function target (identity: string, address: string): PodTarget {
  return { identity, namespace: 'stargate', address, host: address, grpcPort: 50051, quicPort: 50052, httpPort: null, nodeName: null, zone: null, serving: true }
}

function snapshotOf (targets: readonly PodTarget[]): TargetSnapshot {
  const store = new SnapshotStore()
  store.markInitialized()
  for (const x of targets) store.stage(x.identity, x)
  store.flush()
  return store.current()
}

const TEMPLATE = compile('{pod_name}.stargate.external')
const POD0 = target('stargate-0', '10.0.0.1')
const POD1 = target('stargate-7d9f8b6c4-x2x7q', '10.0.0.2')
const SNAPSHOT = snapshotOf([POD0, POD1])

t.test('only an extended CONNECT for webtransport at the session path is a session request', async (t) => {
  const connect = { ':method': 'CONNECT', ':protocol': 'webtransport', ':scheme': 'https', ':path': SESSION_PATH, ':authority': 'stargate-0.stargate.external' }
  const cases: Array<[string, IncomingHttpHeaders, ReturnType<typeof checkConnect>]> = [
    ['a session request', connect, { ok: true }],
    ['a query string is allowed', { ...connect, ':path': `${SESSION_PATH}?pylon=1` }, { ok: true }],
    ['GET', { ...connect, ':method': 'GET' }, { ok: false, code: 'wrong_method' }],
    ['POST', { ...connect, ':method': 'POST' }, { ok: false, code: 'wrong_method' }],
    ['a plain CONNECT', { ':method': 'CONNECT', ':authority': 'stargate-0.stargate.external:443' }, { ok: false, code: 'missing_protocol' }],
    ['websocket', { ...connect, ':protocol': 'websocket' }, { ok: false, code: 'wrong_protocol' }],
    ['another path', { ...connect, ':path': '/webtransport' }, { ok: false, code: 'wrong_path' }],
    ['a longer path', { ...connect, ':path': `${SESSION_PATH}/x` }, { ok: false, code: 'wrong_path' }],
    ['the path with a trailing slash', { ...connect, ':path': `${SESSION_PATH}/` }, { ok: false, code: 'wrong_path' }],
  ]
  for (const [name, headers, want] of cases) t.strictSame(checkConnect(headers), want, name)
})

t.test('a session goes to the pod named by SNI, else by :authority', async (t) => {
  const cases: Array<[string, string | false | undefined, string | undefined, ReturnType<typeof routeSession>]> = [
    ['SNI names a pod', 'stargate-0.stargate.external', 'stargate-0.stargate.external:50072', { ok: true, target: POD0, serverName: 'stargate-0.stargate.external' }],
    ['SNI wins over :authority', 'stargate-0.stargate.external', 'stargate-7d9f8b6c4-x2x7q.stargate.external', { ok: true, target: POD0, serverName: 'stargate-0.stargate.external' }],
    ['SNI is lower-cased for the upstream', 'Stargate-0.Stargate.External', undefined, { ok: true, target: POD0, serverName: 'stargate-0.stargate.external' }],
    ['no SNI: :authority', false, 'stargate-7d9f8b6c4-x2x7q.stargate.external:50072', { ok: true, target: POD1, serverName: 'stargate-7d9f8b6c4-x2x7q.stargate.external' }],
    ['an unknown SNI is not retried as :authority', 'router.example', 'stargate-0.stargate.external', { ok: false, code: 'unknown_sni' }],
    ['no SNI, foreign :authority', false, '127.0.0.1:50072', { ok: false, code: 'unknown_sni' }],
    ['neither', undefined, undefined, { ok: false, code: 'missing_sni' }],
    ['a pod that is not ready', 'stargate-9.stargate.external', undefined, { ok: false, code: 'target_unavailable' }],
    ['no SNI, a pod that is not ready', false, 'stargate-9.stargate.external:443', { ok: false, code: 'target_unavailable' }],
  ]
  for (const [name, sni, authority, want] of cases) t.strictSame(routeSession(sni, authority, SNAPSHOT, TEMPLATE), want, name)
})

t.test('the host of an :authority drops the port and a trailing dot', async (t) => {
  const cases: Array<[string, string]> = [
    ['stargate-0.stargate.external:50072', 'stargate-0.stargate.external'],
    ['Stargate-0.Stargate.External.', 'stargate-0.stargate.external'],
    ['stargate-0.stargate.external', 'stargate-0.stargate.external'],
  ]
  for (const [authority, want] of cases) t.equal(hostOf(authority), want, authority)
})

t.test('the upstream CONNECT keeps every field in order, repeated fields repeated', async (t) => {
  const raw = [
    ':method', 'CONNECT', ':protocol', 'webtransport', ':scheme', 'https', ':path', SESSION_PATH, ':authority', 'stargate-0.stargate.external:50072',
    'origin', 'https://stargate-0.stargate.external',
    'x-inference-server-id', 'is-1',
    'x-stargate-auth-token', 'token-value',
    'x-stargate-capability', 'chat',
    'x-stargate-capability', 'embeddings',
    'x-stargate-capability', 'rerank',
  ]
  const out = upstreamHeaders(raw)
  t.strictSame(Object.keys(out), [':method', ':protocol', ':scheme', ':path', ':authority', 'origin', 'x-inference-server-id', 'x-stargate-auth-token', 'x-stargate-capability'])
  t.equal(out[':authority'], 'stargate-0.stargate.external:50072', 'the same authority')
  t.equal(out['x-stargate-auth-token'], 'token-value')
  t.strictSame(out['x-stargate-capability'], ['chat', 'embeddings', 'rerank'], 'an array: one field per value')
  t.strictSame((out as Record<symbol, unknown>)[http2.sensitiveHeaders], ['x-stargate-auth-token'], 'the token is never indexed by HPACK')
})

t.test('connection-specific fields are not copied to the pod', async (t) => {
  const out = upstreamHeaders([':method', 'CONNECT', 'connection', 'close', 'te', 'trailers', 'keep-alive', '5', 'x-kept', '1'])
  t.strictSame(Object.keys(out), [':method', 'x-kept'])
})

t.test('a refusal from the pod reaches the Pylon with its status and fields', async (t) => {
  // As Node hands a response to the 'response' listener: :status is a number.
  const answer = { ':status': 429, 'retry-after': '3', 'content-type': 'application/json' } as unknown as Parameters<typeof downstreamResponseHeaders>[0]
  t.strictSame(downstreamResponseHeaders(answer), { 'retry-after': '3', 'content-type': 'application/json', ':status': 429 })
})

t.test('every rejection has an HTTP error status, a counted outcome and a lower-case message', async (t) => {
  for (const [code, rejection] of Object.entries(REJECTIONS)) {
    t.ok(rejection.status >= 400 && rejection.status < 600, `${code}: status ${rejection.status}`)
    t.ok(rejection.outcome === null || (WEBTRANSPORT_OUTCOMES as readonly string[]).includes(rejection.outcome), `${code}: outcome ${String(rejection.outcome)}`)
    t.equal(rejection.message[0], rejection.message[0]?.toLowerCase(), `${code}: lower-case message`)
  }
  t.equal(REJECTIONS.missing_sni.message, 'missing target SNI', 'the SPEC §7 wording')
  t.equal(REJECTIONS.unknown_sni.message, 'unknown target SNI')
  t.equal(REJECTIONS.target_unavailable.message, 'target stargate not ready')
})
