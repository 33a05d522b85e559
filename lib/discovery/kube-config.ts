/**
 * Finds Kubernetes client configuration the way kubectl does (in-cluster service account,
 * then KUBECONFIG, then ~/.kube/config) and says clearly when there is none, instead of the
 * client library's silent fallback to http://localhost:8080.
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
      kubeConfig.loadFromDefault()
      return { ok: true, kubeConfig, source: `KUBECONFIG ${files.join(':')}` }
    }
    const home = join(env.HOME ?? homedir(), '.kube', 'config')
    if (existsSync(home)) {
      kubeConfig.loadFromFile(home)
      return { ok: true, kubeConfig, source: home }
    }
  } catch (err) {
    return { ok: false, message: `cannot load Kubernetes configuration: ${(err as Error).message}` }
  }
  return {
    ok: false,
    message: 'no Kubernetes configuration found (not running in a pod, KUBECONFIG unset, no ~/.kube/config): ' +
      'run in a cluster or set KUBECONFIG for --discovery kubernetes, or use --discovery file --targets-file <path>',
  }
}
