// On the WebTransport-over-HTTP/2 listener (--tunnel-protocol
// webtransport, TCP on the tunnel port), which runs the same rapid-reset guard as the front
// door (lib/http2-admission.ts): a Pylon connection that ended right after opening a couple of
// hundred session requests ended the router, the guard calling session.goaway() on the
// destroyed session (ERR_HTTP2_INVALID_SESSION from a stream 'close' handler, exit 1).
//
// With the per-connection session cap raised to its maximum (1,000), 200, 300 and 10,000
// extended CONNECTs (up to 1,000 wait for a pod that never completes a TCP handshake, the rest
// are answered 429 and, their answers held up by flow control, stay open), then the connection ends by FIN, RST, a PING on
// stream 1 (a connection error, RFC 9113 §6.7) or a GOAWAY from the client; and 2,000 streams
// past the stream limit, which makes nghttp2 end the session. After each the router is still
// running, /livez answers, and no session request is left in progress (every accepted one is
// counted ended: webtransport_sessions_total accepted = the sum of the ends, docs/metrics.md).
import t from 'tap'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import type { Fields } from '../fixtures/raw-h2.ts'
import { connectTlsResettable, runBursts, silentPort } from '../fixtures/h2-stream-burst.ts'
import { createCa, createLeaf } from '../fixtures/certs.ts'
import { probe, type Probe } from '../fixtures/fault-probe.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(90_000)

const IP = '127.0.1.131'
const POD_HOST = 'stargate-0.stargate.external'
/** Raised from the default 1,000 so that 10,000 streams are all open at once. */
const LIMIT = 10_000
/** --webtransport-max-sessions-per-connection at its maximum: past it requests are answered 429. */
const SESSION_CAP = 1000
const CONNECT: Fields = [[':method', 'CONNECT'], [':protocol', 'webtransport'], [':scheme', 'https'], [':path', '/_stargate/webtransport'], [':authority', POD_HOST]]
const ENDS = ['upstream_connect_error', 'upstream_rejected', 'completed', 'relay_error', 'trust_replaced']

/** No session request in progress: every accepted one was counted with an end. */
async function noneInProgress (router: Probe): Promise<boolean> {
  const name = 'stargate_k8s_router_webtransport_sessions_total'
  const accepted = await router.metric(name, { outcome: 'accepted' }) ?? 0
  let ended = 0
  for (const outcome of ENDS) ended += await router.metric(name, { outcome }) ?? 0
  return accepted === ended
}

t.test('a WebTransport h2 connection that ends right after opening many session requests costs only itself', async (t) => {
  const ca = await createCa({ name: 'burst wt ca' })
  const leaf = await createLeaf(ca, { dnsNames: ['*.stargate.external'] })
  const dir = await tempDir(t, 'stargate-burst-wt-')
  await writeFile(join(dir, 'tls.crt'), leaf.chainPem)
  await writeFile(join(dir, 'tls.key'), leaf.keyPem)
  const quicPort = await silentPort(t, IP)
  await writeFile(join(dir, 'targets.yaml'), `targets:\n  - {identity: stargate-0, address: ${IP}, grpcPort: 50051, quicPort: ${quicPort}}\n`)
  let tunnel = 0
  await runBursts(t, {
    start: async () => {
      const started = await startReadyRouter(t, [
        '--targets-file', join(dir, 'targets.yaml'),
        '--tunnel-protocol', 'webtransport', '--tls-cert-path', join(dir, 'tls.crt'), '--tls-key-path', join(dir, 'tls.key'),
        '--http2-max-concurrent-streams', String(LIMIT), '--webtransport-max-sessions-per-connection', String(SESSION_CAP),
        // Longer than any burst: every session request is still waiting when its connection ends.
        '--connect-timeout-ms', '60000',
      ])
      const listening = await waitFor(() => started.p.logs().find((l) => typeof l.msg === 'string' && l.msg.startsWith('webtransport tunnel listening')), { message: 'the webtransport listening log line' })
      tunnel = (listening.tcp as { port: number }).port
      return { p: started.p, router: probe(started.health) }
    },
    connect: () => connectTlsResettable(tunnel, { ca: ca.certPem, servername: POD_HOST }),
    fields: CONNECT,
    limit: LIMIT,
    counts: [200, 300, 10_000],
    released: noneInProgress,
  })
})
