/**
 * `npm run demo`: the whole system on one machine, no cluster needed. A fake Kubernetes API
 * server holds the EndpointSlices of a few Stargate pods (stub Stargates on their own loopback
 * IPs); the router watches it; a Pylon-like client watches the router's WatchStargates and
 * registers with every advertised Stargate through the router. The demo then changes the
 * slices (scale up, a pod in two slices, a terminating pod, scale down) and prints what the
 * router advertises after each step. It ends by itself.
 */
import { parseConfig } from '../lib/config/config.ts'
import { createLogger } from '../lib/log.ts'
import { startRouter } from './router.ts'
import { FakeKubeApiServer } from '../test/fixtures/kube-apiserver.ts'
import { endpointSlice, type EndpointSpec } from '../test/fixtures/endpoint-slices.ts'
import { StubStargate } from '../test/fixtures/stub-stargate.ts'
import { Pylon } from '../test/fixtures/pylon.ts'
import { waitFor } from '../test/fixtures/wait.ts'

const NAMESPACE = 'stargate'
const SERVICE = 'stargate-headless'
const out = (line = ''): void => { process.stdout.write(line + '\n') }

async function main (): Promise<void> {
  const started = Date.now()
  out('stargate-router demo: fake Kubernetes API server -> router -> Pylon, all on loopback')
  out()
  const fake = await FakeKubeApiServer.start({ namespaces: [NAMESPACE] })
  const stubs = new Map<string, StubStargate>()
  const startPod = async (name: string, ip: string): Promise<StubStargate> => {
    const stub = await StubStargate.start({ podName: name, ip, advertisedHost: `${name}.stargate.external` })
    stubs.set(name, stub)
    return stub
  }
  const endpoint = (name: string, extra: Partial<EndpointSpec> = {}): EndpointSpec => ({ pod: name, ip: stubs.get(name)?.options.ip ?? '127.0.0.1', ...extra })
  const slice = (name: string, endpoints: EndpointSpec[]): void => {
    // All stubs listen on the same port number (each on its own IP), as pods do.
    fake.apply(endpointSlice({ namespace: NAMESPACE, service: SERVICE, name, endpoints, ports: { grpc: port, quic: 50052 } }))
  }

  const first = await startPod('stargate-0', '127.0.77.10')
  const port = first.port
  for (const [name, ip] of [['stargate-1', '127.0.77.11'], ['stargate-2', '127.0.77.12'], ['stargate-3', '127.0.77.13']] as const) {
    const stub = await StubStargate.start({ podName: name, ip, advertisedHost: `${name}.stargate.external`, port })
    stubs.set(name, stub)
  }

  slice('stargate-abcde', [endpoint('stargate-0'), endpoint('stargate-1'), endpoint('stargate-2')])
  const parsed = parseConfig(['--target-namespace', NAMESPACE, '--listen-addr', '127.0.0.1:0', '--health-listen-addr', '127.0.0.1:0', '--watch-heartbeat-ms', '0'], {})
  if (parsed.kind !== 'config') throw new Error('unexpected --help')
  const router = await startRouter(parsed.config, { logger: createLogger({ level: 'warn', format: 'json' }), kubeConfig: fake.kubeConfig(), discoveryBackoff: { baseMs: 100, maxMs: 1000 } })
  out(`router: front door 127.0.0.1:${router.frontDoor.port}, health http://127.0.0.1:${router.health.port}/readyz`)

  const pylon = new Pylon({ routerAddress: `127.0.0.1:${router.frontDoor.port}`, heartbeatMs: 200 })
  let step = 'initial'
  let lastPrinted = ''
  pylon.watch((set) => {
    const line = set.stargates.map((s) => s.stargateId).join(', ')
    if (line === lastPrinted) return
    lastPrinted = line
    out(`  [${step}] WatchStargates -> ${set.stargates.length} stargates: ${line === '' ? '(none)' : line}`)
  })

  const settle = async (ids: string[]): Promise<void> => {
    await waitFor(() => pylon.latest !== null && pylon.latest.stargates.map((s) => s.stargateId).join(',') === ids.join(','), { timeoutMs: 10_000, message: `advertised set ${ids.join(',')}` })
  }

  out()
  out('1. three ready pods in one EndpointSlice')
  await settle(['stargate-0', 'stargate-1', 'stargate-2'])
  pylon.registerAll()
  for (const id of ['stargate-0', 'stargate-1', 'stargate-2']) {
    const registration = await waitFor(() => { const r = pylon.registrations.get(id); return r !== undefined && r.acks.length > 0 ? r : null }, { timeoutMs: 10_000 })
    out(`  Pylon registered via :authority ${registration.stargate.advertiseAddr} -> answered by pod ${registration.pod ?? '?'} (ack: tunnel to ${registration.acks[0]?.reverseTunnelTarget ?? '?'})`)
  }

  step = 'scale up'
  out()
  out('2. scale up: stargate-3 appears in a second slice')
  slice('stargate-fghij', [endpoint('stargate-3')])
  await settle(['stargate-0', 'stargate-1', 'stargate-2', 'stargate-3'])

  step = 'pod in two slices'
  out()
  out('3. the EndpointSlice controller moves stargate-3: for a moment it is in both slices')
  slice('stargate-abcde', [endpoint('stargate-0'), endpoint('stargate-1'), endpoint('stargate-2'), endpoint('stargate-3')])
  await new Promise((resolve) => setTimeout(resolve, 300))
  const both = await (await fetch(`http://127.0.0.1:${router.health.port}/debug/snapshot`)).json() as { targets: Array<{ identity: string }> }
  out(`  /debug/snapshot: ${both.targets.length} targets, stargate-3 listed ${both.targets.filter((t) => t.identity === 'stargate-3').length} time(s)`)
  slice('stargate-fghij', [])

  step = 'terminating'
  out()
  out('4. stargate-1 starts terminating (serving, terminating): it leaves the advertised set')
  slice('stargate-abcde', [endpoint('stargate-0'), endpoint('stargate-1', { ready: false, serving: true, terminating: true }), endpoint('stargate-2'), endpoint('stargate-3')])
  await settle(['stargate-0', 'stargate-2', 'stargate-3'])
  const gone = pylon.registrations.get('stargate-1')
  if (gone !== undefined) out('  its registration stream stays open for --drain-grace-ms, then ends UNAVAILABLE so the Pylon re-registers elsewhere')

  step = 'scale down'
  out()
  out('5. scale down to one pod')
  slice('stargate-abcde', [endpoint('stargate-0')])
  await settle(['stargate-0'])

  out()
  const readyz = await fetch(`http://127.0.0.1:${router.health.port}/readyz`)
  out(`/readyz: ${readyz.status} ${(await readyz.text()).trim()}`)
  out(`done in ${((Date.now() - started) / 1000).toFixed(1)} s`)
  pylon.close()
  await router.shutdown()
  for (const stub of stubs.values()) stub.kill()
  await fake.close()
}

await main()
process.exit(0)
