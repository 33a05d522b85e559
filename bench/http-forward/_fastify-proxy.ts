/**
 * A reference for bench/http-forward/proxy.bench.ts: @fastify/http-proxy (on
 * @fastify/reply-from and undici) with its defaults and logging off, in its own process,
 * forwarding every path to one upstream. What a Node team would reach for first.
 *
 * Prints {"port": N} once listening. Usage: node _fastify-proxy.ts <upstream origin>
 */
import Fastify from 'fastify'
import proxy from '@fastify/http-proxy'

const upstream = process.argv[2]
if (upstream === undefined) throw new Error('usage: _fastify-proxy.ts <upstream origin>')
const app = Fastify({ logger: false, keepAliveTimeout: 120_000 })
await app.register(proxy, { upstream })
await app.listen({ port: 0, host: '127.0.0.1' })
const address = app.server.address()
console.log(JSON.stringify({ port: typeof address === 'object' && address !== null ? address.port : 0 }))

// Exit on SIGTERM through process.exit, so that a run under --cpu-prof writes its profile.
process.on('SIGTERM', () => { process.exit(0) })
