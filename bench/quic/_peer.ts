/**
 * QUIC peers for the bench/quic benchmarks, each run in its own process so the router, the
 * "Stargate" and the "Pylon" get their own event loop (as in production) and the OS can put
 * them on different cores:
 *
 *   node bench/quic/_peer.ts server <ip> <cert> <key>       a Stargate-like endpoint: answers
 *        a stream whose request is a decimal byte count with that many bytes, and echoes any
 *        other request; prints {"port"} once listening
 *   node bench/quic/_peer.ts bulk <port> <sni> <bytes> <n>  downloads <bytes> n times, one
 *        connection each; prints {"bytes","ms","rssMiB"} per transfer
 *   node bench/quic/_peer.ts pylons <port> <count> <seconds> <size>  opens <count>
 *        connections, each sending a <size>-byte request once per second (staggered) for
 *        <seconds>, and prints {"rttsUs":[...],"failed"} at the end
 *
 * Every peer uses the project's driver (lib/quic) with 1350-byte packets. QUIC_SOCKET_BUFFER
 * (bytes) overrides the dialing peers' socket buffer size (lib/quic/client.ts default).
 */
import { readFileSync } from 'node:fs'
import { QuicDriver } from '../../lib/quic/quiche/driver.ts'
import { QuicServer } from '../../lib/quic/quiche/server.ts'
import { connectQuic } from '../../lib/quic/quiche/client.ts'
import { buildClientConfig, buildServerConfig } from '../../lib/quic/quiche/config.ts'
import type { QuicConnection } from '../../lib/quic/quiche/connection.ts'
import type { QuicStream } from '../../lib/quic/quiche/stream.ts'

const IDLE_MS = 60_000
const CHUNK = Buffer.alloc(64 * 1024, 0x5a)
const [mode, ...args] = process.argv.slice(2)

function emit (value: unknown): void {
  process.stdout.write(JSON.stringify(value) + '\n')
}

function send (stream: QuicStream, bytes: number): void {
  let left = bytes
  const pump = (): void => {
    while (left > 0) {
      const n = Math.min(left, CHUNK.length)
      left -= n
      if (!stream.write(n === CHUNK.length ? CHUNK : CHUNK.subarray(0, n))) {
        stream.once('drain', pump)
        return
      }
    }
    stream.end()
  }
  pump()
}

function collect (stream: QuicStream): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    stream.on('data', (c: Buffer) => { chunks.push(c) })
    stream.once('end', () => { resolve(Buffer.concat(chunks)) })
    stream.once('error', reject)
  })
}

async function dial (driver: QuicDriver, port: number, sni: string): Promise<QuicConnection> {
  const conn = await connectQuic({
    driver,
    address: '127.0.0.1',
    port,
    serverName: sni,
    config: buildClientConfig({ idleTimeoutMs: IDLE_MS, caPem: null, verifyPeer: false, alpn: ['stargate-bench'] }),
    handshakeTimeoutMs: 30_000,
    ...(process.env.QUIC_SOCKET_BUFFER === undefined ? {} : { socketBufferBytes: Number(process.env.QUIC_SOCKET_BUFFER) }),
  })
  await new Promise<void>((resolve, reject) => {
    conn.once('established', resolve)
    conn.once('close', (info) => { reject(new Error(`closed before established: ${info.reason}`)) })
  })
  return conn
}

if (mode === 'server') {
  const [ip = '127.0.0.1', certPath = '', keyPath = ''] = args
  const certPem = readFileSync(certPath, 'utf8')
  const keyPem = readFileSync(keyPath, 'utf8')
  const driver = new QuicDriver()
  const server = await QuicServer.listen({
    host: ip,
    port: 0,
    driver,
    maxConnections: 20_000,
    configFor: (hello) => buildServerConfig({ idleTimeoutMs: IDLE_MS, certPem, keyPem, alpn: hello !== null && hello.alpn.length > 0 ? hello.alpn : ['stargate-bench'] }),
    onConnection: (conn) => {
      conn.on('stream', (stream) => {
        stream.on('error', () => {})
        collect(stream).then((request) => {
          const text = request.toString('latin1')
          if (/^\d+$/.test(text)) send(stream, Number(text))
          else stream.end(request)
        }, () => {})
      })
    },
  })
  emit({ port: server.address().port })
  // Exit cleanly when stopped (so --cpu-prof writes its profile).
  process.once('SIGTERM', () => { process.exit(0) })
} else if (mode === 'bulk') {
  const [port = '0', sni = '', bytes = '0', count = '1'] = args
  const driver = new QuicDriver()
  for (let i = 0; i < Number(count); i++) {
    const conn = await dial(driver, Number(port), sni)
    const stream = conn.openStream()
    if (stream === null) throw new Error('no stream')
    const started = performance.now()
    let received = 0
    await new Promise<void>((resolve, reject) => {
      stream.on('data', (c: Buffer) => { received += c.length })
      stream.once('end', resolve)
      stream.once('error', reject)
      stream.end(bytes)
    })
    const ms = performance.now() - started
    const { sent, recv, lost } = conn.stats()
    emit({ bytes: received, ms, rssMiB: process.memoryUsage().rss / 2 ** 20, packets: { sent, recv, lost } })
    conn.close(0, 'done')
  }
  driver.destroyAll()
  process.exit(0)
} else if (mode === 'pylons') {
  const [port = '0', countText = '1000', secondsText = '10', sizeText = '4096', sniPrefix = 'stargate-0'] = args
  const count = Number(countText)
  const request = Buffer.alloc(Number(sizeText), 0x61)
  const driver = new QuicDriver()
  const conns: QuicConnection[] = []
  for (let i = 0; i < count; i += 50) {
    const batch = await Promise.all(Array.from({ length: Math.min(50, count - i) }, () => dial(driver, Number(port), `${sniPrefix}.stargate.external`)))
    conns.push(...batch)
  }
  emit({ connected: conns.length })
  const rtts: number[] = []
  let failed = 0
  const until = performance.now() + Number(secondsText) * 1000
  await Promise.all(conns.map(async (conn, i) => {
    // Staggered: connection i fires at i/count of each second.
    await new Promise((resolve) => { setTimeout(resolve, (1000 * i) / count) })
    while (performance.now() < until) {
      const next = performance.now() + 1000
      const stream = conn.openStream()
      if (stream === null) { failed++; continue }
      const started = performance.now()
      try {
        stream.end(request)
        const answer = await collect(stream)
        if (answer.length !== request.length) failed++
        else rtts.push(Math.round((performance.now() - started) * 1000))
      } catch {
        failed++
      }
      await new Promise((resolve) => { setTimeout(resolve, Math.max(0, next - performance.now())) })
    }
  }))
  const lost = conns.reduce((n, c) => n + c.stats().lost, 0)
  emit({ rttsUs: rtts, failed, lost, rssMiB: process.memoryUsage().rss / 2 ** 20 })
  driver.destroyAll()
  process.exit(0)
} else {
  console.error('usage: _peer.ts server|bulk|pylons ...')
  process.exit(2)
}
