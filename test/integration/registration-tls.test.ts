// The front door terminates TLS when --front-door-tls is set (ALPN h2), with
// optional client-certificate verification, and can dial pods over TLS (--upstream-tls).
// Independent clients: @grpc/grpc-js and Debian's python3-grpcio.
import t from 'tap'
import { execFile } from 'node:child_process'
import { mkdtemp, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import * as grpc from '@grpc/grpc-js'
import { StubPods } from '../fixtures/stub-pods.ts'
import { createCa, createLeaf, type CertAuthority } from '../fixtures/certs.ts'
import { waitFor } from '../fixtures/wait.ts'

const exec = promisify(execFile)
const PYTHON = '/usr/bin/python3'
const REGISTER_PY = fileURLToPath(new URL('../fixtures/python/register.py', import.meta.url))
const REGISTER = '/stargate.StargateControlPlane/RegisterInferenceServer'

async function pythonGrpcAvailable (): Promise<boolean> {
  try {
    await exec(PYTHON, ['-c', 'import grpc'])
    return true
  } catch {
    return false
  }
}

interface TlsFiles { dir: string, ca: CertAuthority, caPath: string, certPath: string, keyPath: string }

async function routerIdentity (): Promise<TlsFiles> {
  const dir = await mkdtemp(join(tmpdir(), 'sg-tls-'))
  const ca = await createCa({ name: 'stargate test ca' })
  const leaf = await createLeaf(ca, { dnsNames: ['*.stargate.external'] })
  const files = { dir, ca, caPath: join(dir, 'ca.crt'), certPath: join(dir, 'tls.crt'), keyPath: join(dir, 'tls.key') }
  await writeFile(files.caPath, ca.certPem)
  await writeFile(files.certPath, leaf.chainPem)
  await writeFile(files.keyPath, leaf.keyPem)
  return files
}

function registerOverTls (address: string, authority: string, credentials: grpc.ChannelCredentials): Promise<{ status: grpc.StatusObject, pod: string | null, acks: number }> {
  const host = authority.slice(0, authority.lastIndexOf(':'))
  const client = new grpc.Client(address, credentials, { 'grpc.default_authority': authority, 'grpc.ssl_target_name_override': host })
  const call = client.makeBidiStreamRequest(REGISTER, (b: Buffer) => b, (b: Buffer) => b, new grpc.Metadata())
  let pod: string | null = null
  let acks = 0
  call.on('metadata', (md: grpc.Metadata) => { pod = String(md.get('x-stargate-pod')[0] ?? '') || null })
  call.on('data', () => { acks++ })
  call.on('error', () => {})
  call.write(Buffer.from([0x0a, 0x02, 0x70, 0x31]))
  call.end()
  return new Promise((resolve) => {
    call.on('status', (status: grpc.StatusObject) => { client.close(); resolve({ status, pod, acks }) })
  })
}

t.test('grpc-js registers over TLS with every advertised target', async (t) => {
  const tls = await routerIdentity()
  const pods = await StubPods.start(t, { pods: ['stargate-0', 'stargate-1'], args: ['--front-door-tls', '--tls-cert-path', tls.certPath, '--tls-key-path', tls.keyPath] })
  const credentials = grpc.credentials.createSsl(Buffer.from(tls.ca.certPem))
  for (const name of ['stargate-0', 'stargate-1']) {
    const result = await registerOverTls(pods.kube.address, `${name}.stargate.external:${pods.kube.frontDoorPort}`, credentials)
    t.equal(result.status.code, grpc.status.OK, `${name}: OK`)
    t.equal(result.pod, name, `${name}: reached that pod`)
    t.equal(result.acks, 1)
  }
  const plain = await registerOverTls(pods.kube.address, `stargate-0.stargate.external:${pods.kube.frontDoorPort}`, grpc.credentials.createInsecure())
  t.equal(plain.status.code, grpc.status.UNAVAILABLE, 'h2c is not accepted on a TLS front door')
})

const NO_PYTHON_GRPC = (await pythonGrpcAvailable()) ? false : 'python3-grpcio is not installed on this machine (Debian package python3-grpcio; .ci/run installs it)'

t.test('python3-grpcio registers over TLS with metadata and trailers intact', { skip: NO_PYTHON_GRPC }, async (t) => {
  const tls = await routerIdentity()
  const pods = await StubPods.start(t, { pods: ['stargate-0', 'stargate-1'], args: ['--front-door-tls', '--tls-cert-path', tls.certPath, '--tls-key-path', tls.keyPath], stub: { trailers: { 'x-stargate-note': 'bye' } } })
  for (const name of ['stargate-0', 'stargate-1']) {
    const { stdout } = await exec(PYTHON, [REGISTER_PY, pods.kube.address, `${name}.stargate.external:${pods.kube.frontDoorPort}`, '3', tls.caPath])
    const result = JSON.parse(stdout) as { acks: string[], pod: string, code: string, trailers: Record<string, string> }
    t.equal(result.code, 'OK', `${name}: OK`)
    t.equal(result.pod, name, `${name}: reached that pod`)
    t.same(result.acks, [`${name}.stargate.external:50072`, `${name}.stargate.external:50072`, `${name}.stargate.external:50072`], 'one ack per update')
    t.equal(result.trailers['x-stargate-note'], 'bye', 'custom trailer arrives')
  }
  const seen = pods.stubs.get('stargate-0')?.registrations[0]
  t.same(seen?.metadata.authorization, ['Bearer py-token'])
  t.same(seen?.metadata['x-py-bin'], [Buffer.from([0x00, 0x01, 0xff])], 'binary metadata from python arrives byte for byte')
})

t.test('python3-grpcio registers over h2c', { skip: NO_PYTHON_GRPC }, async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'] })
  const { stdout } = await exec(PYTHON, [REGISTER_PY, pods.kube.address, `stargate-0.stargate.external:${pods.kube.frontDoorPort}`, '2'])
  const result = JSON.parse(stdout) as { acks: string[], pod: string, code: string }
  t.equal(result.code, 'OK')
  t.equal(result.pod, 'stargate-0')
  t.equal(result.acks.length, 2)
})

t.test('with --client-ca-path a Pylon without a client certificate is rejected at the TLS layer', async (t) => {
  const tls = await routerIdentity()
  const clientCa = await createCa({ name: 'pylon client ca' })
  const clientCaPath = join(tls.dir, 'client-ca.crt')
  await writeFile(clientCaPath, clientCa.certPem)
  const pylonCert = await createLeaf(clientCa, { dnsNames: ['pylon-1'], clientAuth: true })
  const pods = await StubPods.start(t, { pods: ['stargate-0'], args: ['--front-door-tls', '--tls-cert-path', tls.certPath, '--tls-key-path', tls.keyPath, '--client-ca-path', clientCaPath] })
  const authority = `stargate-0.stargate.external:${pods.kube.frontDoorPort}`
  const without = await registerOverTls(pods.kube.address, authority, grpc.credentials.createSsl(Buffer.from(tls.ca.certPem)))
  t.equal(without.status.code, grpc.status.UNAVAILABLE, 'no client certificate: the connection is refused')
  t.equal(pods.stubs.get('stargate-0')?.registrations.length, 0, 'nothing reached the pod')
  const withCert = await registerOverTls(pods.kube.address, authority, grpc.credentials.createSsl(Buffer.from(tls.ca.certPem), Buffer.from(pylonCert.keyPem), Buffer.from(pylonCert.certPem)))
  t.equal(withCert.status.code, grpc.status.OK, 'with a client certificate from the configured CA: OK')
  t.equal(withCert.pod, 'stargate-0')
  await waitFor(async () => ((await pods.kube.metric('stargate_k8s_router_tls_handshake_failures_total', { listener: 'front_door' })) ?? 0) >= 1, { message: 'the failed handshake counted' })
})

t.test('with --upstream-tls the router dials pods over TLS, verifying them against the upstream bundle', async (t) => {
  const tls = await routerIdentity()
  const podCa = await createCa({ name: 'stargate pods ca' })
  const podCaPath = join(tls.dir, 'pods-ca.crt')
  await writeFile(podCaPath, podCa.certPem)
  const podCert = await createLeaf(podCa, { dnsNames: ['*.stargate.external'] })
  const credentials = grpc.ServerCredentials.createSsl(null, [{ cert_chain: Buffer.from(podCert.chainPem), private_key: Buffer.from(podCert.keyPem) }], false)
  const pods = await StubPods.start(t, {
    pods: ['stargate-0'],
    args: ['--upstream-tls', '--upstream-tls-cert-path', podCaPath],
    stub: { credentials },
  })
  const result = await registerOverTls(pods.kube.address, `stargate-0.stargate.external:${pods.kube.frontDoorPort}`, grpc.credentials.createInsecure())
  t.equal(result.status.code, grpc.status.OK)
  t.equal(result.pod, 'stargate-0', 'h2c in front, TLS to the pod')
})

t.test('with --upstream-tls a pod whose certificate does not verify is UNAVAILABLE', async (t) => {
  const tls = await routerIdentity()
  const otherCa = await createCa({ name: 'not the pods ca' })
  const otherCaPath = join(tls.dir, 'other-ca.crt')
  await writeFile(otherCaPath, otherCa.certPem)
  const podCa = await createCa({ name: 'stargate pods ca' })
  const podCert = await createLeaf(podCa, { dnsNames: ['*.stargate.external'] })
  const credentials = grpc.ServerCredentials.createSsl(null, [{ cert_chain: Buffer.from(podCert.chainPem), private_key: Buffer.from(podCert.keyPem) }], false)
  const pods = await StubPods.start(t, { pods: ['stargate-0'], args: ['--upstream-tls', '--upstream-tls-cert-path', otherCaPath], stub: { credentials } })
  const result = await registerOverTls(pods.kube.address, `stargate-0.stargate.external:${pods.kube.frontDoorPort}`, grpc.credentials.createInsecure())
  t.equal(result.status.code, grpc.status.UNAVAILABLE)
  t.match(result.status.details, /^failed to connect to stargate target: /, 'the connect error says why')
})
