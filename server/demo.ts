/**
 * `npm run demo`: the whole system on one machine, no cluster needed, finishing by itself in
 * well under a minute.
 *
 *   fake kube-apiserver ◀── simulated Deployment of 3 Stargates (stub pods on 127.0.250.x)
 *          │ EndpointSlices                     ▲ gRPC, QUIC, HTTP to each pod's current IP
 *          ▼                                    │
 *        router (TLS front door, raw QUIC tunnels, HTTP forwarding) ◀── Pylon, LLM client
 *
 * A Pylon watches WatchStargates, registers with every advertised Stargate and opens its
 * reverse tunnel; a Stargate sends a request back through that tunnel; an LLM client streams
 * a completion; the Deployment scales 3→1→3 and rolls; the router's certificate is rotated
 * like a Kubernetes Secret. A summary table ends the tour.
 */
import https from 'node:https'
import { connect as tlsConnect, type TLSSocket } from 'node:tls'
import { once } from 'node:events'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import * as grpc from '@grpc/grpc-js'
import { parseConfig } from '../lib/config/config.ts'
import { createLogger } from '../lib/log.ts'
import { splitHostPort } from '../lib/host-port.ts'
import { startRouter, type RunningRouter } from './router.ts'
import { NAMESPACE } from '../test/fixtures/kube-router.ts'
import { SimulatedCluster } from '../test/fixtures/cluster/cluster.ts'
import { createCa, createLeaf } from '../test/fixtures/certs.ts'
import { ProjectedVolume } from '../test/fixtures/projected-volume.ts'
import { StubStargateQuic } from '../test/fixtures/quic-stargate.ts'
import { PylonTunnel } from '../test/fixtures/quic-pylon.ts'
import { H3Stargate } from '../test/fixtures/h3-stargate.ts'
import { openH3Session } from '../test/fixtures/h3-pylon.ts'
import { readAll } from '../test/fixtures/h3-wt-session.ts'
import { Pylon, type Registration } from '../test/fixtures/pylon.ts'
import { waitFor } from '../test/fixtures/wait.ts'

const out = (line = ''): void => { process.stdout.write(line + '\n') }
/** `npm run demo -- --webtransport` runs the reverse tunnels as WebTransport over HTTP/3, as real Pylons and Stargates. */
const WEBTRANSPORT = process.argv.includes('--webtransport')
const HOST_SUFFIX = '.stargate.external'

/** Collects cleanup callbacks like a test's teardown, run in reverse order at the end. */
class Teardown {
  readonly #fns: Array<() => unknown> = []
  teardown (fn: () => unknown): void { this.#fns.push(fn) }
  async run (): Promise<void> {
    for (const fn of this.#fns.reverse()) {
      try { await fn() } catch { /* best effort */ }
    }
  }
}

interface Row { step: string, advertised: string, convergeMs: string, note: string }

async function main (): Promise<void> {
  const started = Date.now()
  const t = new Teardown()
  const rows: Row[] = []
  const dir = await mkdtemp(join(tmpdir(), 'stargate-demo-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))

  out('stargate-router demo: a simulated Kubernetes namespace, the router, a Pylon and an LLM client, all on loopback')
  out()

  // TLS: one CA; the router's identity mounted like a Secret; the pods' identity for QUIC.
  const ca = await createCa({ name: 'demo ca' })
  const routerCert = await createLeaf(ca, { dnsNames: [`*${HOST_SUFFIX}`] })
  const podCert = await createLeaf(ca, { dnsNames: [`*${HOST_SUFFIX}`] })
  const secret = await ProjectedVolume.create(join(dir, 'router-tls'), { 'tls.crt': routerCert.chainPem, 'tls.key': routerCert.keyPem, 'ca.crt': ca.certPem })

  const cluster = await SimulatedCluster.start(t, {
    kind: 'Deployment',
    subnet: '127.0.250',
    maxEndpointsPerSlice: 2,
    runtime: {
      quicServer: WEBTRANSPORT
        ? async ({ podName, ip, port }) => {
          const stub = H3Stargate.start({ podName, ip, port, certPem: podCert.chainPem, keyPem: podCert.keyPem })
          t.teardown(() => stub.close())
          return { port: stub.port, close: () => stub.close() }
        }
        : async ({ ip, port }) => StubStargateQuic.start(t, { ip, port, certPem: podCert.chainPem, keyPem: podCert.keyPem }),
    },
  })
  await cluster.settle(cluster.install(3))
  out(`1. a Deployment of 3 Stargates: ${cluster.readyPods().map((p) => `${p.name} @ ${p.ip}`).join(', ')}`)

  const parsed = parseConfig([
    '--target-namespace', NAMESPACE,
    '--listen-addr', '127.0.0.1:0', '--health-listen-addr', '127.0.0.1:0', '--reverse-tunnel-listen-addr', '127.0.0.1:0',
    '--grpc-pylon-dial-addr', 'https://router.stargate.external:443',
    // TLS on the front door too, as an operator turns it on without a Gateway in front.
    '--front-door-tls', '--tls-cert-path', secret.path('tls.crt'), '--tls-key-path', secret.path('tls.key'),
    '--upstream-tls-cert-path', secret.path('ca.crt'),
    ...(WEBTRANSPORT ? ['--tunnel-protocol', 'webtransport'] : []),
    '--tls-debounce-ms', '50', '--drain-grace-ms', '500', '--shutdown-drain-timeout-ms', '1000', '--watch-heartbeat-ms', '3600000',
  ], {})
  if (parsed.kind !== 'config') throw new Error('unexpected --help')
  const router: RunningRouter = await startRouter(parsed.config, { logger: createLogger({ level: 'error', format: 'json' }), kubeConfig: cluster.fake.kubeConfig(), discoveryBackoff: { baseMs: 100, maxMs: 1000 } })
  t.teardown(() => router.shutdown())
  const frontDoor = router.frontDoor.port
  const tunnelPort = router.tunnel.udp?.port ?? 0
  out(`   router: front door https 127.0.0.1:${frontDoor} (--front-door-tls; cleartext h2c without it), ${WEBTRANSPORT ? 'WebTransport tunnels (HTTP/3 on udp, HTTP/2 on tcp)' : 'QUIC tunnels udp'} 127.0.0.1:${tunnelPort}, health http://127.0.0.1:${router.health.port}/readyz`)

  // The Pylon: TLS to the router, verifying it against the demo CA.
  const credentials = grpc.credentials.createSsl(Buffer.from(ca.certPem))
  const pylon = new Pylon({ routerAddress: `127.0.0.1:${frontDoor}`, credentials, channelOptions: { 'grpc.ssl_target_name_override': `router${HOST_SUFFIX}` }, heartbeatMs: 200 })
  t.teardown(() => { pylon.close() })
  const advertised = (): string => (pylon.latest?.stargates ?? []).map((s) => s.stargateId).join(', ')
  pylon.watch()

  const converge = async (step: string, note: string): Promise<void> => {
    const from = Date.now()
    const want = cluster.readyPods().map((p) => p.name).join(', ')
    await waitFor(() => advertised() === want, { timeoutMs: 15_000, message: `WatchStargates to advertise ${want}` })
    const ms = Date.now() - from
    out(`   WatchStargates -> ${want === '' ? '(none)' : want}  (converged ${ms} ms after the change settled)`)
    rows.push({ step, advertised: want, convergeMs: String(ms), note })
  }
  await converge('install 3', 'one identity per ready pod, the Pod name')

  out()
  out('2. the Pylon registers with every advertised Stargate through the router (TLS, :authority = advertise_addr)')
  const registrations: Registration[] = []
  for (const stargate of pylon.latest?.stargates ?? []) {
    const registration = pylon.register(stargate)
    registrations.push(registration)
    await waitFor(() => registration.acks.length > 0 && registration.pod !== null, { timeoutMs: 10_000, message: `an ack from ${stargate.stargateId}` })
    out(`   ${stargate.advertiseAddr} -> answered by pod ${registration.pod ?? '?'}; ack: open the reverse tunnel to ${registration.acks[0]?.reverseTunnelTarget ?? '?'}`)
  }

  out()
  if (WEBTRANSPORT) {
    out('3. each reverse tunnel: the Pylon opens a WebTransport session over HTTP/3 at /_stargate/webtransport through the router, SNI = the ack\'s host')
    for (const registration of registrations) {
      const host = splitHostPort(registration.acks[0]?.reverseTunnelTarget ?? '').host
      const opened = await openH3Session({ address: '127.0.0.1', port: tunnelPort, sni: host, caPem: ca.certPem, fields: [['x-inference-server-id', 'demo-pylon']] })
      if (opened.session === null) throw new Error(`WebTransport session to ${host} answered ${opened.status} ${opened.body}`)
      t.teardown(() => { opened.h3?.close() })
      const hello = await opened.session.incomingUni.next()
      const pod = hello === null ? '?' : (await readAll(hello)).toString()
      const stream = await opened.session.open(true)
      const reply = readAll(stream)
      stream.end(Buffer.from('GET /v1/models'))
      const echo = (await reply).toString()
      out(`   ${registration.stargate.stargateId}: session ${opened.status} via SNI ${host}; hello from pod ${pod}; stream echoed "${echo}"`)
    }
  } else {
    out('3. each reverse tunnel: the Pylon dials the router over QUIC with the ack\'s host as SNI; the Stargate sends a request back through it')
    for (const registration of registrations) {
      const host = splitHostPort(registration.acks[0]?.reverseTunnelTarget ?? '').host
      const tunnel = await PylonTunnel.dial(t, { port: tunnelPort, serverName: host, caPem: ca.certPem })
      await tunnel.ready()
      const pod = cluster.pod(registration.stargate.stargateId)
      const stub = pod?.process.quic as StubStargateQuic | undefined
      if (stub === undefined) continue
      const accepted = await stub.tunnel()
      const answer = await stub.request(accepted, 'GET /v1/models')
      out(`   ${pod?.name ?? '?'}: tunnel SNI ${accepted.serverName ?? '(none)'}; Stargate -> router -> Pylon -> back: "${answer.toString()}"`)
    }
  }
  rows.push({ step: 'tunnels', advertised: advertised(), convergeMs: '-', note: `${registrations.length} ${WEBTRANSPORT ? 'WebTransport' : 'raw QUIC'} reverse tunnels relayed` })

  out()
  out('4. an LLM client streams a completion through the router (Host names the pod; SSE tokens flushed as they arrive)')
  const target = cluster.readyPods()[0]?.name ?? ''
  const tokens = await streamCompletion(frontDoor, `${target}${HOST_SUFFIX}`, ca.certPem)
  out(`   POST /v1/chat/completions (stream) via Host ${target}${HOST_SUFFIX} -> ${tokens.count} tokens from pod ${tokens.pod}`)
  rows.push({ step: 'LLM request', advertised: advertised(), convergeMs: '-', note: `${tokens.count} SSE tokens from ${tokens.pod}` })

  out()
  out('5. scale 3 -> 1')
  await cluster.settle(cluster.scale(1))
  await converge('scale 3->1', 'streams to removed pods end UNAVAILABLE after --drain-grace-ms')
  out('   scale 1 -> 3')
  await cluster.settle(cluster.scale(3))
  await converge('scale 1->3', 'new pods: new generated names and IPs')
  out('   rolling replacement of every pod')
  await cluster.settle(cluster.rollingUpdate())
  await converge('rolling update', 'every identity routes to its new pod')

  out()
  out('6. certificate rotation: the router\'s Secret is swapped (..data symlink, like kubelet)')
  const before = await servedSerial(frontDoor, ca.certPem)
  const next = await createLeaf(ca, { dnsNames: [`*${HOST_SUFFIX}`] })
  const rotatedAt = Date.now()
  await secret.swap({ 'tls.crt': next.chainPem, 'tls.key': next.keyPem, 'ca.crt': ca.certPem })
  const after = await waitFor(async () => { const s = await servedSerial(frontDoor, ca.certPem); return s !== before ? s : null }, { timeoutMs: 10_000, message: 'the new certificate' })
  out(`   serial ${before} -> ${after} on new handshakes ${Date.now() - rotatedAt} ms after the swap; no restart, open connections untouched`)
  rows.push({ step: 'cert rotation', advertised: advertised(), convergeMs: String(Date.now() - rotatedAt), note: 'new handshakes see the new certificate' })

  out()
  const readyz = await fetch(`http://127.0.0.1:${router.health.port}/readyz`)
  out(`/readyz: ${readyz.status} ${(await readyz.text()).trim()}`)
  out()
  out('summary')
  const widths = [16, 82, 12]
  const line = (cells: string[]): string => cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join(' | ')
  out(line(['step', 'advertised (WatchStargates)', 'converge ms', 'note']))
  out(line(['-'.repeat(16), '-'.repeat(82), '-'.repeat(12), '-'.repeat(20)]))
  for (const row of rows) out(line([row.step, row.advertised, row.convergeMs, row.note]))
  out()
  out(`done in ${((Date.now() - started) / 1000).toFixed(1)} s`)
  await t.run()
}

async function servedSerial (port: number, caPem: string): Promise<string> {
  const socket: TLSSocket = tlsConnect({ port, host: '127.0.0.1', servername: `router${HOST_SUFFIX}`, ca: caPem, ALPNProtocols: ['h2'] })
  await once(socket, 'secureConnect')
  const serial = socket.getPeerCertificate().serialNumber
  socket.destroy()
  return serial
}

function streamCompletion (port: number, host: string, caPem: string): Promise<{ count: number, pod: string }> {
  return new Promise((resolve, reject) => {
    const req = https.request({ host: '127.0.0.1', port, servername: host, ca: caPem, method: 'POST', path: '/v1/chat/completions', headers: { host, 'content-type': 'application/json' }, agent: false }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => { text += chunk })
      res.on('end', () => {
        const events = text.split('\n\n').filter((e) => e.startsWith('data: {'))
        resolve({ count: events.length, pod: String(res.headers['x-stargate-pod'] ?? '?') })
      })
    })
    req.on('error', reject)
    req.end(JSON.stringify({ model: 'demo', stream: true, max_tokens: 12, messages: [{ role: 'user', content: 'hello' }] }))
  })
}

await main()
process.exit(0)
