// An HTTP/2 client that opened a couple of hundred streams and then lost
// its connection ended the router. Closing the connection closes every stream with CANCEL;
// the rapid-reset guard (SPEC §12, lib/http2-admission.ts) counted those as client
// resets, tripped at 200 and called session.goaway() on the session Node had already
// destroyed: ERR_HTTP2_INVALID_SESSION thrown from a stream 'close' handler, exit 1. 199
// streams survived, 200 did not.
//
// Here on the cleartext front door (h2c, prior knowledge): 200, 300 and 10,000 WatchStargates
// streams (no pod involved), then the connection ends by FIN, RST, a PING on stream 1 (a
// connection error, RFC 9113 §6.7) or a GOAWAY from the client; and 2,000 streams past the
// stream limit, which makes nghttp2 end the session. After each the router is still running,
// /livez answers, and every watch stream is released.
import t from 'tap'
import { startReadyRouter } from '../fixtures/router-process.ts'
import { RawH2Client, type Fields } from '../fixtures/raw-h2.ts'
import { gaugeIsZero, runBursts } from '../fixtures/h2-stream-burst.ts'
import { probe } from '../fixtures/fault-probe.ts'

t.setTimeout(90_000)

/** Raised from the default 1,000 so that 10,000 streams are all open at once. */
const LIMIT = 10_000
const WATCH: Fields = [[':method', 'POST'], [':scheme', 'http'], [':path', '/stargate.StargateControlPlane/WatchStargates'], [':authority', 'router.example'], ['content-type', 'application/grpc'], ['te', 'trailers']]

t.test('an h2c connection that ends right after opening many streams costs only itself', async (t) => {
  let frontDoor = 0
  await runBursts(t, {
    start: async () => {
      const started = await startReadyRouter(t, ['--http2-max-concurrent-streams', String(LIMIT)])
      frontDoor = started.frontDoor
      return { p: started.p, router: probe(started.health) }
    },
    connect: () => RawH2Client.connect(frontDoor),
    fields: WATCH,
    limit: LIMIT,
    counts: [200, 300, 10_000],
    released: gaugeIsZero('stargate_k8s_router_watch_streams_active'),
  })
})
