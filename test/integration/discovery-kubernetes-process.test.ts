// SPEC §3 ("in-cluster config or KUBECONFIG") and §11: the router process, started the way
// an operator starts it outside a cluster (KUBECONFIG naming a kubeconfig file), discovers
// the Stargate pods from the API server and exits 0 on SIGTERM. Run in a child process, as
// exit behaviour must be.
import t from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { FakeKubeApiServer } from '../fixtures/kube-apiserver.ts'
import { NAMESPACE, pod, stargateSlice, type DebugSnapshot } from '../fixtures/kube-router.ts'
import { waitFor } from '../fixtures/wait.ts'
import { GRPC_PYLON_DIAL_ADDR } from '../fixtures/router-process.ts'

const MAIN = fileURLToPath(new URL('../../server/main.ts', import.meta.url))

// A child process that loads the whole router: slow on a loaded 2-core machine.
t.setTimeout(120_000)

t.test('the router process started with KUBECONFIG serves the slices of the API server and exits 0 on SIGTERM', async (t) => {
  const fake = await FakeKubeApiServer.start({ namespaces: [NAMESPACE], token: 'process-token' })
  t.teardown(() => fake.close())
  fake.apply(stargateSlice('stargate-headless-a', [pod('stargate-0', '127.0.1.1'), pod('stargate-1', '127.0.1.2')]))
  const kubeconfig = await fake.writeKubeconfig(t.testdir())

  const child = spawn(process.execPath, [MAIN,
    '--target-namespace', NAMESPACE,
    '--listen-addr', '127.0.0.1:0',
    '--health-listen-addr', '127.0.0.1:0',
    '--reverse-tunnel-listen-addr', '127.0.0.1:0',
    '--grpc-pylon-dial-addr', GRPC_PYLON_DIAL_ADDR,
    '--shutdown-drain-timeout-ms', '1000',
  ], { env: { PATH: process.env.PATH, HOME: t.testdirName, KUBECONFIG: kubeconfig }, stdio: ['ignore', 'pipe', 'pipe'] })
  t.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk })
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })

  const listening = await waitFor(() => stdout.split('\n').filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { msg?: string, health?: { port: number } })
    .find((l) => l.msg === 'stargate router listening'), { timeoutMs: 60_000, message: `the listening log line (stderr: ${stderr})` })
  const health = `http://127.0.0.1:${listening.health?.port ?? 0}`
  await waitFor(async () => (await fetch(`${health}/readyz`)).status === 200, { timeoutMs: 10_000, message: '/readyz 200' })
  const snapshot = await (await fetch(`${health}/debug/snapshot`)).json() as DebugSnapshot
  t.same(snapshot.targets.map((x) => x.identity), ['stargate-0', 'stargate-1'])
  t.notMatch(stdout, 'process-token', 'the token from the kubeconfig is not logged')

  const exited = once(child, 'exit')
  child.kill('SIGTERM')
  const [code] = await exited as [number | null]
  t.equal(code, 0, 'a graceful shutdown exits 0')
})
