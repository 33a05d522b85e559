/**
 * The facts about rendered manifests that matter to an operator and a security review
 * (SPEC §3 RBAC note, §8 directory mounts, §9 probes), as assertions shared by the
 * Helm and kustomize tests so that both artifacts are held to the same rules.
 */
import { dirname } from 'node:path'
import type { Test } from 'tap'
import { parseConfig, type Config } from '../../lib/config/config.ts'
import type { KubeObject } from './k8s-validate.ts'

type Json = Record<string, unknown>

export interface Container {
  readonly name: string
  readonly args?: readonly string[]
  readonly env?: ReadonlyArray<{ name: string, value?: string, valueFrom?: { fieldRef?: { fieldPath: string } } }>
  readonly ports?: ReadonlyArray<{ name?: string, containerPort: number, protocol?: string }>
  readonly livenessProbe?: Json
  readonly readinessProbe?: Json
  readonly startupProbe?: Json
  readonly lifecycle?: Json
  readonly securityContext?: Json
  readonly volumeMounts?: ReadonlyArray<{ name: string, mountPath: string, subPath?: string, subPathExpr?: string, readOnly?: boolean }>
}

export interface PodSpec {
  readonly serviceAccountName?: string
  readonly terminationGracePeriodSeconds?: number
  readonly securityContext?: Json
  readonly containers: readonly Container[]
  readonly initContainers?: readonly Container[]
  readonly volumes?: ReadonlyArray<{ name: string, secret?: Json, configMap?: Json, emptyDir?: Json }>
  readonly affinity?: Json
  readonly hostNetwork?: boolean
  readonly hostPID?: boolean
  readonly hostIPC?: boolean
}

export const ENDPOINTSLICE_RULE = { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['get', 'list', 'watch'] }

export function ofKind (objects: readonly KubeObject[], kind: string): KubeObject[] {
  return objects.filter((o) => o.kind === kind)
}

export function theOne (objects: readonly KubeObject[], kind: string): KubeObject {
  const found = ofKind(objects, kind)
  if (found.length !== 1) throw new Error(`expected exactly one ${kind}, rendered ${found.length}`)
  return found[0] as KubeObject
}

export function podSpecOf (deployment: KubeObject): PodSpec {
  return (deployment.spec as { template: { spec: PodSpec } }).template.spec
}

export function routerContainer (objects: readonly KubeObject[]): Container {
  const container = podSpecOf(theOne(objects, 'Deployment')).containers.find((c) => c.name === 'router')
  if (container === undefined) throw new Error('the Deployment has no container named router')
  return container
}

export function argsOf (objects: readonly KubeObject[]): readonly string[] {
  return routerContainer(objects).args ?? []
}

/** The value of `--name=value` (or true for a bare `--name`), or undefined. */
export function flagValue (args: readonly string[], name: string): string | true | undefined {
  for (const arg of args) {
    if (arg === `--${name}`) return true
    if (arg.startsWith(`--${name}=`)) return arg.slice(name.length + 3)
  }
  return undefined
}

export function envNames (objects: readonly KubeObject[]): string[] {
  return (routerContainer(objects).env ?? []).map((e) => e.name)
}

export function fieldRefOf (objects: readonly KubeObject[], name: string): string | undefined {
  return routerContainer(objects).env?.find((e) => e.name === name)?.valueFrom?.fieldRef?.fieldPath
}

/** What the kubelet would put in the environment, with these values for the downward API. */
export function podEnvironment (container: Container, pod: { namespace: string, name: string, ip: string }): NodeJS.ProcessEnv {
  const fields: Record<string, string> = { 'metadata.namespace': pod.namespace, 'metadata.name': pod.name, 'status.podIP': pod.ip }
  const env: NodeJS.ProcessEnv = {}
  for (const entry of container.env ?? []) {
    if (entry.value !== undefined) env[entry.name] = entry.value
    const path = entry.valueFrom?.fieldRef?.fieldPath
    if (path !== undefined) {
      const value = fields[path]
      if (value === undefined) throw new Error(`no test value for downward API field ${path}`)
      env[entry.name] = value
    }
  }
  return env
}

/** The router's own parser applied to the rendered args and env: what the pod would run with. */
export function routerConfigOf (objects: readonly KubeObject[], namespace: string): Config {
  const container = routerContainer(objects)
  const parsed = parseConfig(container.args ?? [], podEnvironment(container, { namespace, name: 'stargate-router-7d9f8b6c4-x2x7q', ip: '10.1.2.3' }))
  if (parsed.kind !== 'config') throw new Error('the rendered args asked for --help')
  return parsed.config
}

/** Every place in any object where a key named `key` appears, as paths. */
export function findKey (value: unknown, key: string, path = ''): string[] {
  if (Array.isArray(value)) return value.flatMap((item, i) => findKey(item, key, `${path}[${i}]`))
  if (typeof value !== 'object' || value === null) return []
  return Object.entries(value).flatMap(([k, v]) => (k === key ? [`${path}.${k}`] : []).concat(findKey(v, key, `${path}.${k}`)))
}

/**
 * SPEC §3 / §10: discovery needs get/list/watch on discovery.k8s.io endpointslices in a
 * namespace, and nothing else. No cluster-scoped RBAC, no other resource or verb, every
 * binding names a Role (not a ClusterRole) and the router's service account only.
 */
export function assertMinimalRbac (t: Test, objects: readonly KubeObject[], routerNamespace: string): void {
  for (const kind of ['ClusterRole', 'ClusterRoleBinding']) t.same(ofKind(objects, kind), [], `no ${kind} is rendered`)
  const roles = ofKind(objects, 'Role')
  t.ok(roles.length > 0, 'a Role is rendered')
  for (const role of roles) {
    t.ok(role.metadata.namespace, `Role ${role.metadata.name} is namespaced`)
    const rules = role.rules as Json[]
    t.ok(rules.length > 0, `Role ${role.metadata.name} has rules`)
    for (const rule of rules) t.strictSame(rule, ENDPOINTSLICE_RULE, `Role ${role.metadata.name} grants only get/list/watch on discovery.k8s.io endpointslices`)
  }
  const serviceAccount = podSpecOf(theOne(objects, 'Deployment')).serviceAccountName
  t.ok(serviceAccount, 'the router runs under its own service account')
  t.equal(ofKind(objects, 'ServiceAccount').filter((sa) => sa.metadata.name === serviceAccount).length, 1, 'that service account is rendered')
  const bindings = ofKind(objects, 'RoleBinding')
  t.equal(bindings.length, roles.length, 'one RoleBinding per Role')
  for (const binding of bindings) {
    const roleRef = binding.roleRef as Json
    t.equal(roleRef.kind, 'Role', `RoleBinding ${binding.metadata.name} refers to a Role, not a ClusterRole`)
    t.ok(roles.some((r) => r.metadata.name === roleRef.name && r.metadata.namespace === binding.metadata.namespace), `RoleBinding ${binding.metadata.name} refers to a Role in its own namespace`)
    t.strictSame(binding.subjects, [{ kind: 'ServiceAccount', name: serviceAccount, namespace: routerNamespace }], `RoleBinding ${binding.metadata.name} binds only the router's service account`)
  }
}

/** The endpointslice rules that apply in one namespace (count, since a Role cannot narrow by label). */
export function endpointSliceRulesIn (objects: readonly KubeObject[], namespace: string): number {
  return ofKind(objects, 'Role').filter((r) => r.metadata.namespace === namespace).flatMap((r) => r.rules as Json[]).length
}

/** SPEC §8: TLS material is mounted as directories (kubelet's ..data swaps reach the router). */
export function assertDirectoryMounts (t: Test, objects: readonly KubeObject[]): void {
  t.same(objects.flatMap((o) => findKey(o, 'subPath').concat(findKey(o, 'subPathExpr')).map((p) => `${o.kind}/${o.metadata.name}${p}`)), [], 'no subPath anywhere')
  const pod = podSpecOf(theOne(objects, 'Deployment'))
  const container = routerContainer(objects)
  const args = container.args ?? []
  for (const flag of ['tls-cert-path', 'tls-key-path', 'client-ca-path', 'upstream-tls-cert-path']) {
    const path = flagValue(args, flag)
    if (typeof path !== 'string') continue
    const mount = container.volumeMounts?.find((m) => m.mountPath === dirname(path))
    t.ok(mount, `--${flag} ${path} is a file in a mounted directory`)
    if (mount === undefined) continue
    t.equal(mount.readOnly, true, `the mount of --${flag} is read-only`)
    const volume = pod.volumes?.find((v) => v.name === mount.name)
    t.ok(volume?.secret !== undefined || volume?.configMap !== undefined, `--${flag} comes from a Secret or ConfigMap volume`)
    t.notOk((volume?.secret ?? volume?.configMap)?.items, `the volume of --${flag} projects the whole object (no items remapping)`)
  }
}

/** SPEC §9: liveness on /livez, readiness on /readyz, both on the health listener. */
export function assertProbes (t: Test, objects: readonly KubeObject[], healthPort: number): void {
  const container = routerContainer(objects)
  const portOf = (probe: Json | undefined): number | undefined => {
    const port = (probe?.httpGet as Json | undefined)?.port
    if (typeof port === 'number') return port
    return container.ports?.find((p) => p.name === port && (p.protocol ?? 'TCP') === 'TCP')?.containerPort
  }
  const pathOf = (probe: Json | undefined): unknown => (probe?.httpGet as Json | undefined)?.path
  t.equal(pathOf(container.livenessProbe), '/livez', 'liveness probes /livez')
  t.equal(pathOf(container.readinessProbe), '/readyz', 'readiness probes /readyz')
  t.equal(portOf(container.livenessProbe), healthPort, `liveness probes the health port ${healthPort}`)
  t.equal(portOf(container.readinessProbe), healthPort, `readiness probes the health port ${healthPort}`)
  if (container.startupProbe !== undefined) {
    t.equal(pathOf(container.startupProbe), '/livez', 'the startup probe uses /livez (readiness may wait on discovery)')
    t.equal(portOf(container.startupProbe), healthPort, 'the startup probe uses the health port')
  }
  const listen = flagValue(container.args ?? [], 'health-listen-addr')
  t.equal(typeof listen === 'string' ? Number(listen.slice(listen.lastIndexOf(':') + 1)) : undefined, healthPort, '--health-listen-addr listens on the probed port')
}

/** Every container non-root, read-only root filesystem, no privilege escalation, no capabilities. */
export function assertHardenedPod (t: Test, objects: readonly KubeObject[]): void {
  const pod = podSpecOf(theOne(objects, 'Deployment'))
  const podContext = pod.securityContext ?? {}
  for (const field of ['hostNetwork', 'hostPID', 'hostIPC'] as const) t.notOk(pod[field], `the pod does not use ${field}`)
  for (const container of [...pod.containers, ...(pod.initContainers ?? [])]) {
    const context = container.securityContext ?? {}
    const runAsNonRoot = context.runAsNonRoot ?? podContext.runAsNonRoot
    const runAsUser = context.runAsUser ?? podContext.runAsUser
    t.equal(runAsNonRoot, true, `${container.name} runs as non-root`)
    t.not(runAsUser, 0, `${container.name} does not run as uid 0`)
    t.equal(context.allowPrivilegeEscalation, false, `${container.name} cannot escalate privileges`)
    t.equal(context.readOnlyRootFilesystem, true, `${container.name} has a read-only root filesystem`)
    t.notOk(context.privileged, `${container.name} is not privileged`)
    const capabilities = (context.capabilities ?? {}) as { drop?: string[], add?: string[] }
    t.ok(capabilities.drop?.includes('ALL'), `${container.name} drops ALL capabilities`)
    t.same(capabilities.add ?? [], [], `${container.name} adds no capabilities`)
  }
}

/** The Service ports as `name protocol port->target` strings, sorted. */
export function servicePorts (service: KubeObject): string[] {
  const ports = (service.spec as { ports: Array<{ name: string, protocol?: string, port: number, targetPort?: unknown }> }).ports
  return ports.map((p) => `${p.name} ${p.protocol ?? 'TCP'} ${p.port}->${String(p.targetPort ?? p.port)}`).sort()
}

// --- NetworkPolicy: who reaches which port of the router pods ---

interface LabelSelector {
  readonly matchLabels?: Record<string, string>
  readonly matchExpressions?: ReadonlyArray<{ key: string, operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist', values?: readonly string[] }>
}

interface PolicyPeer {
  readonly podSelector?: LabelSelector
  readonly namespaceSelector?: LabelSelector
  readonly ipBlock?: { cidr: string, except?: readonly string[] }
}

interface PolicySpec {
  readonly podSelector: LabelSelector
  readonly policyTypes?: readonly string[]
  readonly ingress?: ReadonlyArray<{ ports?: ReadonlyArray<{ port?: number | string, protocol?: string }>, from?: readonly PolicyPeer[] }>
}

/** A client of the router pods: a pod (labels in a namespace) or an address outside the cluster. */
export interface PolicySource {
  readonly name: string
  readonly namespace: string | null
  readonly namespaceLabels: Record<string, string>
  readonly labels: Record<string, string>
  readonly ip: string
}

function selects (selector: LabelSelector, labels: Record<string, string>): boolean {
  for (const [key, value] of Object.entries(selector.matchLabels ?? {})) if (labels[key] !== value) return false
  for (const { key, operator, values = [] } of selector.matchExpressions ?? []) {
    const has = key in labels
    const ok = operator === 'Exists' ? has : operator === 'DoesNotExist' ? !has : operator === 'In' ? has && values.includes(labels[key] as string) : !has || !values.includes(labels[key] as string)
    if (!ok) return false
  }
  return true
}

function ipv4 (address: string): number {
  return address.split('.').reduce((n, octet) => n * 256 + Number(octet), 0)
}

function inCidr (ip: string, cidr: string): boolean {
  const [base, bits] = cidr.split('/') as [string, string]
  const size = 2 ** (32 - Number(bits))
  return Math.floor(ipv4(ip) / size) === Math.floor(ipv4(base) / size)
}

function peerMatches (peer: PolicyPeer, policyNamespace: string, source: PolicySource): boolean {
  if (peer.ipBlock !== undefined) return inCidr(source.ip, peer.ipBlock.cidr) && !(peer.ipBlock.except ?? []).some((c) => inCidr(source.ip, c))
  if (source.namespace === null) return false // outside the cluster: only ipBlocks name it
  const namespaceOk = peer.namespaceSelector === undefined ? source.namespace === policyNamespace : selects(peer.namespaceSelector, source.namespaceLabels)
  return namespaceOk && (peer.podSelector === undefined || selects(peer.podSelector, source.labels))
}

/**
 * Whether `source` may open a connection to `port`/`protocol` of a pod with `podLabels` in
 * `namespace`, under the NetworkPolicies rendered (networking.k8s.io/v1 semantics: a pod no
 * policy selects for Ingress takes everything; otherwise the union of the rules; a rule without
 * ports covers every port, one without from every source). Traffic from the pod's own node,
 * always allowed, is not modelled.
 */
export function ingressAllowed (objects: readonly KubeObject[], namespace: string, podLabels: Record<string, string>, source: PolicySource, port: number, protocol: string): boolean {
  const policies = ofKind(objects, 'NetworkPolicy')
    .filter((p) => (p.metadata.namespace ?? namespace) === namespace)
    .map((p) => p.spec as PolicySpec)
    .filter((spec) => selects(spec.podSelector, podLabels) && (spec.policyTypes ?? ['Ingress']).includes('Ingress'))
  if (policies.length === 0) return true
  return policies.some((spec) => (spec.ingress ?? []).some((rule) => {
    const portOk = rule.ports === undefined || rule.ports.length === 0 || rule.ports.some((p) => (p.port === undefined || p.port === port) && (p.protocol ?? 'TCP') === protocol)
    const fromOk = rule.from === undefined || rule.from.length === 0 || rule.from.some((peer) => peerMatches(peer, namespace, source))
    return portOk && fromOk
  }))
}

/** Sources the health-port policy is judged against; `namespace` is the router's. */
export function policySources (namespace: string, routerLabels: Record<string, string>): Record<'peer' | 'prometheus' | 'neighbour' | 'otherNamespace' | 'outside', PolicySource> {
  const ns = (name: string): Record<string, string> => ({ 'kubernetes.io/metadata.name': name })
  return {
    peer: { name: 'another router replica', namespace, namespaceLabels: ns(namespace), labels: { ...routerLabels, 'pod-template-hash': '7d9f8b6c4' }, ip: '10.1.2.4' },
    prometheus: { name: 'Prometheus (kube-prometheus-stack) in monitoring', namespace: 'monitoring', namespaceLabels: ns('monitoring'), labels: { 'app.kubernetes.io/name': 'prometheus', 'app.kubernetes.io/instance': 'kube-prometheus' }, ip: '10.1.9.9' },
    neighbour: { name: 'another pod of the router\'s namespace', namespace, namespaceLabels: ns(namespace), labels: { 'app.kubernetes.io/name': 'pylon' }, ip: '10.1.3.3' },
    otherNamespace: { name: 'a pod of another namespace', namespace: 'llm', namespaceLabels: ns('llm'), labels: { 'app.kubernetes.io/name': 'client' }, ip: '10.1.4.4' },
    outside: { name: 'an address outside the cluster', namespace: null, namespaceLabels: {}, labels: {}, ip: '203.0.113.7' },
  }
}

/**
 * The NetworkPolicy keeps the health port to the router's replicas and Prometheus (the kubelet,
 * on the pod's node, needs no rule) and leaves every other container port open to everyone.
 */
export function assertHealthPortPolicy (t: Test, objects: readonly KubeObject[], namespace: string): void {
  const deployment = theOne(objects, 'Deployment')
  const podLabels = (deployment.spec as { template: { metadata: { labels: Record<string, string> } } }).template.metadata.labels
  const policy = theOne(objects, 'NetworkPolicy')
  const spec = policy.spec as PolicySpec
  t.same(spec.podSelector, (deployment.spec as { selector: unknown }).selector, 'the policy selects the router pods, as the Deployment does')
  t.same(spec.policyTypes, ['Ingress'], 'ingress only: the router\'s own connections are not restricted')
  const sources = policySources(namespace, podLabels)
  const healthPort = (routerContainer(objects).ports ?? []).find((p) => p.name === 'health')?.containerPort
  for (const port of routerContainer(objects).ports ?? []) {
    const protocol = port.protocol ?? 'TCP'
    for (const [key, source] of Object.entries(sources)) {
      const expected = port.containerPort !== healthPort || key === 'peer' || key === 'prometheus'
      t.equal(ingressAllowed(objects, namespace, podLabels, source, port.containerPort, protocol), expected, `${port.name} ${protocol} ${port.containerPort} from ${source.name}: ${expected ? 'allowed' : 'refused'}`)
    }
  }
}
