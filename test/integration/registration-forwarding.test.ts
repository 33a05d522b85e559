// SPEC §5: RegisterInferenceServer is forwarded by :authority to the pod it names,
// transparently (metadata, messages, trailers), over pooled HTTP/2 sessions. Independent
// client: @grpc/grpc-js (test/fixtures/pylon.ts); stub Stargates on distinct loopback IPs
// behind the fake API server.
import t from 'tap'
import * as grpc from '@grpc/grpc-js'
import { StubPods } from '../fixtures/stub-pods.ts'
import { waitFor } from '../fixtures/wait.ts'
import type { StargateInfo } from '../fixtures/stargate-proto.ts'

const PODS = ['stargate-0', 'stargate-1', 'stargate-2']

t.test('registration through the router reaches the pod each advertised target names', async (t) => {
  const pods = await StubPods.start(t, { pods: PODS })
  const pylon = pods.pylon({ heartbeatMs: 50 })
  pylon.watch()
  const set = await waitFor(() => (pylon.latest?.stargates.length === 3 ? pylon.latest : null), { message: 'three advertised stargates' })
  pylon.registerAll()
  for (const stargate of set.stargates) {
    const registration = await waitFor(() => {
      const r = pylon.registrations.get(stargate.stargateId)
      return r !== undefined && r.acks.length >= 3 && r.pod !== null ? r : null
    }, { message: `acks from ${stargate.stargateId}` })
    t.equal(registration.pod, stargate.stargateId, `${stargate.stargateId}: answered by that pod`)
    t.equal(registration.acks[0]?.reverseTunnelTarget, `${stargate.stargateId}.stargate.external:50072`, 'ack names the pod\'s tunnel target')
    const stub = pods.stubs.get(stargate.stargateId)
    t.ok(stub !== undefined && stub.registrations.length === 1, 'exactly one stream reached the pod')
    t.equal(stub?.registrations[0]?.authority, stargate.advertiseAddr, ':authority arrives unchanged')
  }
  t.equal(pods.kube.router.upstreamPool.size, 3, 'one pooled upstream session per pod')
})

t.test('metadata and trailers pass unchanged in both directions', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], stub: { trailers: { 'x-stargate-note': 'bye', 'x-trace-bin': Buffer.from([0, 1, 2, 255]) } } })
  const pylon = pods.pylon({ token: 'secret-token', heartbeatMs: 0 })
  pylon.watch()
  const stargate = await waitFor(() => pylon.latest?.stargates[0], { message: 'advertised stargate' }) as StargateInfo
  const metadata = new grpc.Metadata()
  const client = new grpc.Client(pods.kube.address, grpc.credentials.createInsecure(), { 'grpc.default_authority': stargate.advertiseAddr })
  t.teardown(() => { client.close() })
  metadata.set('authorization', 'Bearer secret-token')
  metadata.set('x-stargate-registration-heartbeat-ms', '1500')
  metadata.set('x-custom', 'one')
  metadata.add('x-custom', 'two')
  metadata.set('x-blob-bin', Buffer.from([0xde, 0xad, 0xbe, 0xef]))
  const call = client.makeBidiStreamRequest('/stargate.StargateControlPlane/RegisterInferenceServer',
    (b: Buffer) => b, (b: Buffer) => b, metadata)
  const status = new Promise<grpc.StatusObject>((resolve) => { call.on('status', resolve) })
  const received: Buffer[] = []
  call.on('data', (b: Buffer) => { received.push(b) })
  call.on('error', () => {})
  // InferenceServerRegistration { inference_server_id: "pylon-x" } encoded by hand: field 1, length 7.
  call.write(Buffer.from([0x0a, 0x07, ...Buffer.from('pylon-x')]))
  await waitFor(() => received.length === 1, { message: 'the ack' })
  call.end()
  const final = await status
  t.equal(final.code, grpc.status.OK)
  t.same(final.metadata.get('x-stargate-note'), ['bye'], 'custom trailer arrives')
  t.same(final.metadata.get('x-trace-bin'), [Buffer.from([0, 1, 2, 255])], 'binary trailer arrives byte for byte')
  const seen = pods.stubs.get('stargate-0')?.registrations[0]
  t.same(seen?.metadata.authorization, ['Bearer secret-token'])
  t.same(seen?.metadata['x-stargate-registration-heartbeat-ms'], ['1500'])
  t.same(seen?.metadata['x-custom']?.map(String).join(', ').split(', '), ['one', 'two'], 'repeated metadata keeps both values')
  t.same(seen?.metadata['x-blob-bin'], [Buffer.from([0xde, 0xad, 0xbe, 0xef])], 'binary metadata arrives byte for byte')
  t.equal(seen?.messages[0]?.inferenceServerId, 'pylon-x', 'the message arrives as sent')
})

t.test('a pod replaced at a new IP gets new streams at the new IP', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], args: ['--drain-grace-ms', '60000'] })
  const pylon = pods.pylon({ heartbeatMs: 50 })
  pylon.watch()
  const stargate = await waitFor(() => pylon.latest?.stargates[0], { message: 'advertised stargate' }) as StargateInfo
  const first = pylon.register(stargate)
  await waitFor(() => first.acks.length > 0, { message: 'first ack' })
  const old = pods.stubs.get('stargate-0')
  const fresh = await pods.replacePod('stargate-0')
  await waitFor(async () => (await pods.kube.snapshot()).targets[0]?.address === fresh.options.ip, { message: 'snapshot at the new IP' })
  const status = await waitFor(() => first.status, { message: 'the old stream to end' })
  t.equal(status.code, grpc.status.UNAVAILABLE, 'the stream to the dead pod ends UNAVAILABLE, so the Pylon re-registers')
  const second = pylon.register(stargate)
  await waitFor(() => second.acks.length > 0 && second.pod !== null, { message: 'ack from the new pod' })
  t.equal(fresh.registrations.length, 1, 'the new stream reached the pod at the new IP')
  t.equal(old?.registrations.length, 1, 'the old pod saw only the first stream')
})

t.test('a stream whose pod starts terminating ends with UNAVAILABLE after the drain grace', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0', 'stargate-1'], args: ['--drain-grace-ms', '300'] })
  const pylon = pods.pylon({ heartbeatMs: 50 })
  pylon.watch()
  await waitFor(() => pylon.latest?.stargates.length === 2, { message: 'two stargates' })
  pylon.registerAll()
  const leaving = await waitFor(() => { const r = pylon.registrations.get('stargate-0'); return r !== undefined && r.acks.length > 0 ? r : null })
  const staying = await waitFor(() => { const r = pylon.registrations.get('stargate-1'); return r !== undefined && r.acks.length > 0 ? r : null })
  const removedAt = Date.now()
  pods.setConditions('stargate-0', { ready: false, serving: true, terminating: true })
  const status = await waitFor(() => leaving.status, { message: 'the drained stream to end', timeoutMs: 10_000 })
  t.equal(status.code, grpc.status.UNAVAILABLE)
  t.equal(status.details, 'target stargate stargate-0 left the ready set')
  t.ok(Date.now() - removedAt >= 250, 'not before the grace period')
  t.equal(staying.status, null, 'the stream to the pod that stayed is untouched')
  const acks = staying.acks.length
  await waitFor(() => staying.acks.length > acks + 2, { message: 'the other stream keeps flowing' })
  t.equal(await pods.kube.metric('stargate_k8s_router_registration_streams_closed_total', { outcome: 'drained' }), 1)
})

t.test('a pod that comes back to the Service within the grace keeps its streams', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], args: ['--drain-grace-ms', '1500'] })
  const pylon = pods.pylon({ heartbeatMs: 50 })
  pylon.watch()
  const stargate = await waitFor(() => pylon.latest?.stargates[0], { message: 'advertised stargate' }) as StargateInfo
  const registration = pylon.register(stargate)
  await waitFor(() => registration.acks.length > 0)
  pods.removePod('stargate-0')
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 0, { message: 'pod gone from the Service' })
  pods.setReady('stargate-0', true)
  await waitFor(async () => (await pods.kube.snapshot()).targets.length === 1, { message: 'pod ready again' })
  const acks = registration.acks.length
  await new Promise((resolve) => setTimeout(resolve, 2000))
  t.equal(registration.status, null, 'still open after the grace period')
  t.ok(registration.acks.length > acks, 'and still acked')
})

t.test('shutdown ends open registrations at once with UNAVAILABLE, cancels them at the pod, and is done long before the drain timeout', async (t) => {
  // SPEC §11: Pylons move first. The registration is not held until the deadline (30 s here);
  // with nothing else open the router is gone as soon as the stream has ended.
  const pods = await StubPods.start(t, { pods: ['stargate-0'], args: ['--shutdown-drain-timeout-ms', '30000'] })
  const pylon = pods.pylon({ heartbeatMs: 50 })
  pylon.watch()
  const stargate = await waitFor(() => pylon.latest?.stargates[0], { message: 'advertised stargate' }) as StargateInfo
  const registration = pylon.register(stargate)
  await waitFor(() => registration.acks.length > 0)
  const started = Date.now()
  const stopped = pods.kube.router.shutdown()
  t.equal((await pods.kube.readyz()).status, 503, '/readyz fails at once')
  const status = await waitFor(() => registration.status, { message: 'the stream to end', timeoutMs: 15_000 })
  const endedMs = Date.now() - started
  t.equal(status.code, grpc.status.UNAVAILABLE)
  t.equal(status.details, 'router is shutting down')
  t.ok(endedMs < 5000, `ended at once, not at the 30 s deadline (${endedMs} ms)`)
  await waitFor(() => pods.stubs.get('stargate-0')?.registrations[0]?.cancelled === true ? true : undefined, { message: 'the upstream stream cancelled at the pod' })
  await stopped
  t.ok(Date.now() - started < 10_000, `shutdown done in ${Date.now() - started} ms of a 30 s drain timeout`)
})
