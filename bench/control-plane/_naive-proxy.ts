/**
 * A reference for bench/control-plane/registration.bench.ts: the plainest gRPC stream proxy
 * on node:http2, in its own process. Every stream of its h2c listener is forwarded to one
 * upstream over one shared HTTP/2 session: request headers copied, DATA chunks written
 * through as they come (pausing the other side on backpressure), response headers and
 * trailers copied. No routing, no limits, no metrics, no error statuses: what node:http2
 * itself costs per message, the floor for a forwarder written on it.
 *
 * Prints {"port": N} once listening. Usage: node _naive-proxy.ts <upstream port>
 */
import http2, { type IncomingHttpHeaders } from 'node:http2'
import type { AddressInfo } from 'node:net'

const upstreamPort = Number(process.argv[2])
const upstream = http2.connect(`http://127.0.0.1:${upstreamPort}`, { maxSessionMemory: 64 })
upstream.on('error', () => {})

const server = http2.createServer({ maxSessionMemory: 64, settings: { maxConcurrentStreams: 1000 } })
server.on('stream', (down, headers) => {
  down.on('error', () => {})
  const up = upstream.request({
    ':method': 'POST',
    ':path': headers[':path'],
    'content-type': headers['content-type'],
    te: 'trailers',
  }, { endStream: false })
  up.on('error', () => {})
  let trailers: IncomingHttpHeaders | null = null
  down.on('data', (chunk: Buffer) => { if (!up.write(chunk)) down.pause() })
  up.on('drain', () => { down.resume() })
  down.on('end', () => { up.end() })
  up.on('response', (response) => {
    const out: Record<string, string | string[]> = {}
    for (const key in response) if (key !== ':status') out[key] = response[key] as string
    down.respond({ ':status': 200, ...out }, { waitForTrailers: true })
  })
  up.on('data', (chunk: Buffer) => { if (!down.write(chunk)) up.pause() })
  down.on('drain', () => { up.resume() })
  up.on('trailers', (t) => { trailers = t })
  up.on('end', () => { if (!down.closed) down.end() })
  down.on('wantTrailers', () => {
    const out: Record<string, string | string[]> = {}
    for (const key in trailers ?? {}) out[key] = (trailers as IncomingHttpHeaders)[key] as string
    down.sendTrailers(trailers === null ? { 'grpc-status': '14' } : out)
  })
  down.on('close', () => { if (!up.closed) up.close(http2.constants.NGHTTP2_CANCEL) })
})
server.listen(0, '127.0.0.1', () => {
  console.log(JSON.stringify({ port: (server.address() as AddressInfo).port }))
})

// Exit on SIGTERM through process.exit, so that a run under --cpu-prof writes its profile.
process.on('SIGTERM', () => { process.exit(0) })
