// Discovery and transport are proven separately, so a failure names its layer. The
// first test proves discovery alone (its own cluster and router, plaintext): the advertised set
// is exactly the ready pods. The second runs after it and independently (its own cluster,
// subnet, certificates and router): it first re-checks discovery through the plaintext health
// port, and only then exercises TLS on the front door (--front-door-tls with --tls-cert-path/--tls-key-path):
// WatchStargates, RegisterInferenceServer and LLM HTTPS to every advertised pod. Every failure
// message starts with "discovery layer:" or "transport layer:".
import t, { type Test } from 'tap'
import https from 'node:https'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import * as grpc from '@grpc/grpc-js'
import { startKubeRouter, type KubeRouter } from '../fixtures/kube-router.ts'
import { createCa, createLeaf, type CertAuthority } from '../fixtures/certs.ts'
import { Pylon } from '../fixtures/pylon.ts'
import { idsOf } from '../fixtures/stargate-watch-client.ts'
import { StargateControlPlane, type InferenceServerAck, type InferenceServerRegistration, type StargateInfo } from '../fixtures/stargate-proto.ts'
import { SimulatedCluster } from '../fixtures/cluster/cluster.ts'
import { waitFor } from '../fixtures/wait.ts'

const ROUTER_HOST = 'router.stargate.external'

async function discovered (kube: KubeRouter, cluster: SimulatedCluster): Promise<string | null> {
  const want = cluster.readyPods().map((p) => p.name).join(', ')
  try {
    await waitFor(async () => (await kube.snapshot()).targets.map((x) => x.identity).join(', ') === want, { timeoutMs: 15_000, message: `the snapshot to list [${want}]` })
    return null
  } catch (err) {
    return `discovery layer: ${(err as Error).message}; cluster: ${cluster.describe()}`
  }
}

t.test('discovery layer: the router advertises exactly the ready pods, by Pod name', async (t) => {
  const cluster = await SimulatedCluster.start(t, { kind: 'Deployment', subnet: '127.0.217', maxEndpointsPerSlice: 2 })
  await cluster.settle(cluster.install(3))
  // The router starts after the pods: its initial list, not the watch, has to find them.
  const kube = await startKubeRouter(t, { fake: cluster.fake, args: ['--target-service-name', cluster.service, '--reverse-tunnel-listen-addr', '127.0.0.1:0'] })
  const want = cluster.readyPods().map((p) => p.name)
  const watch = kube.watch()
  let ids: string[]
  try {
    ids = idsOf(await watch.next((m) => m.stargates.length > 0, { timeoutMs: 15_000, message: 'a non-empty advertised set' }))
  } catch (err) {
    t.fail(`discovery layer: no advertised set: ${(err as Error).message}; cluster: ${cluster.describe()}`)
    return
  }
  t.strictSame(ids, want, `discovery layer: the advertised set is the ready pods (${cluster.describe()})`)
  const snapshot = await kube.snapshot()
  for (const pod of cluster.readyPods()) {
    const target = snapshot.targets.find((x) => x.identity === pod.name)
    t.equal(target?.address, pod.ip, `discovery layer: ${pod.name} is at its pod IP`)
  }
})

interface TlsFiles { readonly ca: CertAuthority, readonly certPath: string, readonly keyPath: string }

async function routerCertificate (t: Test): Promise<TlsFiles> {
  const dir = await mkdtemp(join(tmpdir(), 'sg-conformance-tls-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const ca = await createCa({ name: 'conformance ca' })
  const leaf = await createLeaf(ca, { dnsNames: ['*.stargate.external'] })
  const files = { ca, certPath: join(dir, 'tls.crt'), keyPath: join(dir, 'tls.key') }
  await writeFile(files.certPath, leaf.chainPem)
  await writeFile(files.keyPath, leaf.keyPem)
  return files
}

function registerOverTls (kube: KubeRouter, stargate: StargateInfo, ca: CertAuthority): Promise<{ status: grpc.StatusObject, pod: string | null, acks: number }> {
  const host = stargate.advertiseAddr.slice(0, stargate.advertiseAddr.lastIndexOf(':'))
  const client = new StargateControlPlane(kube.address, grpc.credentials.createSsl(Buffer.from(ca.certPem)), {
    'grpc.default_authority': stargate.advertiseAddr,
    'grpc.ssl_target_name_override': host,
  }) as unknown as grpc.Client & { registerInferenceServer: (md: grpc.Metadata) => grpc.ClientDuplexStream<InferenceServerRegistration, InferenceServerAck> }
  const call = client.registerInferenceServer(new grpc.Metadata())
  let pod: string | null = null
  let acks = 0
  call.on('metadata', (md: grpc.Metadata) => { pod = String(md.get('x-stargate-pod')[0] ?? '') || null })
  call.on('data', () => { acks++; call.end() })
  call.on('error', () => {})
  call.write({ inferenceServerId: 'tls-check', reverseTunnel: true })
  return new Promise((resolve) => {
    call.on('status', (status: grpc.StatusObject) => { client.close(); resolve({ status, pod, acks }) })
  })
}

function httpsRequest (kube: KubeRouter, stargate: StargateInfo, ca: CertAuthority): Promise<{ status: number, pod: string | undefined }> {
  const host = stargate.advertiseAddr.slice(0, stargate.advertiseAddr.lastIndexOf(':'))
  return new Promise((resolve, reject) => {
    const req = https.request({
      host: '127.0.0.1',
      port: kube.frontDoorPort,
      servername: host,
      ca: ca.certPem,
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { host: stargate.advertiseAddr, 'content-type': 'application/json' },
      agent: false,
    }, (res) => {
      res.resume()
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, pod: res.headers['x-stargate-pod'] as string | undefined }) })
    })
    req.on('error', reject)
    req.end('{"model":"m","messages":[]}')
  })
}

t.test('transport layer: over TLS a Pylon watches, registers with and sends HTTPS to every advertised pod', async (t) => {
  const tls = await routerCertificate(t)
  const cluster = await SimulatedCluster.start(t, { kind: 'StatefulSet', subnet: '127.0.218' })
  const kube = await startKubeRouter(t, {
    fake: cluster.fake,
    args: ['--target-service-name', cluster.service, '--reverse-tunnel-listen-addr', '127.0.0.1:0', '--front-door-tls', '--tls-cert-path', tls.certPath, '--tls-key-path', tls.keyPath],
  })
  await cluster.settle(cluster.install(2))

  // Discovery first, through the plaintext health port: if this fails, TLS was never tried.
  const discovery = await discovered(kube, cluster)
  if (discovery !== null) {
    t.fail(discovery)
    return
  }

  const pylon = new Pylon({
    routerAddress: kube.address,
    credentials: grpc.credentials.createSsl(Buffer.from(tls.ca.certPem)),
    channelOptions: { 'grpc.ssl_target_name_override': ROUTER_HOST },
  })
  t.teardown(() => { pylon.close() })
  pylon.watch()
  const want = cluster.readyPods().map((p) => p.name)
  let set: StargateInfo[]
  try {
    set = (await waitFor(() => (pylon.latest !== null && pylon.latest.stargates.length === want.length ? pylon.latest : null), { timeoutMs: 15_000, message: 'the advertised set over TLS' })).stargates
  } catch (err) {
    t.fail(`transport layer: WatchStargates over TLS failed although discovery listed [${want.join(', ')}]: ${(err as Error).message}`)
    return
  }
  t.strictSame(set.map((s) => s.stargateId), want, 'transport layer: WatchStargates over TLS carries the discovered set')

  for (const stargate of set) {
    const registration = await registerOverTls(kube, stargate, tls.ca)
    t.equal(registration.status.code, grpc.status.OK, `transport layer: registration over TLS to ${stargate.advertiseAddr} ended ${registration.status.code} "${registration.status.details}"`)
    t.equal(registration.pod, stargate.stargateId, `transport layer: registration over TLS to ${stargate.stargateId} reached that pod`)
    t.equal(registration.acks, 1, `transport layer: registration over TLS to ${stargate.stargateId} was acked`)
    let reply: { status: number, pod: string | undefined }
    try {
      reply = await httpsRequest(kube, stargate, tls.ca)
    } catch (err) {
      t.fail(`transport layer: HTTPS to ${stargate.advertiseAddr} failed: ${(err as Error).message}`)
      continue
    }
    t.equal(reply.status, 200, `transport layer: HTTPS to ${stargate.advertiseAddr} answered 200`)
    t.equal(reply.pod, stargate.stargateId, `transport layer: HTTPS to ${stargate.stargateId} reached that pod`)
  }
})
