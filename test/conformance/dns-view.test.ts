// SPEC §1 and §3 rule 1: why the router does not discover Stargates through DNS. The
// Rust router forwarded WatchStargates to a Stargate, which listed the SRV targets of the
// headless Service next to its own pod name. For a StatefulSet pod both are `stargate-0`. For a
// Deployment pod CoreDNS answers the dashed IP (`10-1-2-3`, the pod has no hostname), so one pod
// was advertised under two identities, and the dashed one names no pod: registrations to it
// were refused and Pylons retried forever. The router advertises from EndpointSlices: one
// identity per pod, the Pod name, and the dashed alias is refused by name.
import t from 'tap'
import { startKubeRouter } from '../fixtures/kube-router.ts'
import { idsOf } from '../fixtures/stargate-watch-client.ts'
import { SimulatedCluster, type ClusterPod, type WorkloadKind } from '../fixtures/cluster/cluster.ts'
import { ClusterDns } from '../fixtures/cluster/dns.ts'
import { dashedIp } from '../fixtures/cluster/names.ts'
import { grpcRegistrationCheck, llmHttpCheck } from './route-checks.ts'

interface Case {
  readonly kind: WorkloadKind
  readonly subnet: string
  /** The first label of the pod's SRV target, as CoreDNS answers it. */
  readonly srvLabel: (pod: ClusterPod) => string
  /** What DNS-based discovery advertised for the pod. */
  readonly dnsIdentities: (pod: ClusterPod) => string[]
}

const CASES: readonly Case[] = [
  { kind: 'Deployment', subnet: '127.0.213', srvLabel: (pod) => dashedIp(pod.ip), dnsIdentities: (pod) => [dashedIp(pod.ip), pod.name] },
  { kind: 'StatefulSet', subnet: '127.0.214', srvLabel: (pod) => pod.name, dnsIdentities: (pod) => [pod.name] },
]

for (const c of CASES) {
  const outcome = c.kind === 'Deployment' ? 'two identities (dashed IP and pod name)' : 'one identity (the pod name)'
  t.test(`${c.kind}: DNS discovery yields ${outcome} for one pod, the router advertises exactly one`, async (t) => {
    const cluster = await SimulatedCluster.start(t, { kind: c.kind, subnet: c.subnet })
    const kube = await startKubeRouter(t, { fake: cluster.fake, args: ['--target-service-name', cluster.service, '--reverse-tunnel-listen-addr', '127.0.0.1:0'] })
    await cluster.settle(cluster.install(1))
    const pod = cluster.readyPods()[0] as ClusterPod

    const srv = cluster.dns.srv('grpc')
    const target = `${c.srvLabel(pod)}.${cluster.dns.serviceDomain}`
    t.strictSame(srv.map((r) => [r.target, r.port]), [[target, pod.ports.grpc]], `SRV _grpc._tcp.${cluster.dns.serviceDomain} answers ${target}`)
    t.strictSame(cluster.dns.a(target), [pod.ip], 'and that name resolves to the pod')
    const derived = cluster.dns.derivedIdentities()
    t.strictSame(derived.map((d) => d.identity).sort(), c.dnsIdentities(pod).sort(), `DNS-based discovery advertises ${derived.length} identities for one pod`)
    t.ok(derived.every((d) => d.ip === pod.ip), 'all of them the same pod')

    const watch = kube.watch()
    const message = await watch.next((m) => m.stargates.length > 0, { message: 'the pod advertised' })
    t.strictSame(idsOf(message), [pod.name], 'the router advertises the pod once, by its Pod name')

    const stargate = { stargateId: pod.name, advertiseAddr: message.stargates[0]?.advertise_addr ?? '', httpAdvertiseAddr: message.stargates[0]?.http_advertise_addr ?? '', grpcPylonDialAddr: '' }
    for (const check of [grpcRegistrationCheck, llmHttpCheck]) {
      t.equal(await check.reaches({ router: kube, stargate, pod, serving: true }), null, `${check.name}: the advertised identity reaches the pod`)
      for (const identity of c.dnsIdentities(pod).filter((id) => id !== pod.name)) {
        t.equal(await check.refuses({ router: kube, identity, host: cluster.advertisedHost(identity), pod }), null, `${check.name}: the DNS alias ${identity} is refused, as a Pylon registering to it was`)
      }
    }
  })
}

t.test('with CoreDNS endpoint_pod_names a Deployment pod gets its pod name in SRV too', async (t) => {
  const cluster = await SimulatedCluster.start(t, { kind: 'Deployment', subnet: '127.0.213' })
  await cluster.settle(cluster.install(1))
  const pod = cluster.readyPods()[0] as ClusterPod
  const dns = new ClusterDns(() => cluster.slices.slices(), { namespace: cluster.namespace, service: cluster.service, endpointPodNames: true })
  t.strictSame(dns.srv('grpc').map((r) => r.target), [`${pod.name}.${dns.serviceDomain}`])
  t.strictSame(dns.derivedIdentities().map((d) => d.identity), [pod.name], 'then DNS and the router agree, but only with a non-default CoreDNS option')
})
