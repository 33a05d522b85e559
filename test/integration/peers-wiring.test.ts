// SPEC §10: peer discovery is opt-in. Off, the router opens no extra watch and has
// no /debug/peers; on with --peers-file, replicas without Kubernetes find each other and
// compare snapshots the same way.
import t from 'tap'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Registry } from 'prom-client'
import { parseConfig } from '../../lib/config/config.ts'
import { createMetrics } from '../../lib/metrics/metrics.ts'
import { startRouter, type RunningRouter } from '../../server/router.ts'
import { pod, stargateSlice, startKubeRouter } from '../fixtures/kube-router.ts'
import { createLogSink } from '../fixtures/log-sink.ts'
import { waitFor } from '../fixtures/wait.ts'
import { freePort, type DebugPeers } from '../fixtures/peer-cluster.ts'
import { GRPC_PYLON_DIAL_ADDR } from '../fixtures/router-process.ts'

t.test('with peer discovery off the router opens one watch only, serves no /debug/peers, and exports the peer metrics at 0', async (t) => {
  const kr = await startKubeRouter(t, { args: ['--reverse-tunnel-listen-addr', '127.0.0.1:0', '--shutdown-drain-timeout-ms', '200'] })
  kr.fake.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.67.50')]))
  await waitFor(async () => (await kr.snapshot()).targets.length === 1, { message: 'the snapshot' })
  t.equal(kr.fake.openWatches, 1, 'only the Stargate watch')
  t.equal(kr.fake.listRequests, 1, 'only the Stargate list')
  const res = await fetch(`http://127.0.0.1:${kr.router.health.port}/debug/peers`)
  t.equal(res.status, 404)
  await res.body?.cancel()
  t.equal(await kr.metric('stargate_k8s_router_peers'), 0)
  t.equal(await kr.metric('stargate_k8s_router_peer_snapshot_divergent'), 0)
})

t.test('without Kubernetes, replicas listed in one peers file find each other and agree', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'stargate-peers-wiring-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const ips = ['127.0.67.11', '127.0.67.12']
  const port = await freePort(ips[0]!)
  const targets = join(dir, 'targets.yaml')
  await writeFile(targets, 'targets:\n  - identity: stargate-0\n    address: 127.0.67.50\n    grpcPort: 50051\n    quicPort: 50052\n')
  const peersFile = join(dir, 'peers.yaml')
  // One file for every replica, each listing itself too: POD_IP leaves it out.
  await writeFile(peersFile, `peers:\n${ips.map((ip, i) => `  - name: router-${i}\n    address: ${ip}\n`).join('')}`)
  const routers: RunningRouter[] = []
  t.teardown(async () => { for (const r of routers) await r.shutdown() })
  for (const ip of ips) {
    const parsed = parseConfig([
      '--discovery', 'file', '--targets-file', targets, '--target-namespace', 'stargate',
      '--grpc-pylon-dial-addr', GRPC_PYLON_DIAL_ADDR,
      '--listen-addr', '127.0.0.1:0', '--reverse-tunnel-listen-addr', '127.0.0.1:0',
      '--health-listen-addr', `${ip}:${port}`, '--shutdown-drain-timeout-ms', '500',
      '--enable-peer-discovery', '--peers-file', peersFile, '--peer-health-port', String(port),
      '--peer-check-interval-ms', '150', '--peer-divergence-grace-ms', '500',
    ], { POD_IP: ip })
    if (parsed.kind !== 'config') throw new Error('unexpected --help')
    routers.push(await startRouter(parsed.config, { logger: createLogSink().logger, metrics: createMetrics(new Registry(), { defaultMetrics: false }) }))
  }
  for (const [i, ip] of ips.entries()) {
    const report = await waitFor(async () => {
      const r = await (await fetch(`http://${ip}:${port}/debug/peers`)).json() as DebugPeers
      return r.peers.length === 1 && r.peers[0]!.checkedAt !== null && r.peers[0]!.digest === r.ours.digest ? r : null
    }, { message: `router ${i} to agree with the other` })
    t.strictSame(report.peers.map((p) => [p.id, p.address, p.port]), [[`stargate/router-${1 - i}`, ips[1 - i], port]])
    t.match(report.source, { kind: 'file', path: peersFile, lastError: null })
    t.strictSame(report.self, { address: ip, id: null })
  }
})
