/**
 * SPEC §7, §8: --client-ca-path applies to WebTransport over HTTP/3 too: a Pylon
 * without a client certificate from that CA is refused in the QUIC handshake and never reaches
 * a pod; one with such a certificate is bridged. A client-trust change closes the sessions
 * whose certificate no longer verifies (trust_replaced).
 */
import t from 'tap'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { H3Cluster } from '../fixtures/h3-cluster.ts'
import { createCa, createLeaf } from '../fixtures/certs.ts'
import { readAll } from '../fixtures/h3-wt-session.ts'
import { waitFor } from '../fixtures/wait.ts'

// A trust-change close waits out the router's 5 s grace (TRUST_CHANGE_GRACE_MS).
t.setTimeout(90_000)

t.test('with --client-ca-path only Pylons with a client certificate from that CA get an HTTP/3 session', async (t) => {
  const pylonCa = await createCa({ name: 'pylon ca' })
  const dir = await mkdtemp(join(tmpdir(), 'stargate-h3-mtls-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  await writeFile(join(dir, 'pylons.crt'), pylonCa.certPem)
  const cluster = await H3Cluster.start(t, { pods: ['stargate-0'], routerArgs: ['--client-ca-path', join(dir, 'pylons.crt'), '--tls-debounce-ms', '20'] })
  const pylonCert = await createLeaf(pylonCa, { dnsNames: ['pylon-1.pylons.example'], clientAuth: true })
  const allowed = await cluster.open('stargate-0', { certPem: pylonCert.chainPem, keyPem: pylonCert.keyPem })
  t.equal(allowed.status, 200, 'a Pylon with a certificate from the CA is bridged')
  const hello = await allowed.session?.incomingUni.next()
  t.equal(hello == null ? null : (await readAll(hello)).toString(), 'stargate-0')

  const refused = await cluster.open('stargate-0')
  t.equal(refused.status, 0, 'a Pylon without a certificate gets no answer')
  t.ok(refused.close !== null, `its connection is closed by the router (${refused.close?.kind ?? 'open'})`)
  const stranger = await createLeaf(await createCa({ name: 'other ca' }), { dnsNames: ['pylon-2.pylons.example'], clientAuth: true })
  const wrong = await cluster.open('stargate-0', { certPem: stranger.chainPem, keyPem: stranger.keyPem })
  t.equal(wrong.status, 0, 'nor does one with a certificate from another CA')
  t.equal(cluster.pods.get('stargate-0')?.requests.length, 1, 'only the allowed session reached the pod')
  await waitFor(async () => (await cluster.kube.metric('stargate_k8s_router_quic_handshake_failures_total', { reason: 'client_certificate' }) ?? 0) >= 2, { message: 'both refused handshakes counted as client_certificate' })
  t.match(cluster.kube.logs.text(), /webtransport http\/3 handshake refused/, 'and logged (the logger rate-limits it per reason)')

  // The Pylons' CA is replaced: the bridged session's certificate no longer verifies.
  const nextCa = await createCa({ name: 'next pylon ca' })
  await writeFile(join(dir, 'pylons.crt'), nextCa.certPem)
  t.same(await allowed.session?.ended, { how: 'closed', code: 0, reason: 'client trust changed' })
  await waitFor(async () => await cluster.metric('trust_replaced') === 1, { message: 'outcome trust_replaced' })
})
