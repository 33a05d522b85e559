// A malformed kubeconfig is reported by file, line and column, without quoting its
// lines (the YAML parser's message shows the lines around the error, and they hold tokens).
import t, { type Test } from 'tap'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { loadKubeConfig } from '../../lib/discovery/kube-config.ts'

const TOKEN = 'sk-kubeconfig-secret-7f3a'

async function file (t: Test, name: string, content: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'stargate-kubeconfig-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const path = join(dir, name)
  await writeFile(path, content)
  return path
}

const VALID = `apiVersion: v1
kind: Config
clusters:
- cluster: {server: 'https://10.0.0.1:6443'}
  name: c
users:
- name: u
  user: {token: ${TOKEN}}
contexts:
- context: {cluster: c, user: u}
  name: ctx
current-context: ctx
`

t.test('a malformed kubeconfig names the file and the position, and quotes none of its lines', async (t) => {
  const broken = VALID.replace(`  user: {token: ${TOKEN}}`, `  user:\n    token: ${TOKEN}\n   bad: indent: here`)
  const path = await file(t, 'config', broken)
  const result = loadKubeConfig({ KUBECONFIG: path })
  t.same(result, { ok: false, message: `cannot load Kubernetes configuration from ${path}: malformed YAML at line 10, column 4 (bad indentation of a mapping entry); the file's lines are not shown, as they may hold credentials` })
  t.notMatch(JSON.stringify(result), TOKEN)
})

t.test('the KUBECONFIG given is the one read, not the process environment\'s', async (t) => {
  const path = await file(t, 'config', VALID)
  const result = loadKubeConfig({ KUBECONFIG: path })
  t.equal(result.ok && result.kubeConfig.getCurrentCluster()?.server, 'https://10.0.0.1:6443')
})

t.test('a malformed second KUBECONFIG file is named too', async (t) => {
  const good = await file(t, 'a', VALID)
  const bad = await file(t, 'b', `users:\n- name: x\n  user: {token: ${TOKEN}\n`)
  const result = loadKubeConfig({ KUBECONFIG: `${good}:${bad}` })
  t.equal(result.ok, false)
  t.match(!result.ok && result.message, `cannot load Kubernetes configuration from ${bad}: malformed YAML at line`)
  t.notMatch(JSON.stringify(result), TOKEN)
})
