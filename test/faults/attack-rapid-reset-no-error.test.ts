// FAILS at 25c8c0e (independent attack run): the rapid-reset guard (CVE-2023-44487, SPEC §12,
// lib/front-door/http2-guard.ts) does not see a client that resets its streams with
// RST_STREAM NO_ERROR. The guard counts a stream as reset only when its rstCode is not
// NO_ERROR, and a stream the client resets with code 0 looks like one that completed. With
// CANCEL a connection is told GOAWAY ENHANCE_YOUR_CALM after 200 early resets; with NO_ERROR,
// 28 streams a second, each forwarded to the pod and reset 20 ms later, ran for 20 s on one
// connection (569 requests reached the pod) and the connection was never closed; a burst was
// stopped only by nghttp2's own token bucket (about 1,000 resets, then GOAWAY INTERNAL_ERROR,
// not counted in stargate_k8s_router_http2_rapid_reset_closes_total). The same guard runs on
// the TLS front door and the WebTransport HTTP/2 listener, where the attack run saw the same.
//
// What the test sends: 300 GETs on one h2c connection, each reset with RST_STREAM NO_ERROR in
// the next write (so the request reached the router first), as the CANCEL case does; what it
// checks: GOAWAY ENHANCE_YOUR_CALM and the rapid-reset counter, as for CANCEL.
import t from 'tap'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startReadyRouter, tempDir } from '../fixtures/router-process.ts'
import { FLAG, FRAME, RawH2Client, frame, type Fields } from '../fixtures/raw-h2.ts'
import { probe } from '../fixtures/fault-probe.ts'
import { sleep } from '../fixtures/wait.ts'

t.setTimeout(90_000)

const IP = '127.0.1.171'
const GET: Fields = [[':method', 'GET'], [':scheme', 'http'], [':path', '/slow'], [':authority', 'llm.example']]

function rstStream (id: number, code: number): Buffer {
  const payload = Buffer.alloc(4)
  payload.writeUInt32BE(code)
  return frame(FRAME.RST_STREAM, 0, id, payload)
}

for (const [code, name] of [[8, 'CANCEL'], [0, 'NO_ERROR']] as const) {
  t.test(`300 forwarded requests reset at once with RST_STREAM ${name} close the connection`, async (t) => {
    const pod = http.createServer((req, res) => { req.resume(); setTimeout(() => { if (!res.destroyed) res.end('late') }, 2000) })
    await new Promise<void>((resolve) => { pod.listen(0, IP, resolve) })
    t.teardown(() => { pod.closeAllConnections(); pod.close() })
    const targets = join(await tempDir(t, 'stargate-rr-'), 'targets.yaml')
    await writeFile(targets, `targets:\n  - {identity: stargate-0, address: ${IP}, grpcPort: 50051, quicPort: 50052, httpPort: ${(pod.address() as AddressInfo).port}}\n`)
    const { frontDoor, health } = await startReadyRouter(t, ['--targets-file', targets])
    const client = await RawH2Client.connect(frontDoor)
    t.teardown(() => { client.close() })
    for (let batch = 0; batch < 6 && !client.closed; batch++) {
      const ids = Array.from({ length: 50 }, (_, i) => 1 + 2 * (batch * 50 + i))
      client.write(Buffer.concat(ids.map((id) => frame(FRAME.HEADERS, FLAG.END_HEADERS | FLAG.END_STREAM, id, client.encode(GET)))))
      await sleep(20)
      client.write(Buffer.concat(ids.map((id) => rstStream(id, code))))
      await sleep(5)
    }
    const goaway = await client.waitFrame((f) => f.type === FRAME.GOAWAY, 5000).catch(() => null)
    t.equal(goaway === null ? 'none' : goaway.payload.readUInt32BE(4), 0xb, 'the connection is told GOAWAY ENHANCE_YOUR_CALM')
    t.equal(await probe(health).metric('stargate_k8s_router_http2_rapid_reset_closes_total'), 1, 'and counted as a rapid reset')
  })
}
