/**
 * A reference for bench/http-forward/proxy.bench.ts: the plainest HTTP/1.1 proxy one writes
 * with undici, in its own process. A node:http server; every request is forwarded with
 * Pool.stream to one upstream, hop-by-hop headers dropped both ways (RFC 9110 §7.6.1), the
 * response streamed back. No routing, no error bodies, no metrics.
 *
 * Prints {"port": N} once listening. Usage: node _undici-proxy.ts <upstream origin>
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { Pool } from 'undici'

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade'])

const origin = process.argv[2]
if (origin === undefined) throw new Error('usage: _undici-proxy.ts <upstream origin>')
const pool = new Pool(origin, { pipelining: 1, keepAliveTimeout: 60_000 })

function withoutHopByHop (headers: http.IncomingHttpHeaders | Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {}
  for (const name in headers) {
    const value = headers[name]
    if (value !== undefined && !HOP_BY_HOP.has(name)) out[name] = value
  }
  return out
}

const server = http.createServer((req, res) => {
  const hasBody = req.method !== 'GET' && req.method !== 'HEAD'
  pool.stream({
    path: req.url ?? '/',
    method: req.method as 'GET',
    headers: withoutHopByHop(req.headers),
    body: hasBody ? req : null,
  }, ({ statusCode, headers }) => {
    res.writeHead(statusCode, withoutHopByHop(headers))
    return res
  }, (err) => {
    if (err === null) return
    if (!res.headersSent) res.writeHead(502)
    res.end()
  })
})
server.keepAliveTimeout = 120_000
server.listen(0, '127.0.0.1', () => {
  console.log(JSON.stringify({ port: (server.address() as AddressInfo).port }))
})

// Exit on SIGTERM through process.exit, so that a run under --cpu-prof writes its profile.
process.on('SIGTERM', () => { process.exit(0) })
