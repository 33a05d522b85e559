// `npm run demo` is the newcomer's tour and must finish by itself in under a minute
// (it can also run its tunnels as WebTransport). Smoke test: run it as a child
// process, as the README says, and check what it printed.
import t from 'tap'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const DEMO = fileURLToPath(new URL('../../server/demo.ts', import.meta.url))

// Two demo processes one after the other: on a loaded 2-core machine that outlasts tap's 30 s
// default; the tests themselves hold each run to a minute.
t.setTimeout(180_000)

async function runDemo (args: string[]): Promise<{ code: number | null, stdout: string, stderr: string, ms: number }> {
  const started = Date.now()
  const child = spawn(process.execPath, [DEMO, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (c: string) => { stdout += c })
  child.stderr.setEncoding('utf8').on('data', (c: string) => { stderr += c })
  const timer = setTimeout(() => { child.kill('SIGKILL') }, 60_000)
  const code = await new Promise<number | null>((resolve) => { child.on('exit', resolve) })
  clearTimeout(timer)
  return { code, stdout, stderr, ms: Date.now() - started }
}

t.test('the demo runs the whole tour and exits 0 in under a minute', async (t) => {
  const { code, stdout, stderr, ms } = await runDemo([])
  t.equal(code, 0, `exit code 0 (stderr: ${stderr.slice(-500)})`)
  t.ok(ms < 60_000, `finished in ${(ms / 1000).toFixed(1)} s`)
  t.match(stdout, /answered by pod stargate-/, 'registrations reach the pods')
  t.equal(stdout.match(/Stargate -> router -> Pylon -> back: "pylon:GET \/v1\/models"/g)?.length, 3, 'three reverse tunnels carried a request')
  t.match(stdout, /-> 12 tokens from pod stargate-/, 'the LLM stream arrived')
  t.match(stdout, /serial [0-9A-F]+ -> [0-9A-F]+ on new handshakes/, 'the certificate rotated')
  t.match(stdout, /\/readyz: 200 ready/)
  t.match(stdout, /^summary$/m)
})

t.test('the demo runs its tunnels as WebTransport with --webtransport', async (t) => {
  const { code, stdout, stderr } = await runDemo(['--webtransport'])
  t.equal(code, 0, `exit code 0 (stderr: ${stderr.slice(-500)})`)
  t.equal(stdout.match(/session 200 via SNI stargate-[^;]+; hello from pod stargate-[^;]+; stream echoed "GET \/v1\/models"/g)?.length, 3, 'three WebTransport sessions bridged to their pods')
  t.match(stdout, /3 WebTransport reverse tunnels relayed/)
})
