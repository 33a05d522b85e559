/**
 * Finds Kubernetes client configuration the way kubectl does (in-cluster service account,
 * then KUBECONFIG, then ~/.kube/config) and says clearly when there is none, instead of the
 * client library's silent fallback to http://localhost:8080.
 *
 * A malformed file is reported by name, line and column only: the YAML parser's own
 * message quotes the lines around the error, and a kubeconfig's lines hold tokens and keys.
 */
import { existsSync } from 'node:fs'
import { homedir } from 'node:os'
import { join } from 'node:path'
import { KubeConfig } from '@kubernetes/client-node'

const SERVICE_ACCOUNT_TOKEN = '/var/run/secrets/kubernetes.io/serviceaccount/token'

export type KubeConfigResult =
  | { readonly ok: true, readonly kubeConfig: KubeConfig, readonly source: string }
  | { readonly ok: false, readonly message: string }

export function loadKubeConfig (env: NodeJS.ProcessEnv): KubeConfigResult {
  const kubeConfig = new KubeConfig()
  let current: string | null = null
  try {
    if (env.KUBERNETES_SERVICE_HOST !== undefined && existsSync(SERVICE_ACCOUNT_TOKEN)) {
      kubeConfig.loadFromCluster()
      return { ok: true, kubeConfig, source: 'in-cluster service account' }
    }
    const files = (env.KUBECONFIG ?? '').split(':').filter((f) => f !== '')
    if (files.length > 0) {
      const missing = files.filter((f) => !existsSync(f))
      if (missing.length === files.length) {
        return { ok: false, message: `KUBECONFIG names no readable file (${files.join(', ')}): fix KUBECONFIG, or use --discovery file with --targets-file` }
      }
      // As loadFromDefault does, but from the env given (it reads process.env itself).
      for (const [i, file] of files.entries()) {
        current = file
        if (i === 0) {
          kubeConfig.loadFromFile(file)
        } else {
          const more = new KubeConfig()
          more.loadFromFile(file)
          kubeConfig.mergeConfig(more)
        }
      }
      return { ok: true, kubeConfig, source: `KUBECONFIG ${files.join(':')}` }
    }
    const home = join(env.HOME ?? homedir(), '.kube', 'config')
    if (existsSync(home)) {
      current = home
      kubeConfig.loadFromFile(home)
      return { ok: true, kubeConfig, source: home }
    }
  } catch (err) {
    return { ok: false, message: `cannot load Kubernetes configuration${current === null ? '' : ` from ${current}`}: ${describeLoadError(err)}` }
  }
  return {
    ok: false,
    message: 'no Kubernetes configuration found (not running in a pod, KUBECONFIG unset, no ~/.kube/config): ' +
      'run in a cluster or set KUBECONFIG for --discovery kubernetes, or use --discovery file --targets-file <path>',
  }
}

/** The parser's reason and position, never its snippet of the file. */
function describeLoadError (err: unknown): string {
  const e = err as { name?: string, reason?: unknown, mark?: { line?: unknown, column?: unknown }, message?: string, code?: string }
  if (e.name === 'YAMLException') {
    const line = typeof e.mark?.line === 'number' ? e.mark.line + 1 : null
    const column = typeof e.mark?.column === 'number' ? e.mark.column + 1 : null
    // Reasons are fixed phrases ("bad indentation of a mapping entry"), except a few that name
    // a tag or key from the file: those are left out.
    const reason = typeof e.reason === 'string' && /^[a-z ,()-]+$/i.test(e.reason) ? ` (${e.reason})` : ''
    const where = line === null ? '' : ` at line ${line}${column === null ? '' : `, column ${column}`}`
    return `malformed YAML${where}${reason}; the file's lines are not shown, as they may hold credentials`
  }
  if (typeof e.code === 'string') return e.code
  return e.message?.split('\n')[0] ?? String(err)
}
