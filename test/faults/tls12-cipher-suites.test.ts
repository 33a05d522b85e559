// SPEC §12 ("TLS 1.2 offers AEAD suites only"): the router's TLS listeners on Node
// (the front door with --front-door-tls, and WebTransport over HTTP/2 on the tunnel port's TCP
// side) took Node's default cipher list, whose trailing OpenSSL `HIGH` adds the CBC suites with
// HMAC-SHA1 and HMAC-SHA256/384 to TLS 1.2. A client forcing TLS 1.2 and a CBC suite got a
// session. Now curl (OpenSSL 3) forcing TLS 1.2 with a CBC suite gets a handshake failure
// (exit 35) on both listeners, the same with an AEAD suite gets an answer, and TLS 1.3 is as it
// was (Node's three suites). The certificates are ECDSA P-256 (test/fixtures/certs.ts), so the
// suites named are the ECDSA ones.
import t from 'tap'
import { execFile } from 'node:child_process'
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { createCa, createLeaf } from '../fixtures/certs.ts'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(120_000)

const HOST = 'stargate-0.stargate.external'
const CBC = ['ECDHE-ECDSA-AES128-SHA', 'ECDHE-ECDSA-AES256-SHA', 'ECDHE-ECDSA-AES128-SHA256', 'ECDHE-ECDSA-AES256-SHA384']
const AEAD = ['ECDHE-ECDSA-AES128-GCM-SHA256', 'ECDHE-ECDSA-AES256-GCM-SHA384', 'ECDHE-ECDSA-CHACHA20-POLY1305']
/** curl's exit code for a failed TLS handshake (CURLE_SSL_CONNECT_ERROR). */
const SSL_CONNECT_ERROR = 35
const NO_CURL = await new Promise<false | string>((resolve) => { execFile('curl', ['--version'], (err) => { resolve(err === null ? false : 'curl is not installed on this machine') }) })

interface CurlResult { readonly exit: number, readonly status: string, readonly negotiated: string }

/** One GET with curl; `negotiated` is curl's "SSL connection using <version> / <suite>". */
function curl (port: number, caPath: string, tlsArgs: readonly string[], http2: boolean): Promise<CurlResult> {
  const args = [
    '-sS', '-v', '-o', '/dev/null', '-w', '%{http_code}', '--max-time', '20',
    '--cacert', caPath, '--resolve', `${HOST}:${port}:127.0.0.1`,
    http2 ? '--http2' : '--http1.1',
    ...tlsArgs,
    `https://${HOST}:${port}/v1/models`,
  ]
  return new Promise((resolve) => {
    execFile('curl', args, { timeout: 30_000 }, (err, stdout, stderr) => {
      const exit = err === null ? 0 : typeof err.code === 'number' ? err.code : -1
      resolve({ exit, status: stdout, negotiated: /SSL connection using ([^\n]+)/.exec(stderr)?.[1]?.trim() ?? '' })
    })
  })
}

t.test('TLS 1.2 with a CBC suite is refused and with an AEAD suite served, on the front door and the WebTransport TCP listener', { skip: NO_CURL }, async (t) => {
  const dir = await tempDir(t, 'stargate-ciphers-')
  const ca = await createCa({ name: 'cipher test ca' })
  const leaf = await createLeaf(ca, { dnsNames: [HOST, '*.stargate.external'] })
  await mkdir(join(dir, 'tls'))
  await writeFile(join(dir, 'tls', 'tls.crt'), leaf.chainPem)
  await writeFile(join(dir, 'tls', 'tls.key'), leaf.keyPem)
  const caPath = join(dir, 'ca.crt')
  await writeFile(caPath, ca.certPem)
  const { p, frontDoor } = await startReadyRouter(t, [
    '--front-door-tls', '--tunnel-protocol', 'webtransport',
    '--tls-cert-path', join(dir, 'tls', 'tls.crt'), '--tls-key-path', join(dir, 'tls', 'tls.key'),
    '--upstream-tls-cert-path', caPath,
  ])
  const tunnelLine = await waitFor(() => p.logs().find((l) => typeof l.msg === 'string' && l.msg.startsWith('webtransport tunnel listening')), { message: 'the webtransport listening log line' })
  const listeners = [
    // The front door: the pod has no http port, so an HTTP answer (503) is what a session gets.
    { name: 'front door', port: frontDoor, http2: false },
    // WebTransport over HTTP/2 takes h2 only; a GET is refused with 400 once TLS is up.
    { name: 'webtransport tcp', port: (tunnelLine.tcp as { port: number }).port, http2: true },
  ]
  for (const listener of listeners) {
    for (const suite of CBC) {
      const result = await curl(listener.port, caPath, ['--tlsv1.2', '--tls-max', '1.2', '--ciphers', suite], listener.http2)
      t.equal(result.exit, SSL_CONNECT_ERROR, `${listener.name}: TLS 1.2 ${suite} is refused in the handshake (${result.negotiated || 'no session'})`)
    }
    for (const suite of AEAD) {
      const result = await curl(listener.port, caPath, ['--tlsv1.2', '--tls-max', '1.2', '--ciphers', suite], listener.http2)
      t.same([result.exit, result.negotiated], [0, `TLSv1.2 / ${suite}`], `${listener.name}: TLS 1.2 ${suite} is served`)
      t.match(result.status, /^[45]\d\d$/, `${listener.name}: ${suite}: an HTTP answer (${result.status})`)
    }
    const tls13 = await curl(listener.port, caPath, ['--tlsv1.3'], listener.http2)
    t.same([tls13.exit, tls13.negotiated], [0, 'TLSv1.3 / TLS_AES_256_GCM_SHA384'], `${listener.name}: TLS 1.3 as before`)
    for (const suite of ['TLS_CHACHA20_POLY1305_SHA256', 'TLS_AES_128_GCM_SHA256']) {
      const result = await curl(listener.port, caPath, ['--tlsv1.3', '--tls13-ciphers', suite], listener.http2)
      t.same([result.exit, result.negotiated], [0, `TLSv1.3 / ${suite}`], `${listener.name}: TLS 1.3 ${suite} is served`)
    }
  }
})
