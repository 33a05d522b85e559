// SPEC §3 rule 2 and §6: a warming Stargate behind a publishNotReadyAddresses Service
// (EndpointSlice `ready=true, serving=false`) is advertised and takes registrations, so its
// Pylons arrive before gateway traffic, but LLM client HTTP never goes to it until it serves:
// untargeted requests go to serving pods only, and a Host naming it is refused with 503
// target_not_serving. The failure mode: upstream keeps new Stargates unready for 60 s so that
// they start with backends; a router that sent them LLM traffic (or, as before, dropped them
// as targets) defeats that warm-up. Real clients: @grpc/grpc-js (Pylon) and node:http.
import t from 'tap'
import { StubPods } from '../fixtures/stub-pods.ts'
import { waitFor } from '../fixtures/wait.ts'
import { request } from '../fixtures/http-client.ts'

const WARMING = { ready: true, serving: false, terminating: false }

function errorOf (reply: { status: number, headers: Record<string, unknown>, body: string }): { status: number, code: unknown, header: unknown, message: unknown } {
  const body = JSON.parse(reply.body) as { error: { code: string, message: string } }
  return { status: reply.status, code: body.error.code, header: reply.headers['x-stargate-error-code'], message: body.error.message }
}

t.test('a warming pod is advertised and registrable, never sent LLM traffic until it serves', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0', 'stargate-1'], http: true, subnet: '127.0.131' })
  pods.setConditions('stargate-1', WARMING)
  await waitFor(async () => (await pods.kube.snapshot()).targets.some((x) => x.identity === 'stargate-1' && !x.serving), { message: 'stargate-1 warming in the snapshot' })
  const warmingLlm = pods.llms.get('stargate-1')
  if (warmingLlm === undefined) throw new Error('no llm stub')

  const pylon = pods.pylon({ heartbeatMs: 50 })
  pylon.watch()
  const set = await waitFor(() => pylon.latest?.stargates.length === 2 ? pylon.latest : null, { message: 'both pods advertised' })
  t.same(set.stargates.map((s) => s.stargateId), ['stargate-0', 'stargate-1'], 'the warming pod is advertised')
  const warming = set.stargates.find((s) => s.stargateId === 'stargate-1')
  if (warming === undefined) throw new Error('not advertised')
  const registration = pylon.register(warming)
  await waitFor(() => registration.acks.length > 0 && registration.pod !== null, { message: 'an ack from the warming pod' })
  t.equal(registration.pod, 'stargate-1', 'the registration reached the warming pod')

  const named = await request(pods.kube.frontDoorPort, { host: 'stargate-1.stargate.external' })
  t.same(errorOf(named), { status: 503, code: 'target_not_serving', header: 'target_not_serving', message: 'the named stargate is not serving yet' })
  for (let i = 0; i < 20; i++) {
    const reply = await request(pods.kube.frontDoorPort, { host: 'llm.example.com' })
    t.equal(reply.headers['x-stargate-pod'], 'stargate-0', `untargeted request ${i} went to the serving pod`)
  }
  t.equal(warmingLlm.requests.length, 0, 'the warming pod saw no LLM request')

  // Both warming: nothing serves, although both are targets for Pylons.
  pods.setConditions('stargate-0', WARMING)
  await waitFor(async () => (await pods.kube.snapshot()).targets.every((x) => !x.serving), { message: 'both warming' })
  const none = await request(pods.kube.frontDoorPort, { host: 'llm.example.com' })
  t.same(errorOf(none), { status: 503, code: 'no_ready_targets', header: 'no_ready_targets', message: 'no ready stargate has an http port' })
  t.equal(await pods.kube.metric('stargate_k8s_router_discovery_targets_not_serving'), 2)
  t.equal((await pods.kube.readyz()).status, 200, 'the router is ready: it has targets for Pylons')

  // The warm-up ends: the pod serves, by Host and in the balance.
  pods.setConditions('stargate-1', {})
  await waitFor(async () => (await pods.kube.snapshot()).targets.some((x) => x.identity === 'stargate-1' && x.serving), { message: 'stargate-1 serving' })
  const served = await request(pods.kube.frontDoorPort, { host: 'stargate-1.stargate.external' })
  t.equal(served.status, 200)
  t.equal(served.headers['x-stargate-pod'], 'stargate-1')
  const balanced = await request(pods.kube.frontDoorPort, { host: 'llm.example.com' })
  t.equal(balanced.headers['x-stargate-pod'], 'stargate-1', 'the only serving pod takes untargeted requests')
  t.equal(registration.status, null, 'the registration made during the warm-up is still open')
  t.equal(await pods.kube.metric('stargate_k8s_router_registration_streams_closed_total', { outcome: 'drained' }), 0)
})

t.test('a warming pod without an http port named by Host is 503 target_unavailable (it never serves http)', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], subnet: '127.0.132' })
  pods.setConditions('stargate-0', WARMING)
  await waitFor(async () => (await pods.kube.snapshot()).targets.some((x) => !x.serving), { message: 'warming' })
  const reply = await request(pods.kube.frontDoorPort, { host: 'stargate-0.stargate.external' })
  t.same(errorOf(reply), { status: 503, code: 'target_unavailable', header: 'target_unavailable', message: 'the named stargate has no http port' })
})

t.test('a pod that fails readiness behind a publishNotReadyAddresses Service stays registrable and takes no LLM traffic', async (t) => {
  // Such a Service keeps ready=true for a pod whose probe fails; serving turns false.
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true, subnet: '127.0.133' })
  pods.setConditions('stargate-0', WARMING)
  await waitFor(async () => (await pods.kube.snapshot()).targets.some((x) => !x.serving), { message: 'not serving' })
  const pylon = pods.pylon({ heartbeatMs: 50 })
  const registration = pylon.register({ stargateId: 'stargate-0', advertiseAddr: 'stargate-0.stargate.external:50071', httpAdvertiseAddr: '', grpcPylonDialAddr: '' })
  await waitFor(() => registration.acks.length > 0 && registration.pod !== null, { message: 'an ack from the pod' })
  t.equal(registration.pod, 'stargate-0')
  t.equal(registration.status, null)
  const reply = await request(pods.kube.frontDoorPort, { host: 'stargate-0.stargate.external' })
  t.equal(errorOf(reply).code, 'target_not_serving')
})
