/**
 * The engine interoperates with an independent QUIC implementation in both roles:
 * Debian's ngtcp2 example programs (GnuTLS builds, packages ngtcp2-client / ngtcp2-server),
 * which speak HTTP/3 (ALPN h3). The few HTTP/3 bytes needed for one GET are written by hand
 * here (RFC 9114 frames, RFC 9204 QPACK static-table fields; test code, not the product's).
 *
 * gtlsclient sends the <HOST> argument as SNI when it is a DNS name and "localhost" for an IP.
 */
import t from 'tap'
import { randomBytes } from 'node:crypto'
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { closed, dial, engineTls, established, listen, readToEnd, sha256, type Teardown } from '../fixtures/quic-engine.ts'
import { encodeVarint as varint, decodeVarint, varintLengthOf } from '../../lib/quic/varint.ts'
import { GTLS_CLIENT, ngtcp2ExamplesSkip, run, startGtlsServer } from '../fixtures/ngtcp2-examples.ts'
import type { QuicStream } from '../../lib/quic/stream.ts'

const missing = await ngtcp2ExamplesSkip()

/** An HTTP/3 frame: type, length, payload (RFC 9114 §7.1). */
function frame (type: number, payload: Buffer): Buffer {
  return Buffer.concat([varint(type), varint(payload.length), payload])
}

/** A QPACK string literal without Huffman coding, with an n-bit length prefix and flag bits above it. */
function qpackString (value: string, flags: number, prefixBits: number): Buffer {
  const bytes = Buffer.from(value, 'latin1')
  const max = (1 << prefixBits) - 1
  if (bytes.length < max) return Buffer.concat([Buffer.from([flags | bytes.length]), bytes])
  let rest = bytes.length - max
  const out = [flags | max]
  while (rest >= 128) {
    out.push((rest & 0x7f) | 0x80)
    rest >>= 7
  }
  out.push(rest)
  return Buffer.concat([Buffer.from(out), bytes])
}

/** A GET request's field section: static entries :method GET (17), :scheme https (23), and
    :authority (0) / :path (1) as literals with a static name reference (RFC 9204 §4.5.4). */
function getHeaders (authority: string, path: string): Buffer {
  return Buffer.concat([
    Buffer.from([0x00, 0x00, 0xc0 | 17, 0xc0 | 23]),
    Buffer.from([0x50 | 0]), qpackString(authority, 0, 7),
    Buffer.from([0x50 | 1]), qpackString(path, 0, 7),
  ])
}

/** The DATA payloads of an HTTP/3 response stream, concatenated. */
function dataOf (stream: Buffer): Buffer {
  const parts: Buffer[] = []
  let at = 0
  const read = (): number => {
    const v = decodeVarint(stream, at)
    at += varintLengthOf(stream[at] as number)
    return v
  }
  while (at < stream.length) {
    const type = read()
    const length = read()
    if (type === 0x00) parts.push(stream.subarray(at, at + length))
    at += length
  }
  return Buffer.concat(parts)
}

async function tempDir (t: Teardown): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'sg-engine-interop-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

t.test('gtlsclient (ngtcp2 + GnuTLS) downloads a file over HTTP/3 from the engine as server', { skip: missing }, async (t) => {
  const tls = await engineTls(t, ['localhost'])
  const body = randomBytes(1024 * 1024 + 7)
  const requests: Buffer[] = []
  const server = listen(t, '127.0.87.1', tls.serverCredentials, {
    decide: (proposal) => proposal.alpn.includes('h3') ? proposal.accept({ credentials: tls.serverCredentials, alpn: ['h3'] }) : (proposal.reject(), null),
    onConnection: (conn) => {
      conn.once('established', () => {
        // Our control stream: type 0x00 and an empty SETTINGS frame (RFC 9114 §6.2.1).
        conn.openStream(false)?.write(Buffer.concat([varint(0x00), frame(0x04, Buffer.alloc(0))]))
      })
      conn.on('stream', (stream: QuicStream) => {
        if (!stream.bidi) {
          readToEnd(stream).then(() => {}, () => {})
          return
        }
        readToEnd(stream).then(({ data }) => {
          requests.push(data)
          // :status 200 is static entry 25.
          const response = Buffer.concat([frame(0x01, Buffer.from([0x00, 0x00, 0xc0 | 25])), frame(0x00, body)])
          let offset = 0
          const pump = (): void => {
            while (offset < response.length) {
              const n = stream.write(response.subarray(offset, offset + 65536))
              if (n <= 0) return
              offset += n
            }
            stream.end()
          }
          stream.handler = { onWritable: pump }
          pump()
        }, () => {})
      })
    },
  })
  const dir = await tempDir(t)
  const downloads = join(dir, 'downloads')
  await mkdir(downloads)
  const client = run(t, GTLS_CLIENT, ['--quiet', '--exit-on-all-streams-close', '--download', downloads, '--timeout', '10s',
    '127.0.87.1', String(server.endpoint.port), `https://localhost:${server.endpoint.port}/model.bin`])
  const code = await Promise.race([client.exited, new Promise<'timeout'>((resolve) => { setTimeout(() => { resolve('timeout') }, 20_000).unref() })])
  t.equal(code, 0, `gtlsclient exited cleanly (${client.output().slice(-400)})`)
  t.equal(server.proposals[0]?.sni, 'localhost', 'gtlsclient sent SNI localhost')
  t.same(server.proposals[0]?.alpn, ['h3'], 'and offered h3')
  t.equal(server.connections[0]?.alpn, 'h3', 'h3 negotiated')
  t.equal(requests[0]?.[0], 0x01, 'the request stream starts with an HTTP/3 HEADERS frame')
  t.equal(sha256(await readFile(join(downloads, 'model.bin'))), sha256(body), 'the 1 MiB body arrived intact')
})

t.test('the engine as client downloads a file over HTTP/3 from gtlsserver (ngtcp2 + GnuTLS)', { skip: missing }, async (t) => {
  const tls = await engineTls(t, ['localhost'])
  const dir = await tempDir(t)
  const htdocs = join(dir, 'htdocs')
  await mkdir(htdocs)
  const body = randomBytes(2 * 1024 * 1024 + 3)
  await writeFile(join(htdocs, 'weights.bin'), body)
  await writeFile(join(dir, 'key.pem'), tls.server.keyPem)
  await writeFile(join(dir, 'cert.pem'), tls.server.chainPem)
  const { port } = await startGtlsServer(t, { host: '127.0.87.2', htdocs, keyPath: join(dir, 'key.pem'), certPath: join(dir, 'cert.pem') })
  const conn = dial(t, '127.0.87.2', port, { credentials: tls.clientCredentials, serverName: 'localhost', alpn: ['h3'], transport: { handshakeTimeoutMs: 10_000 } })
  await established(conn)
  t.equal(conn.alpn, 'h3', 'h3 negotiated with gtlsserver')
  conn.on('stream', (stream) => { readToEnd(stream).then(() => {}, () => {}) })
  conn.openStream(false)?.write(Buffer.concat([varint(0x00), frame(0x04, Buffer.alloc(0))]))
  const request = conn.openStream(true)
  if (request === null) throw new Error('no stream')
  t.ok(request.end(frame(0x01, getHeaders('localhost', '/weights.bin'))), 'GET sent')
  const response = await readToEnd(request)
  t.equal(response.end, 'fin')
  t.equal(response.data[0], 0x01, 'the response starts with HEADERS')
  t.equal(sha256(dataOf(response.data)), sha256(body), 'the 2 MiB body arrived intact')
  conn.close(0x100, '')
  t.match(await closed(conn), { kind: 'local' })
})
