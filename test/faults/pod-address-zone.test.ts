// A discovered pod address with an IPv6 zone id (`fe80::1%lo`). net.isIP accepts it, so the
// targets file listed such a pod as a target; undici could not build an origin from it, and
// the first POST to that pod threw from the request body's 'end' handler: the router exited
// with code 1 (a GET got 500 internal_error). A zone names an interface of the host reading
// the address, never where a pod is: such an entry is skipped and logged like any bad address
// (lib/discovery/pod-address.ts), and a connection undici cannot set up fails only its request
// (lib/http-forward/pod-connections.ts, tested in test/integration/http-forward-pod-connections).
//
// What the test sends: a targets file with that pod and a good one, then a POST and a GET
// naming the zoned pod; what it checks: the entry is skipped with its reason, the requests get
// the documented answer for a name that is no target (404 unknown_target), the router stays up and /livez answers.
import t from 'tap'
import net from 'node:net'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { GRPC_PYLON_DIAL_ADDR, httpGet, startProcess, tempDir } from '../fixtures/router-process.ts'
import { waitFor } from '../fixtures/wait.ts'

function exchange (port: number, request: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1', () => { socket.write(request) })
    let text = ''
    socket.on('data', (chunk: Buffer) => { text += chunk.toString('latin1') })
    socket.on('error', () => {})
    socket.on('close', () => { resolve(text) })
  })
}

t.test('a pod address with an IPv6 zone id is skipped; requests naming that pod cannot end the router', async (t) => {
  const path = join(await tempDir(t, 'stargate-targets-'), 'targets.yaml')
  await writeFile(path, [
    'targets:',
    '  - {identity: stargate-z, address: "fe80::1%lo", grpcPort: 50051, quicPort: 50052, httpPort: 8000}',
    '  - {identity: stargate-0, address: 127.0.1.1, grpcPort: 50051, quicPort: 50052, httpPort: 8000}',
  ].join('\n') + '\n')
  const p = await startProcess(t, [
    '--discovery', 'file', '--targets-file', path,
    '--listen-addr', '127.0.0.1:0', '--health-listen-addr', '127.0.0.1:0', '--reverse-tunnel-listen-addr', '127.0.0.1:0',
    '--grpc-pylon-dial-addr', GRPC_PYLON_DIAL_ADDR,
  ])
  const listening = await waitFor(() => p.logs().find((l) => l.msg === 'stargate router listening'), { timeoutMs: 60_000, message: 'the listening log line' })
  const health = (listening.health as { port: number }).port
  const frontDoor = (listening.frontDoor as { port: number }).port
  await waitFor(async () => (await httpGet(health, '/readyz')).status === 200, { timeoutMs: 10_000, message: '/readyz 200' })

  t.match(p.logs().find((l) => l.msg === 'targets file entry skipped'), { problem: 'targets[0] (stargate-z): address must be an IPv4 or IPv6 address' }, 'the entry is skipped with its reason')
  const snapshot = JSON.parse((await httpGet(health, '/debug/snapshot')).body) as { targets: Array<{ identity: string }> }
  t.same(snapshot.targets.map((x) => x.identity), ['stargate-0'], 'only the good pod is a target')

  const host = 'stargate-z.stargate.external'
  const post = await exchange(frontDoor, `POST /v1/chat/completions HTTP/1.1\r\nhost: ${host}\r\ncontent-type: application/json\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello`)
  const get = await exchange(frontDoor, `GET /v1/models HTTP/1.1\r\nhost: ${host}\r\nconnection: close\r\n\r\n`)
  // docs/errors.md: unknown_target, HTTP 404 `the host names no ready stargate`.
  t.match(post, /^HTTP\/1\.1 404 [^]*unknown_target/, 'the POST: the named pod is no target')
  t.match(get, /^HTTP\/1\.1 404 [^]*unknown_target/, 'the GET: the same')
  t.equal(p.child.exitCode, null, 'the router is still running')
  t.equal((await httpGet(health, '/livez')).status, 200, '/livez answers')
})
