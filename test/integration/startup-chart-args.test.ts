// The router is a drop-in for the Rust stargate-k8s-router under the upstream chart.
// server/main.ts runs in a child process with exactly the argument list the upstream chart
// renders for the backend router (every flag of it, once in `--flag=value` form and once in
// `--flag value` form, the namespace once as a flag and once from POD_NAMESPACE), discovering
// a pod from a fake kube-apiserver through KUBECONFIG (listed as upstream's headless
// publishNotReadyAddresses Service lists a Stargate in its warm-up: ready, not serving). Two
// clients this project did not write,
// @grpc/grpc-js and Debian's python3-grpcio, reach it over insecure h2c, as a Pylon behind the
// TLS-terminating Gateway does: WatchStargates carries the fields the Rust router sends, and a
// registration reaches the pod. On SIGTERM both RPCs end UNAVAILABLE "router is shutting down".
import t, { type Test } from 'tap'
import { execFile } from 'node:child_process'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import * as grpc from '@grpc/grpc-js'
import { FakeKubeApiServer } from '../fixtures/kube-apiserver.ts'
import { NAMESPACE, pod, stargateSlice } from '../fixtures/kube-router.ts'
import { createCa, createLeaf } from '../fixtures/certs.ts'
import { StubStargate } from '../fixtures/stub-stargate.ts'
import { Pylon } from '../fixtures/pylon.ts'
import { StargateWatchClient, type WatchMessage } from '../fixtures/stargate-watch-client.ts'
import { exitWithin, httpGet, startProcess, tempDir, type RouterProcess } from '../fixtures/router-process.ts'
import { waitFor } from '../fixtures/wait.ts'

// Child processes and python on a small shared machine.
t.setTimeout(180_000)

const exec = promisify(execFile)
const PYTHON = '/usr/bin/python3'
const WATCH_PY = fileURLToPath(new URL('../fixtures/python/watch.py', import.meta.url))
const REGISTER_PY = fileURLToPath(new URL('../fixtures/python/register.py', import.meta.url))
const TEMPLATE = '{pod_name}.stargate.example.com'
const DIAL = 'https://stargate.example.com:443'
const POD = 'stargate-7d9f8b6c4-x2x7q'
const HOST = `${POD}.stargate.example.com`
/** The headless Service upstream's Stargate chart renders (publishNotReadyAddresses: true). */
const UPSTREAM_HEADLESS_SERVICE = 'llm-request-router-headless'

/**
 * The backend router's arguments as the upstream chart renders them, with this test's values
 * (loopback, ephemeral ports). The remote Watch URLs come unsorted and with a duplicate.
 */
function chartArgs (o: { tlsDir: string, drainMs: number, namespace: boolean }): Array<[string, string | null]> {
  return [
    ['listen-addr', '127.0.0.1:0'],
    ['reverse-tunnel-listen-addr', '127.0.0.1:0'],
    ['health-listen-addr', '127.0.0.1:0'],
    ...(o.namespace ? [['target-namespace', NAMESPACE] as [string, string]] : []),
    ['target-service-name', UPSTREAM_HEADLESS_SERVICE],
    ['advertised-hostname-template', TEMPLATE],
    ['advertised-grpc-port', '50071'],
    ['grpc-pylon-dial-addr', DIAL],
    ['watch-heartbeat-ms', '5000'],
    ['remote-stargate-url', 'https://router.west.example.com:50071'],
    ['remote-stargate-url', 'http://router.east.example.com:50071'],
    ['remote-stargate-url', 'https://router.west.example.com:50071'],
    ['allow-insecure-remote-watch-http', null],
    ['tunnel-protocol', 'raw-quic'],
    ['tls-cert-path', join(o.tlsDir, 'tls.crt')],
    ['tls-key-path', join(o.tlsDir, 'tls.key')],
    ['shutdown-drain-timeout-ms', String(o.drainMs)],
  ]
}

const equalsForm = (args: Array<[string, string | null]>): string[] => args.map(([name, value]) => value === null ? `--${name}` : `--${name}=${value}`)
const spaceForm = (args: Array<[string, string | null]>): string[] => args.flatMap(([name, value]) => value === null ? [`--${name}`] : [`--${name}`, value])

const EXPECTED: WatchMessage = {
  stargates: [{ stargate_id: POD, advertise_addr: `${HOST}:50071`, http_advertise_addr: '', grpc_pylon_dial_addr: DIAL }],
  watch_stargate_urls: ['http://router.east.example.com:50071', 'https://router.west.example.com:50071'],
}

interface Started {
  readonly p: RouterProcess
  readonly address: string
  readonly health: number
}

async function startChartRouter (t: Test, argv: readonly string[], env: NodeJS.ProcessEnv): Promise<Started> {
  const p = await startProcess(t, argv, env)
  const listening = await waitFor(() => p.logs().find((l) => l.msg === 'stargate router listening'), { timeoutMs: 60_000, message: 'the listening log line' })
  const frontDoor = (listening.frontDoor as { port: number }).port
  const health = (listening.health as { port: number }).port
  return { p, address: `127.0.0.1:${frontDoor}`, health }
}

t.test('the router starts with the upstream chart\'s arguments and serves grpc-js and python3-grpcio over h2c', async (t) => {
  const fake = await FakeKubeApiServer.start({ namespaces: [NAMESPACE] })
  t.teardown(() => fake.close())
  const stub = await StubStargate.start({ podName: POD, ip: '127.0.93.10', advertisedHost: HOST, quicPort: 50072 })
  t.teardown(() => stub.close())
  // Warming: upstream keeps a new Stargate unready for 60 s; its headless Service lists it anyway.
  fake.apply(stargateSlice(`${UPSTREAM_HEADLESS_SERVICE}-abc12`, [pod(POD, '127.0.93.10', { ready: true, serving: false })], { service: UPSTREAM_HEADLESS_SERVICE, ports: { grpc: stub.port, quic: 50072 } }))
  const dir = await tempDir(t, 'stargate-chart-args-')
  const kubeconfig = await fake.writeKubeconfig(dir)
  // The tunnels' identity, as the chart mounts it; it does not make the front door TLS.
  const ca = await createCa({ name: 'chart args ca' })
  const leaf = await createLeaf(ca, { dnsNames: ['*.stargate.example.com'] })
  await writeFile(join(dir, 'tls.crt'), leaf.chainPem)
  await writeFile(join(dir, 'tls.key'), leaf.keyPem)

  const forms = [
    { name: '--flag=value, --target-namespace', argv: equalsForm(chartArgs({ tlsDir: dir, drainMs: 30000, namespace: true })), env: { KUBECONFIG: kubeconfig } },
    { name: '--flag value, POD_NAMESPACE', argv: spaceForm(chartArgs({ tlsDir: dir, drainMs: 2000, namespace: false })), env: { KUBECONFIG: kubeconfig, POD_NAMESPACE: NAMESPACE } },
  ]
  const routers = await Promise.all(forms.map((form) => startChartRouter(t, form.argv, form.env)))
  for (const [i, form] of forms.entries()) {
    const router = routers[i] as Started
    await t.test(form.name, async (t) => {
      await waitFor(async () => (await httpGet(router.health, '/readyz')).status === 200, { timeoutMs: 15_000, message: '/readyz 200' })
      t.equal((await httpGet(router.health, '/readyz')).body, 'ready\n', '/readyz is 200')

      const watch = new StargateWatchClient(router.address)
      t.teardown(() => { watch.close() })
      t.same(await watch.next(), EXPECTED, 'grpc-js (insecure h2c): the fields the Rust router sends')

      const python = await exec(PYTHON, [WATCH_PY, router.address], { timeout: 30_000 })
      t.strictSame(JSON.parse(python.stdout), EXPECTED, 'python3-grpcio (insecure h2c): the same message')

      const before = stub.registrations.length
      const registered = await exec(PYTHON, [REGISTER_PY, router.address, `${HOST}:50071`, '2'], { timeout: 30_000 })
      t.match(JSON.parse(registered.stdout), { code: 'OK', pod: POD, acks: [`${HOST}:50072`, `${HOST}:50072`] }, 'python3-grpcio: the registration reached the pod and was acked')
      t.equal(stub.registrations.length, before + 1, 'the pod saw the stream')
      t.equal(stub.registrations.at(-1)?.authority, `${HOST}:50071`, 'with the advertised :authority')
    })
  }

  await t.test('on SIGTERM an open watch and an open registration end UNAVAILABLE "router is shutting down", and it exits 0', async (t) => {
    const router = routers[1] as Started
    const watch = new StargateWatchClient(router.address)
    t.teardown(() => { watch.close() })
    await watch.next()
    const pylon = new Pylon({ routerAddress: router.address, credentials: grpc.credentials.createInsecure(), heartbeatMs: 100 })
    t.teardown(() => { pylon.close() })
    const registration = pylon.register({ stargateId: POD, advertiseAddr: `${HOST}:50071`, httpAdvertiseAddr: '', grpcPylonDialAddr: DIAL })
    await waitFor(() => registration.acks.length > 0 && registration.pod === POD, { message: 'grpc-js: an ack from the pod over h2c' })

    router.p.child.kill('SIGTERM')
    const watchEnd = await waitFor(() => watch.error, { timeoutMs: 10_000, message: 'the watch to end' })
    t.match(watchEnd, { code: grpc.status.UNAVAILABLE, details: 'router is shutting down' }, 'WatchStargates')
    const status = await waitFor(() => registration.status, { timeoutMs: 15_000, message: 'the registration to end at the drain deadline' })
    t.match(status, { code: grpc.status.UNAVAILABLE, details: 'router is shutting down' }, 'RegisterInferenceServer')
    t.strictSame(await exitWithin(router.p, 15_000), { code: 0, signal: null })
    t.equal(router.p.logs().at(-1)?.msg, 'shutdown complete')
  })
})
