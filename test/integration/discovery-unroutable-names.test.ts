// SPEC §1 and §4: a pod name with a dot is legal for a Deployment's pods (they are
// DNS subdomains), but the hostname template carries the identity in one DNS label, so such a
// pod could be advertised and never routed. The router does not make it a target: it is not
// advertised by WatchStargates, a registration naming it is refused like any host outside the
// template, and the skip is counted. Pods with routable names in the same slice are unaffected.
import t from 'tap'
import * as grpc from '@grpc/grpc-js'
import { startKubeRouter, stargateSlice } from '../fixtures/kube-router.ts'
import { StubStargate } from '../fixtures/stub-stargate.ts'
import { waitFor } from '../fixtures/wait.ts'

const REGISTER = '/stargate.StargateControlPlane/RegisterInferenceServer'

function register (address: string, authority: string): Promise<grpc.StatusObject> {
  const client = new grpc.Client(address, grpc.credentials.createInsecure(), { 'grpc.default_authority': authority })
  const call = client.makeBidiStreamRequest(REGISTER, (b: Buffer) => b, (b: Buffer) => b, new grpc.Metadata())
  call.on('data', () => {})
  call.on('error', () => {})
  call.write(Buffer.from([0x0a, 0x01, 0x70]))
  call.end()
  return new Promise((resolve) => { call.on('status', (status: grpc.StatusObject) => { client.close(); resolve(status) }) })
}

t.test('a pod whose name has a dot is neither advertised nor routed, and the skip is counted', async (t) => {
  const kr = await startKubeRouter(t)
  const routable = await StubStargate.start({ podName: 'stargate-7d9f8b6c4-x2x7q', ip: '127.0.9.61', advertisedHost: 'stargate-7d9f8b6c4-x2x7q.stargate.external' })
  const dotted = await StubStargate.start({ podName: 'stargate.v2-7d9f8b6c4-abcde', ip: '127.0.9.62', advertisedHost: 'stargate.v2-7d9f8b6c4-abcde.stargate.external' })
  t.teardown(() => { routable.kill(); dotted.kill() })
  kr.fake.apply(stargateSlice('stargate-mixed', [
    { pod: 'stargate-7d9f8b6c4-x2x7q', ip: '127.0.9.61' },
    { pod: 'stargate.v2-7d9f8b6c4-abcde', ip: '127.0.9.62' },
  ], { ports: { grpc: routable.port, quic: 50052 } }))
  const watch = kr.watch()
  const message = await watch.next((m) => m.stargates.length > 0, { message: 'a non-empty set' })
  t.same(message.stargates.map((s) => s.stargate_id), ['stargate-7d9f8b6c4-x2x7q'], 'only the routable pod is advertised')
  t.same((await kr.snapshot()).targets.map((target) => target.identity), ['stargate-7d9f8b6c4-x2x7q'], 'and only it is a target')
  t.ok((await kr.metric('stargate_k8s_router_endpointslice_skipped_total', { reason: 'unroutable_name' }) ?? 0) >= 1, 'the skip is counted')
  const refused = await register(kr.address, 'stargate.v2-7d9f8b6c4-abcde.stargate.external:50071')
  t.same([refused.code, refused.details], [grpc.status.INVALID_ARGUMENT, 'registration authority stargate.v2-7d9f8b6c4-abcde.stargate.external does not match advertised stargate hostname template'])
  t.equal(dotted.registrations.length, 0, 'nothing reached the dotted pod')
  t.equal((await register(kr.address, 'stargate-7d9f8b6c4-x2x7q.stargate.external:50071')).code, grpc.status.OK, 'the routable pod registers')
  await waitFor(() => routable.registrations.length === 1)
})
