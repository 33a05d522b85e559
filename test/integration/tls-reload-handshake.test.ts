// SPEC §8 "Candidate then commit" and "Connections", end to end on loopback: a real
// tls.Server whose SecureContext is swapped through a TlsConsumer (server.setSecureContext),
// real tls.connect clients. New handshakes see a new identity while established connections
// keep working; a rejected generation leaves the old certificate served; session tickets from
// before a swap do not resume after it; after a client-trust swap, the client whose
// certificate no longer verifies is found with verifiesAgainst and cannot reconnect.
import t, { type Test } from 'tap'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { once } from 'node:events'
import { connect, createServer, type ConnectionOptions, type Server, type TLSSocket } from 'node:tls'
import type { AddressInfo } from 'node:net'
import { Registry } from 'prom-client'
import { TlsMaterialManager } from '../../lib/tls/manager.ts'
import { createTlsMetrics, type TlsMetrics } from '../../lib/tls/metrics.ts'
import { secureContextConsumer, serverContextOptions } from '../../lib/tls/secure-context-consumer.ts'
import { peerChainOf, verifiesAgainst } from '../../lib/tls/client-cert.ts'
import { ProjectedVolume, type Files } from '../fixtures/projected-volume.ts'
import { createCa, createIntermediate, createLeaf, type Leaf } from '../fixtures/certs.ts'
import { createLogSink } from '../fixtures/log-sink.ts'
import { waitFor } from '../fixtures/wait.ts'

const root = await createCa({ name: 'handshake root' })
const intermediate = await createIntermediate(root, { name: 'handshake intermediate' })
const first = await createLeaf(intermediate, { dnsNames: ['router.example'] })
const second = await createLeaf(intermediate, { dnsNames: ['router.example'] })
const oldPylonCa = await createCa({ name: 'pylon ca old' })
const newPylonCa = await createCa({ name: 'pylon ca new' })
const oldPylon = await createLeaf(oldPylonCa, { dnsNames: ['pylon-old'], clientAuth: true })
const newPylon = await createLeaf(newPylonCa, { dnsNames: ['pylon-new'], clientAuth: true })

const identity = (leaf: Leaf): Files => ({ 'tls.crt': leaf.chainPem, 'tls.key': leaf.keyPem })

interface Harness {
  readonly volume: ProjectedVolume
  readonly trust: ProjectedVolume | null
  readonly manager: TlsMaterialManager
  readonly metrics: TlsMetrics
  readonly server: Server
  readonly port: number
  /** Server-side sockets of established connections. */
  readonly accepted: Set<TLSSocket>
}

async function tempDir (t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'stargate-tls-handshake-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

/** An echo server whose context follows the manager; with mTLS when a client bundle is given. */
async function startServer (t: Test, options: { clientTrust?: string } = {}): Promise<Harness> {
  const base = await tempDir(t)
  const volume = await ProjectedVolume.create(join(base, 'tls'), identity(first))
  const trust = options.clientTrust === undefined ? null : await ProjectedVolume.create(join(base, 'client-ca'), { 'ca.crt': options.clientTrust })
  const metrics = createTlsMetrics(new Registry())
  const manager = await TlsMaterialManager.start({
    serverIdentity: { certPath: volume.path('tls.crt'), keyPath: volume.path('tls.key') },
    upstreamTrust: null,
    clientTrust: trust === null ? null : { path: trust.path('ca.crt') },
    debounceMs: 20,
    pollMs: 0,
    metrics,
    logger: createLogSink().logger,
  })
  const mtls = trust !== null
  const accepted = new Set<TLSSocket>()
  const server = createServer({ requestCert: mtls, rejectUnauthorized: mtls }, (socket) => {
    accepted.add(socket)
    socket.on('close', () => { accepted.delete(socket) })
    socket.on('error', () => {})
    socket.pipe(socket)
  })
  server.on('tlsClientError', () => {})
  manager.addConsumer(secureContextConsumer({
    name: 'test server',
    dependsOn: mtls ? ['server_identity', 'client_trust'] : ['server_identity'],
    buildOptions: (state) => serverContextOptions(state, { withClientTrust: mtls }),
    apply: (built) => { server.setSecureContext(built.options) },
  }))
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(async () => {
    await manager.close()
    for (const socket of accepted) socket.destroy()
    await new Promise((resolve) => server.close(resolve))
  })
  return { volume, trust, manager, metrics, server, port: (server.address() as AddressInfo).port, accepted }
}

/** Connects, completes the handshake, and proves the connection carries data. */
async function open (t: Test, port: number, options: ConnectionOptions = {}): Promise<TLSSocket> {
  const socket = connect({ port, host: '127.0.0.1', servername: 'router.example', ca: root.certPem, ...options })
  t.teardown(() => { socket.destroy() })
  await once(socket, 'secureConnect')
  await roundTrip(socket, 'hello')
  return socket
}

/** Writes text and resolves with the echo; rejects if the connection ends first. */
function roundTrip (socket: TLSSocket, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let received = ''
    const onData = (chunk: Buffer): void => {
      received += chunk.toString()
      if (received.length >= text.length) { cleanup(); resolve(received) }
    }
    const onEnd = (err?: Error): void => { cleanup(); reject(err ?? new Error('connection closed before the echo')) }
    const cleanup = (): void => {
      socket.off('data', onData)
      socket.off('error', onEnd)
      socket.off('close', onEnd)
    }
    socket.on('data', onData)
    socket.once('error', onEnd)
    socket.once('close', () => { onEnd() })
    socket.write(text)
  })
}

function servedFingerprint (socket: TLSSocket): string | undefined {
  // Not getPeerX509Certificate(): on a client socket Node 24 answers it only once.
  return socket.getPeerCertificate().fingerprint256
}

t.test('after a valid swap a new handshake sees the new certificate while an established connection keeps working', async (t) => {
  const { volume, manager, port } = await startServer(t)
  const established = await open(t, port)
  t.equal(servedFingerprint(established), first.x509.fingerprint256)
  await volume.swap(identity(second))
  await waitFor(() => manager.state().serverIdentity?.chain[0]?.fingerprint256 === second.x509.fingerprint256, { message: 'the reload' })
  const fresh = await open(t, port)
  t.equal(servedFingerprint(fresh), second.x509.fingerprint256, 'the new handshake got the new certificate')
  t.equal(await roundTrip(established, 'still here'), 'still here', 'the old connection still carries data')
  t.equal(servedFingerprint(established), first.x509.fingerprint256)
})

t.test('after an invalid swap the old certificate is still served and the rejection is counted once', async (t) => {
  const { volume, metrics, port } = await startServer(t)
  const rejections = async (): Promise<number> => (await metrics.tlsReloadRejections.get()).values
    .find((v) => v.labels.material_type === 'server_identity' && v.labels.reason === 'key_mismatch')?.value ?? 0
  await volume.swap({ 'tls.crt': second.chainPem, 'tls.key': first.keyPem })
  await waitFor(async () => await rejections() === 1, { message: 'the rejection' })
  await volume.swap({ 'tls.crt': second.chainPem, 'tls.key': first.keyPem })
  const socket = await open(t, port)
  t.equal(servedFingerprint(socket), first.x509.fingerprint256)
  t.equal(await rejections(), 1)
})

t.test('a session ticket issued before a swap does not resume a session after it', async (t) => {
  const { volume, manager, port } = await startServer(t)
  const ticket = async (): Promise<Buffer> => {
    const socket = connect({ port, host: '127.0.0.1', servername: 'router.example', ca: root.certPem })
    t.teardown(() => { socket.destroy() })
    const [session] = await once(socket, 'session') as [Buffer]
    socket.end()
    return session
  }
  const resumed = async (session: Buffer): Promise<boolean> => {
    const socket = await open(t, port, { session })
    const reused = socket.isSessionReused()
    socket.end()
    return reused
  }
  t.equal(await resumed(await ticket()), true, 'tickets resume while the material is unchanged')
  const before = await ticket()
  await volume.swap(identity(second))
  await waitFor(() => manager.state().generations.server_identity === 2, { message: 'the reload' })
  t.equal(await resumed(before), false, 'the old ticket was not accepted')
})

t.test('after a client-trust swap the pylon whose certificate no longer verifies is found and cannot reconnect, the other keeps its connection', async (t) => {
  const { trust, manager, port, accepted } = await startServer(t, { clientTrust: oldPylonCa.certPem + newPylonCa.certPem })
  if (trust === null) return t.fail('no trust volume')
  // What the router does on a client-trust change: close what no longer verifies.
  manager.onChange((changed, _previous, next) => {
    if (changed !== 'client_trust' || next.clientTrust === null) return
    for (const socket of accepted) {
      if (!verifiesAgainst(peerChainOf(socket), next.clientTrust, new Date())) socket.destroy()
    }
  })
  const asOld = { cert: oldPylon.certPem, key: oldPylon.keyPem }
  const asNew = { cert: newPylon.certPem, key: newPylon.keyPem }
  const oldConnection = await open(t, port, asOld)
  const newConnection = await open(t, port, asNew)
  const oldClosed = once(oldConnection, 'close')
  await trust.swap({ 'ca.crt': newPylonCa.certPem })
  await oldClosed
  t.pass('the pylon of the removed ca was disconnected')
  t.equal(await roundTrip(newConnection, 'still trusted'), 'still trusted')
  await t.rejects(open(t, port, asOld), 'the pylon of the removed ca cannot reconnect')
  const again = await open(t, port, asNew)
  t.ok(again.authorized, 'the other pylon can')
})
