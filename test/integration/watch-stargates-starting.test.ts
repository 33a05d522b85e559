// SPEC §5, §11: the router advertises no Stargate before its tunnel port is up. While it opens
// its listeners the front door already accepts connections, and a WatchStargates call that
// arrives then is refused UNAVAILABLE `router is starting` (the Pylon watches again) instead
// of being told of Stargates it could not open a tunnel to yet; once the router opened the
// hub the same call gets the set, and once the hub closed, `router is shutting down`. Here the
// real front door routes a grpc-js client's watches to the hub, as server/router.ts wires it.
import t from 'tap'
import grpc from '@grpc/grpc-js'
import { Registry } from 'prom-client'
import { FrontDoor, type GrpcMethod } from '../../lib/front-door/front-door.ts'
import { WatchStargatesHub } from '../../lib/control-plane/watch-stargates.ts'
import { SnapshotStore } from '../../lib/discovery/snapshot-store.ts'
import { podTarget } from '../../lib/discovery/types.ts'
import { compileHostnameTemplate } from '../../lib/routing/hostname-template.ts'
import { createMetrics } from '../../lib/metrics/metrics.ts'
import { StargateWatchClient } from '../fixtures/stargate-watch-client.ts'
import { createLogSink } from '../fixtures/log-sink.ts'
import { waitFor } from '../fixtures/wait.ts'

t.test('a watch before the hub opens is UNAVAILABLE router is starting; after, it gets the set; after close, router is shutting down', async (t) => {
  const store = new SnapshotStore()
  store.stage('stargate-0', podTarget({ identity: 'stargate-0', namespace: 'stargate', address: '127.0.1.1', grpcPort: 50051, quicPort: 50052, httpPort: null, nodeName: null, zone: null, serving: true }))
  store.markInitialized()
  store.flush()
  const compiled = compileHostnameTemplate('{pod_name}.stargate.external', 'stargate')
  if (!compiled.ok) throw new Error(compiled.message)
  const logger = createLogSink().logger
  const hub = new WatchStargatesHub({ snapshot: store, template: compiled.template, advertisedGrpcPort: 50071, grpcPylonDialAddr: 'https://gw.example.com', remoteStargateUrls: [], heartbeatMs: 60_000, metrics: createMetrics(new Registry(), { defaultMetrics: false }), logger })
  const registrations: GrpcMethod = {
    handle: () => { t.fail('no registration is sent here') },
    end: () => false,
  }
  const door = new FrontDoor({
    host: '127.0.0.1',
    port: 0,
    logger,
    tls: null,
    http: { handle: () => { t.fail('no HTTP request is sent here') } },
    grpc: { watchStargates: hub, registerInferenceServer: registrations },
  })
  const address = await door.listen()
  const target = `127.0.0.1:${address.port}`
  const watchers: StargateWatchClient[] = []
  const watch = (): StargateWatchClient => {
    const watcher = new StargateWatchClient(target)
    watchers.push(watcher)
    return watcher
  }
  t.teardown(async () => {
    for (const watcher of watchers) watcher.close()
    hub.close()
    await door.close(0)
  })

  const early = watch()
  const refused = await waitFor(() => early.error, { message: 'the early watch refused' })
  t.equal(refused.code, grpc.status.UNAVAILABLE)
  t.equal(refused.details, 'router is starting')
  t.equal(early.messages.length, 0, 'no Stargate advertised before the hub opened')

  hub.open()
  const served = watch()
  await served.nextWithIds(['stargate-0'])
  t.equal(served.error, null, 'the watch stays open')

  hub.close()
  const ended = await waitFor(() => served.error, { message: 'the open watch ended' })
  t.equal(ended.code, grpc.status.UNAVAILABLE)
  t.equal(ended.details, 'router is shutting down')
  const late = watch()
  const closed = await waitFor(() => late.error, { message: 'the late watch refused' })
  t.equal(closed.code, grpc.status.UNAVAILABLE)
  t.equal(closed.details, 'router is shutting down')
})
