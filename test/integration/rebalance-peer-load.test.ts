// SPEC §10, replica balancing: reading a peer's /debug/load is bounded like the snapshot check
// (the same reader): an answer other than 200, a body over 1 MiB, a peer that never answers or
// stalls its body, bytes that are not HTTP — each a failure with a bounded reason, within the
// timeout, never a throw and never an unbounded buffer. Real stub peers on 127.0.152.1.
import t, { type Test } from 'tap'
import http from 'node:http'
import net, { type AddressInfo } from 'node:net'
import { createPeerLoadFetcher, PEER_LOAD_MAX_BYTES } from '../../lib/rebalance/peer-load-fetch.ts'
import type { PeerLoadResult } from '../../lib/rebalance/load-report.ts'

const HOST = '127.0.152.1'

async function listen (t: Test, server: net.Server): Promise<number> {
  const sockets = new Set<net.Socket>()
  server.on('connection', (s) => { sockets.add(s); s.on('error', () => {}); s.on('close', () => { sockets.delete(s) }) })
  await new Promise<void>((resolve) => { server.listen(0, HOST, resolve) })
  t.teardown(() => new Promise<void>((resolve) => {
    for (const s of sockets) s.destroy()
    server.close(() => { resolve() })
  }))
  return (server.address() as AddressInfo).port
}

async function read (t: Test, port: number, timeoutMs = 1000): Promise<PeerLoadResult> {
  const fetcher = createPeerLoadFetcher({ timeoutMs })
  t.teardown(() => fetcher.close())
  return await fetcher.fetch({ id: 'routers/peer', address: HOST, port })
}

t.test('a router-shaped answer is read', async (t) => {
  let path = ''
  const port = await listen(t, http.createServer((req, res) => { path = req.url ?? ''; res.end(JSON.stringify({ connections: { registration: 1, raw_quic: 2, webtransport: 3 } })) }))
  t.strictSame(await read(t, port), { ok: true, load: { draining: false, connections: { registration: 1, raw_quic: 2, webtransport: 3 } } })
  t.equal(path, '/debug/load')
})

t.test('a peer without /debug/load (404, an older router) is an http_status failure', async (t) => {
  const port = await listen(t, http.createServer((_req, res) => { res.statusCode = 404; res.end('{"message":"Route GET:/debug/load not found"}') }))
  t.strictSame(await read(t, port), { ok: false, reason: 'http_status', message: 'HTTP 404 from /debug/load' })
})

t.test('a body over 1 MiB is refused, declared or streamed', async (t) => {
  const big = Buffer.alloc(PEER_LOAD_MAX_BYTES + 1, 0x20)
  const declared = await listen(t, http.createServer((_req, res) => { res.setHeader('content-length', big.length); res.end(big) }))
  const result = await read(t, declared)
  t.equal(result.ok ? null : result.reason, 'too_large')
  let written = 0
  const streamed = await listen(t, http.createServer((_req, res) => {
    // Without a length, chunk after chunk, far past the limit if nobody stopped reading.
    const more = (): void => {
      while (written < 64 * 1024 * 1024) {
        written += 65536
        if (!res.write(Buffer.alloc(65536, 0x20))) { res.once('drain', more); return }
      }
      res.end()
    }
    more()
  }))
  const chunked = await read(t, streamed, 5000)
  t.equal(chunked.ok ? null : chunked.reason, 'too_large')
  t.ok(written < 16 * 1024 * 1024, `the reader stopped early (${written} bytes written by the peer)`)
})

t.test('a peer that never answers, or stalls its body, is a timeout within the timeout', async (t) => {
  const silent = await listen(t, net.createServer(() => {}))
  const started = Date.now()
  const result = await read(t, silent, 300)
  t.equal(result.ok ? null : result.reason, 'timeout')
  const stalled = await listen(t, http.createServer((_req, res) => { res.writeHead(200); res.write('{"connections":') }))
  const stalledResult = await read(t, stalled, 300)
  t.equal(stalledResult.ok ? null : stalledResult.reason, 'timeout')
  t.ok(Date.now() - started < 5000, 'both ended at their timeout')
})

t.test('bytes that are not HTTP are an invalid_response', async (t) => {
  const port = await listen(t, net.createServer((socket) => { socket.once('data', () => { socket.end('SSH-2.0-OpenSSH_9.6\r\n\r\n') }) }))
  const result = await read(t, port)
  t.equal(result.ok ? null : result.reason, 'invalid_response')
})
