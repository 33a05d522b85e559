// Issue 8: `npm run demo` is the newcomer's tour and must finish by itself in under a minute.
// Smoke test: run it as a child process (as the README says) and check what it printed.
import t from 'tap'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const DEMO = fileURLToPath(new URL('../../server/demo.ts', import.meta.url))

t.test('the demo runs the whole tour and exits 0 in under a minute', async (t) => {
  const started = Date.now()
  const child = spawn(process.execPath, [DEMO], { stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (c: string) => { stdout += c })
  child.stderr.setEncoding('utf8').on('data', (c: string) => { stderr += c })
  const timer = setTimeout(() => { child.kill('SIGKILL') }, 60_000)
  const code = await new Promise<number | null>((resolve) => { child.on('exit', resolve) })
  clearTimeout(timer)
  t.equal(code, 0, `exit code 0 (stderr: ${stderr.slice(-500)})`)
  t.ok(Date.now() - started < 60_000, `finished in ${((Date.now() - started) / 1000).toFixed(1)} s`)
  t.match(stdout, /answered by pod stargate-/, 'registrations reach the pods')
  t.equal(stdout.match(/Stargate -> router -> Pylon -> back: "pylon:GET \/v1\/models"/g)?.length, 3, 'three reverse tunnels carried a request')
  t.match(stdout, /-> 12 tokens from pod stargate-/, 'the LLM stream arrived')
  t.match(stdout, /serial [0-9A-F]+ -> [0-9A-F]+ on new handshakes/, 'the certificate rotated')
  t.match(stdout, /\/readyz: 200 ready/)
  t.match(stdout, /^summary$/m)
})
