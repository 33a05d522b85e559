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
 *
 * Every peer uses the project's QUIC engine (lib/quic) with 1350-byte packets and no ALPN.
 * QUIC_SOCKET_BUFFER (bytes) overrides the dialing peers' socket buffer size.
 */
import { readFileSync } from 'node:fs'
import { QuicEngine } from '../../lib/quic/engine.ts'
import { ClientCredentials, ServerCredentials } from '../../lib/quic/credentials.ts'
import type { QuicConnection } from '../../lib/quic/connection.ts'
import { QuicDuplex } from '../../lib/quic/stream-duplex.ts'

const IDLE_MS = 60_000
const CHUNK = Buffer.alloc(64 * 1024, 0x5a)
const [mode, ...args] = process.argv.slice(2)
const engine = new QuicEngine()

function emit (value: unknown): void {
  process.stdout.write(JSON.stringify(value) + '\n')
}

function send (stream: QuicDuplex, bytes: number): void {
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

function collect (stream: QuicDuplex): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    stream.on('data', (c: Buffer) => { chunks.push(c) })
    stream.once('end', () => { resolve(Buffer.concat(chunks)) })
    stream.once('error', reject)
  })
}

const insecure = ClientCredentials.create({ caPem: null, verify: false })

async function dial (port: number, sni: string): Promise<QuicConnection> {
  const buffer = process.env.QUIC_SOCKET_BUFFER === undefined ? {} : { recvBuffer: Number(process.env.QUIC_SOCKET_BUFFER), sendBuffer: Number(process.env.QUIC_SOCKET_BUFFER) }
  const conn = engine.connect({ address: '127.0.0.1', port, serverName: sni, alpn: [], credentials: insecure, transport: { idleTimeoutMs: IDLE_MS, handshakeTimeoutMs: 30_000 }, ...buffer })
  await new Promise<void>((resolve, reject) => {
    conn.once('established', resolve)
    conn.once('close', (info) => { reject(new Error(`closed before established: ${info.reasonText}`)) })
  })
  return conn
}

function openStream (conn: QuicConnection): QuicDuplex | null {
  const stream = conn.openStream()
  return stream === null ? null : new QuicDuplex(stream)
}

if (mode === 'server') {
  const [ip = '127.0.0.1', certPath = '', keyPath = ''] = args
  const credentials = ServerCredentials.create({ certPem: readFileSync(certPath, 'utf8'), keyPem: readFileSync(keyPath, 'utf8') })
  const endpoint = engine.listen({
    host: ip,
    port: 0,
    maxConnections: 20_000,
    retryThreshold: 20_000,
    maxHalfOpenPerAddress: 20_000,
    transport: { idleTimeoutMs: IDLE_MS },
    onProposal: (proposal) => {
      const conn = proposal.accept({ credentials, alpn: proposal.alpn })
      conn?.on('stream', (quicStream) => {
        const stream = new QuicDuplex(quicStream)
        stream.on('error', () => {})
        collect(stream).then((request) => {
          const text = request.toString('latin1')
          if (/^\d+$/.test(text)) send(stream, Number(text))
          else stream.end(request)
        }, () => {})
      })
    },
  })
  emit({ port: endpoint.port })
  // Exit cleanly when stopped (so --cpu-prof writes its profile).
  process.once('SIGTERM', () => { process.exit(0) })
} else if (mode === 'bulk') {
  const [port = '0', sni = '', bytes = '0', count = '1'] = args
  for (let i = 0; i < Number(count); i++) {
    const conn = await dial(Number(port), sni)
    const stream = openStream(conn)
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
    const stats = conn.stats()
    emit({ bytes: received, ms, rssMiB: process.memoryUsage().rss / 2 ** 20, packets: { sent: stats?.txPackets ?? 0, recv: stats?.rxPackets ?? 0 } })
    conn.close(0, 'done')
  }
  process.exit(0)
} else {
  console.error('usage: _peer.ts server|bulk ...')
  process.exit(2)
}
