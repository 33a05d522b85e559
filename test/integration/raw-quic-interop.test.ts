/**
 * Interop with an independent QUIC implementation on both legs. Debian's ngtcp2
 * example programs (GnuTLS builds: packages ngtcp2-client and ngtcp2-server) do an HTTP/3
 * GET through the router: gtlsclient dials the router's tunnel port with ALPN h3 and the
 * pod's advertised host as SNI; the router relays to gtlsserver, listed as the pod's quic
 * port; the downloaded body must hash like the file served.
 *
 * This gtlsclient build sends the <HOST> argument as SNI when it is a DNS name and
 * "localhost" for an IP (its --sni flag has no effect), so the router runs with the template
 * {pod_name} and the pod is named "localhost": the advertised host of the pod is then the
 * name the client dials.
 */
import t from 'tap'
import { createHash, randomBytes } from 'node:crypto'
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { waitFor } from '../fixtures/wait.ts'
import { GTLS_CLIENT, ngtcp2ExamplesSkip, run, startGtlsServer } from '../fixtures/ngtcp2-examples.ts'

const missing = await ngtcp2ExamplesSkip()

t.test('an HTTP/3 GET from ngtcp2 through the router reaches ngtcp2 and the body arrives intact', { skip: missing }, async (t) => {
  const cluster = await QuicCluster.start(t, { pods: [], subnet: '127.0.63', hosts: ['localhost'], args: ['--advertised-hostname-template', '{pod_name}'] })
  const htdocs = join(cluster.tls.dir, 'htdocs')
  const downloads = join(cluster.tls.dir, 'downloads')
  await mkdir(htdocs)
  await mkdir(downloads)
  const body = randomBytes(3 * 1024 * 1024 + 17)
  await writeFile(join(htdocs, 'model.bin'), body)
  await writeFile(join(cluster.tls.dir, 'pod.crt'), cluster.tls.stargate.chainPem)
  await writeFile(join(cluster.tls.dir, 'pod.key'), cluster.tls.stargate.keyPem)

  const podIp = '127.0.63.10'
  const server = await startGtlsServer(t, { host: podIp, htdocs, keyPath: join(cluster.tls.dir, 'pod.key'), certPath: join(cluster.tls.dir, 'pod.crt') })
  const podPort = server.port
  cluster.list('localhost', podIp, podPort, true)
  await cluster.waitForTargets(1)

  const client = run(t, GTLS_CLIENT, [
    '--quiet', '--exit-on-all-streams-close', '--download', downloads, '--timeout', '10s',
    'localhost', String(cluster.tunnelPort), `https://localhost:${cluster.tunnelPort}/model.bin`,
  ])
  const code = await Promise.race([client.exited, new Promise<'timeout'>((resolve) => { setTimeout(() => { resolve('timeout') }, 20_000).unref() })])
  t.equal(code, 0, `gtlsclient exited cleanly (${client.output().slice(-500)})`)
  const downloaded = await readFile(join(downloads, 'model.bin'))
  t.equal(createHash('sha256').update(downloaded).digest('hex'), createHash('sha256').update(body).digest('hex'), `the ${body.length}-byte body arrived intact`)
  await waitFor(async () => await cluster.outcome('completed') === 1, { message: 'the tunnel counted as completed' })
  t.equal(server.child.exitCode, null, 'gtlsserver is still serving')
})

// The router prefers AES-128-GCM on both legs (lib/quic/native/src/tls.c): as the server it
// picks it over a client that asks for AES-256-GCM first (rustls's order), as the client it asks
// for it first; a client that offers only AES-256-GCM still gets that.
t.test('cipher suites: the router picks AES-128-GCM on both legs, and a client offering only AES-256-GCM still gets through', { skip: missing }, async (t) => {
  const cluster = await QuicCluster.start(t, { pods: [], subnet: '127.0.64', hosts: ['localhost'], args: ['--advertised-hostname-template', '{pod_name}'] })
  const htdocs = join(cluster.tls.dir, 'htdocs')
  await mkdir(htdocs)
  await writeFile(join(htdocs, 'small.bin'), randomBytes(64 * 1024))
  await writeFile(join(cluster.tls.dir, 'pod.crt'), cluster.tls.stargate.chainPem)
  await writeFile(join(cluster.tls.dir, 'pod.key'), cluster.tls.stargate.keyPem)
  const podIp = '127.0.64.10'
  const server = await startGtlsServer(t, { host: podIp, htdocs, keyPath: join(cluster.tls.dir, 'pod.key'), certPath: join(cluster.tls.dir, 'pod.crt'), verbose: true })
  cluster.list('localhost', podIp, server.port, true)
  await cluster.waitForTargets(1)

  const negotiated = (output: string): string[] => [...output.matchAll(/^Negotiated cipher suite is (\S+)$/gm)].map((m) => m[1] as string)
  async function get (ciphers: string): Promise<string> {
    const client = run(t, GTLS_CLIENT, [
      '--no-quic-dump', '--no-http-dump', '--exit-on-all-streams-close', '--timeout', '10s', `--ciphers=${ciphers}`,
      'localhost', String(cluster.tunnelPort), `https://localhost:${cluster.tunnelPort}/small.bin`,
    ])
    const code = await Promise.race([client.exited, new Promise<'timeout'>((resolve) => { setTimeout(() => { resolve('timeout') }, 20_000).unref() })])
    t.equal(code, 0, `gtlsclient (${ciphers.slice(ciphers.indexOf('-CIPHER-ALL'))}) exited cleanly (${client.output().slice(-300)})`)
    return client.output()
  }

  const rustlsOrder = await get('NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM:+CHACHA20-POLY1305')
  t.same(negotiated(rustlsOrder), ['AES-128-GCM'], 'Pylon leg: AES-128-GCM, though the client asked for AES-256-GCM first')
  await waitFor(() => negotiated(server.output()).length === 1, { message: 'the pod leg handshake' })
  t.same(negotiated(server.output()), ['AES-128-GCM'], 'pod leg: the router offered AES-128-GCM first, and gtlsserver (client order) took it')

  const only256 = await get('NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-256-GCM')
  t.same(negotiated(only256), ['AES-256-GCM'], 'Pylon leg: a client offering only AES-256-GCM gets it')
  await waitFor(async () => await cluster.outcome('completed') === 2, { message: 'both tunnels counted as completed' })
})
