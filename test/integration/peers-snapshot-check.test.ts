// SPEC §10: a peer whose /debug/snapshot cannot be read — refused, garbage, HTTP 500,
// too slow, too large — is an error counted by reason with the last error kept, never
// divergence (the grace period here is 0, so any digest difference would be divergent at
// once). Real stub peers on loopback answer each way; the checker uses the real undici fetcher.
import t, { type Test } from 'tap'
import http from 'node:http'
import net, { type AddressInfo } from 'node:net'
import { Registry } from 'prom-client'
import { PeerSet } from '../../lib/discovery/peers.ts'
import { PeerDivergenceChecker, type PeersReport } from '../../lib/discovery/peer-divergence.ts'
import { createPeerSnapshotFetcher } from '../../lib/discovery/peer-snapshot-fetch.ts'
import { createPeerMetrics, PEER_CHECK_ERROR_REASONS, type PeerMetrics } from '../../lib/discovery/peer-metrics.ts'
import type { SnapshotReader, TargetSnapshot } from '../../lib/discovery/types.ts'
import { createLogSink, type LogSink } from '../fixtures/log-sink.ts'

const HOST = '127.0.66.1'
const OURS: TargetSnapshot = { initialized: true, generation: 5, digest: 'digest-ours', targets: [], byIdentity: new Map(), unready: new Map() }
const SNAPSHOT: SnapshotReader = { current: () => OURS, subscribe: (listener) => { listener(OURS); return () => {} } }

function snapshotBody (digest: string): string {
  return JSON.stringify({ initialized: true, generation: 9, digest, ageSeconds: 0, targets: [] })
}

/** An HTTP peer answering /debug/snapshot with handler. */
async function httpPeer (t: Test, handler: http.RequestListener): Promise<number> {
  const server = http.createServer(handler)
  const sockets = new Set<net.Socket>()
  server.on('connection', (s) => { sockets.add(s); s.on('close', () => { sockets.delete(s) }) })
  await new Promise<void>((resolve) => { server.listen(0, HOST, resolve) })
  t.teardown(() => new Promise<void>((resolve) => {
    for (const s of sockets) s.destroy()
    server.close(() => { resolve() })
  }))
  return (server.address() as AddressInfo).port
}

/** A TCP peer that answers whatever bytes it is given (or nothing) and keeps the socket. */
async function rawPeer (t: Test, bytes: string | null): Promise<number> {
  const sockets = new Set<net.Socket>()
  const server = net.createServer((socket) => {
    sockets.add(socket)
    socket.on('error', () => {})
    socket.once('data', () => { if (bytes !== null) socket.end(bytes) })
  })
  await new Promise<void>((resolve) => { server.listen(0, HOST, resolve) })
  t.teardown(() => new Promise<void>((resolve) => {
    for (const s of sockets) s.destroy()
    server.close(() => { resolve() })
  }))
  return (server.address() as AddressInfo).port
}

/** A port nothing listens on. */
async function closedPort (): Promise<number> {
  const server = net.createServer()
  await new Promise<void>((resolve) => { server.listen(0, HOST, resolve) })
  const { port } = server.address() as AddressInfo
  await new Promise<void>((resolve) => { server.close(() => { resolve() }) })
  return port
}

interface Harness {
  readonly checker: PeerDivergenceChecker
  readonly metrics: PeerMetrics
  readonly log: LogSink
  report (): PeersReport
  errors (reason: string): Promise<number>
}

function startChecker (t: Test, port: number, options: { timeoutMs?: number, maxBytes?: number } = {}): Harness {
  const peers = new PeerSet({ self: { address: null, id: null } })
  const metrics = createPeerMetrics(new Registry())
  const log = createLogSink()
  const fetcher = createPeerSnapshotFetcher({ timeoutMs: options.timeoutMs ?? 1000, ...(options.maxBytes === undefined ? {} : { maxBytes: options.maxBytes }) })
  const checker = new PeerDivergenceChecker({ peers, snapshot: SNAPSHOT, fetchSnapshot: fetcher.fetch, intervalMs: 60000, graceMs: 0, metrics, logger: log.logger })
  t.teardown(async () => {
    const closed = checker.close()
    await fetcher.close()
    await closed
  })
  peers.replace([{ id: 'routers/peer-0', address: HOST, port }])
  return {
    checker,
    metrics,
    log,
    report: () => checker.report(),
    errors: async (reason) => (await metrics.peerCheckErrors.get()).values.find((v) => v.labels.reason === reason)?.value ?? -1,
  }
}

async function expectError (t: Test, h: Harness, reason: string, message: RegExp): Promise<void> {
  await h.checker.checkNow()
  await h.checker.checkNow()
  const peer = h.report().peers[0]!
  t.equal(peer.divergent, false, 'not divergent')
  t.equal(peer.differingSince, null, 'not even differing')
  t.equal(peer.lastError?.reason, reason, 'last error kept with its reason')
  t.match(peer.lastError?.message, message)
  t.equal(peer.consecutiveErrors, 2)
  t.equal(await h.errors(reason), 2, `counted in peer_check_errors_total{reason="${reason}"}`)
  t.equal((await h.metrics.peerSnapshotDivergent.get()).values[0]?.value, 0, 'divergent gauge stays 0')
  t.equal(h.log.lines().filter((l) => l.msg === 'peer snapshot check failed').length, 1, 'logged once per streak, not per check')
}

t.test('a peer that answers with another digest is divergent (grace 0), one that agrees is not', async (t) => {
  let digest = 'digest-other'
  const port = await httpPeer(t, (_req, res) => { res.setHeader('content-type', 'application/json'); res.end(snapshotBody(digest)) })
  const h = startChecker(t, port)
  await h.checker.checkNow()
  t.equal(h.report().peers[0]!.divergent, true)
  t.equal(h.report().divergent, 1)
  t.equal((await h.metrics.peerSnapshotDivergent.get()).values[0]?.value, 1)
  digest = 'digest-ours'
  await h.checker.checkNow()
  t.equal(h.report().peers[0]!.divergent, false)
  t.equal(h.report().peers[0]!.generation, 9)
  t.equal((await h.metrics.peerSnapshotDivergent.get()).values[0]?.value, 0)
})

t.test('a peer that answers garbage JSON on /debug/snapshot is an invalid_response error, not divergent', async (t) => {
  const port = await httpPeer(t, (_req, res) => { res.end('<html>I am not a router</html>') })
  await expectError(t, startChecker(t, port), 'invalid_response', /^body is not JSON$/)
})

t.test('a peer that answers bytes that are not HTTP is an invalid_response error, not divergent', async (t) => {
  const port = await rawPeer(t, 'SSH-2.0-OpenSSH_9.6\r\n\r\n')
  await expectError(t, startChecker(t, port), 'invalid_response', /^not an HTTP response/)
})

t.test('a peer that answers HTTP 500 on /debug/snapshot is an http_status error, not divergent', async (t) => {
  const port = await httpPeer(t, (_req, res) => { res.statusCode = 500; res.end(snapshotBody('digest-other')) })
  await expectError(t, startChecker(t, port), 'http_status', /^HTTP 500 from \/debug\/snapshot$/)
})

t.test('a peer that never answers is a timeout error after --peer-check-timeout-ms, not divergent', async (t) => {
  const port = await rawPeer(t, null)
  const started = Date.now()
  await expectError(t, startChecker(t, port, { timeoutMs: 300 }), 'timeout', /300 ms|timeout/i)
  t.ok(Date.now() - started < 5000, 'each check ends at the timeout')
})

t.test('a peer that sends headers and then stalls its body is a timeout error', async (t) => {
  const port = await httpPeer(t, (_req, res) => { res.writeHead(200, { 'content-type': 'application/json' }); res.write('{"generation":') })
  await expectError(t, startChecker(t, port, { timeoutMs: 300 }), 'timeout', /.+/)
})

t.test('a peer whose snapshot body is over the limit is a too_large error, with or without a content-length', async (t) => {
  const big = snapshotBody('digest-other').padEnd(4096, ' ')
  const declared = await httpPeer(t, (_req, res) => { res.setHeader('content-length', Buffer.byteLength(big)); res.end(big) })
  await expectError(t, startChecker(t, declared, { maxBytes: 1024 }), 'too_large', /over the 1024-byte limit/)
  const chunked = await httpPeer(t, (_req, res) => { res.write(big.slice(0, 2048)); res.end(big.slice(2048)) })
  await expectError(t, startChecker(t, chunked, { maxBytes: 1024 }), 'too_large', /over the 1024-byte limit/)
})

t.test('a peer whose health port refuses connections is an unreachable error, not divergent', async (t) => {
  await expectError(t, startChecker(t, await closedPort()), 'unreachable', /ECONNREFUSED/)
})

t.test('every error reason is exported at 0 before the first check', async (t) => {
  const metrics = createPeerMetrics(new Registry())
  const values = (await metrics.peerCheckErrors.get()).values
  t.strictSame(values.map((v) => [v.labels.reason, v.value]), PEER_CHECK_ERROR_REASONS.map((r) => [r, 0]))
})
