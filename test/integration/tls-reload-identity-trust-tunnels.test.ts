/**
 * SPEC §7, §8: without --upstream-tls-cert-path the router's own certificate file
 * is the trust that verifies Stargate pods (as the Rust router). Renewing that file is then an
 * upstream-trust change on every leg, decided once in lib/tls/trust-policy.ts: what was dialled
 * under the old file closes (HTTP/2 GOAWAY, raw QUIC after the 5 s grace, WebTransport with a
 * close capsule) and new connections are verified with the new one. Here the tunnel kinds on
 * real sockets: raw QUIC, WebTransport over HTTP/3 and over HTTP/2 (registration and HTTP
 * forwarding: tls-reload-identity-trust-pods.test.ts).
 */
import t from 'tap'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { QuicCluster } from '../fixtures/quic-cluster.ts'
import { H3Cluster } from '../fixtures/h3-cluster.ts'
import { WtCluster } from '../fixtures/webtransport-cluster.ts'
import { ProjectedVolume } from '../fixtures/projected-volume.ts'
import { createIdentityWithCa } from '../fixtures/certs.ts'
import { waitFor } from '../fixtures/wait.ts'


const reloaded = (metric: (name: string, labels: Record<string, string>) => Promise<number | undefined>) => async (): Promise<boolean> =>
  await metric('stargate_k8s_router_tls_reloads_total', { material_type: 'server_identity', result: 'success' }) === 1

// Each case waits out the 5 s trust-change grace; on a loaded 2-core machine a file of them
// outlives tap's 30 s default.
t.setTimeout(90_000)

t.test('raw QUIC: renewing the router certificate that is the upstream trust closes tunnels verified under it; new ones verify', async (t) => {
  let identity: ProjectedVolume | null = null
  const cluster = await QuicCluster.start(t, {
    pods: ['stargate-0'],
    subnet: '127.0.63',
    args: ['--tls-debounce-ms', '20'],
    tlsArgs: async (tls) => {
      identity = await ProjectedVolume.create(join(tls.dir, 'identity'), { 'tls.crt': tls.router.chainPem + tls.ca.certPem, 'tls.key': tls.router.keyPem })
      return ['--tls-cert-path', identity.path('tls.crt'), '--tls-key-path', identity.path('tls.key')]
    },
  })
  const volume = identity as ProjectedVolume | null
  if (volume === null) throw new Error('no identity volume')
  const old = await cluster.dial('stargate-0')
  await old.ready()
  await cluster.stubs.get('stargate-0')?.tunnel(1)

  await volume.swap(await createIdentityWithCa(cluster.tls.ca))
  await waitFor(reloaded((name, labels) => cluster.kube.metric(name, labels)), { message: 'the reload' })
  const closed = await old.closedWith(15_000)
  t.match(closed, { initiator: 'peer', app: true, code: 0, reason: 'upstream trust changed' }, 'the tunnel verified under the old file is closed after the grace')

  const fresh = await cluster.dial('stargate-0')
  await fresh.ready()
  t.ok(await cluster.stubs.get('stargate-0')?.tunnel(2), 'a new tunnel reaches the pod, verified with the renewed file')
})

t.test('WebTransport over HTTP/3: renewing the router certificate that is the upstream trust closes bridged sessions; new ones work', async (t) => {
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' }, routerArgs: ['--tls-debounce-ms', '200'], routerCertificateIsTrust: true })
  const opened = await cluster.open('stargate-0')
  if (opened.session === null) throw new Error(`no session: ${opened.status} ${opened.body}`)
  const atPod = await cluster.pods.get('stargate-0')!.nextSession()
  if (atPod === null) throw new Error('no session at the pod')
  const renewed = await createIdentityWithCa(cluster.ca)
  await writeFile(join(cluster.dir, 'router.key'), renewed['tls.key'])
  await writeFile(join(cluster.dir, 'router.crt'), renewed['tls.crt'])
  t.same(await opened.session.ended, { how: 'closed', code: 0, reason: 'upstream trust changed' }, 'the Pylon is told why')
  t.same(await atPod.ended, { how: 'closed', code: 0, reason: 'upstream trust changed' }, 'and so is the pod')
  await waitFor(async () => await cluster.metric('trust_replaced') === 1, { message: 'outcome trust_replaced' })
  const again = await cluster.open('stargate-0')
  t.equal(again.status, 200, 'a new session is bridged, the pod verified with the renewed file')
})

t.test('WebTransport over HTTP/2: renewing the router certificate that is the upstream trust closes bridged sessions; new ones work', async (t) => {
  const cluster = await WtCluster.start(t, { pods: ['stargate-0'], stub: { mode: 'manual' }, routerArgs: ['--tls-debounce-ms', '200'], routerCertificateIsTrust: true })
  const opened = await cluster.open('stargate-0')
  if (opened.wt === null) throw new Error(`no session: ${opened.status} ${opened.body}`)
  const atPod = await cluster.stubs.get('stargate-0')!.nextSession()
  const renewed = await createIdentityWithCa(cluster.ca)
  await writeFile(join(cluster.dir, 'router.key'), renewed['tls.key'])
  await writeFile(join(cluster.dir, 'router.crt'), renewed['tls.crt'])
  t.strictSame(await opened.wt.ended, { ok: true, closeCode: 0, reason: 'upstream trust changed' }, 'the Pylon is told why')
  t.strictSame(await atPod.wt.ended, { ok: true, closeCode: 0, reason: 'upstream trust changed' }, 'and so is the pod')
  await waitFor(async () => await cluster.metric('trust_replaced') === 1, { message: 'outcome trust_replaced' })
  const again = await cluster.open('stargate-0')
  t.equal(again.status, 200, 'a new session is bridged, the pod verified with the renewed file')
})
