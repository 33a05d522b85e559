// On the TLS front door (ALPN h2): a client that opened a couple of
// hundred streams and then lost its connection ended the router: the rapid-reset guard
// (SPEC §12, lib/http2-admission.ts) counted the streams the closed connection took
// with it as client resets, tripped at 200 and called session.goaway() on the destroyed
// session, which threw ERR_HTTP2_INVALID_SESSION from a stream 'close' handler: exit 1.
//
// 200 and 300 WatchStargates streams, then FIN, RST, a PING on stream 1 (a connection error,
// RFC 9113 §6.7) or a GOAWAY from the client; and 10,000 streams at the default stream limit of
// 1,000, which nghttp2 refuses until the session is destroyed. After each the router is still
// running, /livez answers, and every watch stream is released.
import t from 'tap'
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import type { Fields } from '../fixtures/raw-h2.ts'
import { connectTlsResettable, gaugeIsZero, runBursts } from '../fixtures/h2-stream-burst.ts'
import { createCa, createLeaf } from '../fixtures/certs.ts'
import { probe } from '../fixtures/fault-probe.ts'

t.setTimeout(90_000)

const SNI = 'router.example'
/** --http2-max-concurrent-streams's default. */
const LIMIT = 1000
const WATCH: Fields = [[':method', 'POST'], [':scheme', 'https'], [':path', '/stargate.StargateControlPlane/WatchStargates'], [':authority', SNI], ['content-type', 'application/grpc'], ['te', 'trailers']]

t.test('a TLS h2 connection that ends right after opening many streams costs only itself', async (t) => {
  const ca = await createCa({ name: 'burst ca' })
  const leaf = await createLeaf(ca, { dnsNames: [SNI] })
  const dir = await tempDir(t, 'stargate-burst-')
  await mkdir(join(dir, 'tls'))
  await writeFile(join(dir, 'tls', 'tls.crt'), leaf.chainPem)
  await writeFile(join(dir, 'tls', 'tls.key'), leaf.keyPem)
  let frontDoor = 0
  await runBursts(t, {
    start: async () => {
      const started = await startReadyRouter(t, ['--front-door-tls', '--tls-cert-path', join(dir, 'tls', 'tls.crt'), '--tls-key-path', join(dir, 'tls', 'tls.key')])
      frontDoor = started.frontDoor
      return { p: started.p, router: probe(started.health) }
    },
    connect: () => connectTlsResettable(frontDoor, { ca: ca.certPem, servername: SNI }),
    fields: WATCH,
    limit: LIMIT,
    counts: [200, 300, 10_000],
    released: gaugeIsZero('stargate_k8s_router_watch_streams_active'),
  })
})
