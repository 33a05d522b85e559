/**
 * Issue 5: interop with an independent QUIC implementation on both legs. Debian's ngtcp2
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
