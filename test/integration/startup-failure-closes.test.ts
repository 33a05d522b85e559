/**
 * A start-up that fails late — the tunnel port is taken, after the
 * TLS material, discovery, the pod pools, the health port and the front door have started —
 * closes all of it, last started first (server/closer-stack.ts). Before, it closed some by hand
 * and left the HTTP pods and the upstream pool open. Checked in a child process on real
 * sockets: what the router had open is gone a loop turn after startRouter rejects (no listener, no
 * socket, no timer, no file watcher), and the process then exits by itself.
 */
import t from 'tap'
import dgram from 'node:dgram'
import net from 'node:net'
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { writeFile } from 'node:fs/promises'
import { GRPC_PYLON_DIAL_ADDR, tempDir, type Teardown } from '../fixtures/router-process.ts'
import { RawHttpPod } from '../fixtures/raw-http-pod.ts'

t.setTimeout(90_000)

const root = fileURLToPath(new URL('../../', import.meta.url))
const NODE = join(root, 'node_modules', '.bin', 'node')
const FAILED_START = join(root, 'test', 'fixtures', 'failed-start.ts')
const EXIT_WITH_PARENT = join(root, 'test', 'fixtures', 'exit-with-parent.ts')
/** Handle kinds that would be something the router left open (process.getActiveResourcesInfo()). */
const LEFT_OPEN = ['TCPServerWrap', 'TCPSocketWrap', 'TCPWrap', 'UDPWrap', 'Timeout', 'Immediate', 'FSEventWrap', 'StatWatcher', 'TLSWrap', 'Http2Session']
/** A failed start-up's process ends at once; this only bounds a hang on a loaded machine. */
const EXIT_TIMEOUT_MS = 20_000

interface Report {
  readonly error?: { readonly message: string, readonly code: string | null }
  readonly resources?: readonly string[]
  readonly started?: true
}

interface Case {
  readonly protocol: 'raw-quic' | 'webtransport'
  /** The transport whose port is taken: raw QUIC's UDP, or WebTransport's HTTP/2 over TCP (its HTTP/3 UDP socket is bound by then). */
  readonly taken: 'udp' | 'tcp'
}

/** Holds a loopback port on one transport until teardown; resolves with its number. */
async function takePort (t: Teardown, transport: 'udp' | 'tcp'): Promise<number> {
  if (transport === 'udp') {
    const socket = dgram.createSocket('udp4')
    await new Promise<void>((resolve) => { socket.bind(0, '127.0.0.1', resolve) })
    t.teardown(() => { socket.close() })
    return socket.address().port
  }
  const server = net.createServer()
  await new Promise<void>((resolve) => { server.listen(0, '127.0.0.1', resolve) })
  t.teardown(() => { server.close() })
  return (server.address() as net.AddressInfo).port
}

const CASES: readonly Case[] = [
  { protocol: 'raw-quic', taken: 'udp' },
  { protocol: 'webtransport', taken: 'tcp' },
]

for (const { protocol, taken } of CASES) {
  t.test(`a ${protocol} start-up that fails at a taken ${taken} tunnel port leaves no listener, socket or timer, and the process exits by itself`, async (t) => {
    const pod = await RawHttpPod.start('127.0.117.10', () => {})
    t.teardown(() => { pod.close() })
    const dir = await tempDir(t, 'stargate-targets-')
    const targets = join(dir, 'targets.yaml')
    await writeFile(targets, `targets:\n  - {identity: stargate-0, address: 127.0.117.10, grpcPort: 50051, quicPort: 4433, httpPort: ${pod.port}}\n`)
    const port = await takePort(t, taken)

    const child = spawn(NODE, ['--import', EXIT_WITH_PARENT, FAILED_START,
      '--discovery', 'file', '--targets-file', targets, '--grpc-pylon-dial-addr', GRPC_PYLON_DIAL_ADDR,
      '--listen-addr', '127.0.0.1:0', '--health-listen-addr', '127.0.0.1:0',
      '--tunnel-protocol', protocol, '--reverse-tunnel-listen-addr', `127.0.0.1:${port}`,
    ], { cwd: root, env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: dir }, stdio: ['pipe', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => { out += chunk })
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => { err += chunk })
    const exited = new Promise<number | null>((resolve) => { child.on('close', (code) => { resolve(code) }) })
    t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL') })
    const code = await Promise.race([exited, new Promise<'hung'>((resolve) => { setTimeout(() => { resolve('hung') }, EXIT_TIMEOUT_MS).unref() })])

    const report = JSON.parse(out.split('\n')[0] ?? '{}') as Report
    t.notOk(report.started, 'start-up failed')
    t.match(report.error, { code: 'EADDRINUSE' }, 'because the tunnel port is taken')
    t.same(report.resources?.filter((kind) => LEFT_OPEN.includes(kind)), [], `nothing left open (active: ${JSON.stringify(report.resources)})`)
    t.equal(code, 0, `the process exits by itself (stderr: ${err.slice(-2000)})`)
    t.notOk(err.includes('stargate router listening'), 'it never said it was listening')
  })
}
