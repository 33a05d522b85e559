/**
 * Offline validation of rendered Kubernetes objects: each object is checked with
 * its kubernetes-models class (the JSON schema of the API: types, enums, required fields),
 * and then for unknown fields, which those schemas accept silently. A misspelt field such as
 * `readOnlyRootFileSystem` or `readinesProbe` would otherwise render, validate and apply, and
 * the API server would drop it without a word.
 *
 * The unknown-field check walks the object along the models' own type declarations: each
 * `I<Name>` interface in a `.d.ts` lists the fields of one API type and imports the types of
 * its fields, so the declarations are a schema the check can follow without a network.
 * Fields typed as maps, inline objects or aliases (IntOrString, Quantity) are not descended.
 */
import { readFileSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

export interface KubeObject {
  readonly apiVersion: string
  readonly kind: string
  readonly metadata: { readonly name: string, readonly namespace?: string, readonly labels?: Record<string, string>, readonly annotations?: Record<string, string> }
  readonly [field: string]: unknown
}

/** The model module of every kind the chart and overlays may render. */
const MODELS: Readonly<Record<string, string>> = {
  'v1/ServiceAccount': 'kubernetes-models/v1/ServiceAccount',
  'v1/Service': 'kubernetes-models/v1/Service',
  'v1/ConfigMap': 'kubernetes-models/v1/ConfigMap',
  'apps/v1/Deployment': 'kubernetes-models/apps/v1/Deployment',
  'policy/v1/PodDisruptionBudget': 'kubernetes-models/policy/v1/PodDisruptionBudget',
  'networking.k8s.io/v1/NetworkPolicy': 'kubernetes-models/networking.k8s.io/v1/NetworkPolicy',
  'rbac.authorization.k8s.io/v1/Role': 'kubernetes-models/rbac.authorization.k8s.io/v1/Role',
  'rbac.authorization.k8s.io/v1/RoleBinding': 'kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding',
  'monitoring.coreos.com/v1/ServiceMonitor': '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor',
}

interface ModelClass {
  new (data: unknown): { validate (): void }
}

/** Every problem with one object, as `Kind/name: problem` lines; empty when it is valid. */
export async function validateObject (object: KubeObject): Promise<string[]> {
  const id = `${object.kind}/${object.metadata?.name ?? '?'}`
  const specifier = MODELS[`${object.apiVersion}/${object.kind}`]
  if (specifier === undefined) return [`${id}: no model for ${object.apiVersion} ${object.kind} (add it to MODELS after reviewing why it is rendered)`]
  const module = await import(specifier) as Record<string, ModelClass | undefined>
  const Model = module[object.kind]
  if (Model === undefined) return [`${id}: ${specifier} exports no ${object.kind}`]
  const problems: string[] = []
  try {
    new Model(object).validate()
  } catch (err) {
    problems.push(`${id}: ${(err as Error).message}`)
  }
  const shape = shapeOf(declarationOf(specifier))
  if (shape === null) problems.push(`${id}: no type declaration found for ${specifier}`)
  else for (const unknown of unknownFields(object, shape, '')) problems.push(`${id}: unknown field ${unknown}`)
  return problems
}

function declarationOf (specifier: string): string {
  return fileURLToPath(import.meta.resolve(specifier)).replace(/\.js$/, '.d.ts')
}

interface Shape {
  /** field name -> the declared type text */
  readonly fields: ReadonlyMap<string, string>
  /** imported type name -> its declaration file */
  readonly imports: ReadonlyMap<string, string>
}

const shapes = new Map<string, Shape | null>()

/** The fields of the one exported interface of a models `.d.ts`, or null for aliases. */
function shapeOf (dtsPath: string): Shape | null {
  const cached = shapes.get(dtsPath)
  if (cached !== undefined) return cached
  let text: string
  try {
    text = readFileSync(dtsPath, 'utf8')
  } catch {
    shapes.set(dtsPath, null)
    return null
  }
  const imports = new Map<string, string>()
  for (const match of text.matchAll(/^import \{ (\w+) \} from "([^"]+)";$/gm)) {
    const [, name, from] = match as unknown as [string, string, string]
    if (from.startsWith('@kubernetes-models/base')) continue
    const file = from.startsWith('.') ? resolve(dirname(dtsPath), from).replace(/\.js$/, '.d.ts') : declarationOf(from)
    imports.set(name, file)
  }
  const start = text.search(/^export interface \w+[^{]*\{$/m)
  if (start < 0) {
    shapes.set(dtsPath, null)
    return null
  }
  const end = text.indexOf('\n}', start)
  const fields = new Map<string, string>()
  for (const match of text.slice(start, end).matchAll(/^ {4}"([^"]+)"\??: (.*)$/gm)) {
    const [, name, type] = match as unknown as [string, string, string]
    fields.set(name, type)
  }
  const shape: Shape = { fields, imports }
  shapes.set(dtsPath, shape)
  return shape
}

function isPlainObject (value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

function unknownFields (value: unknown, shape: Shape, path: string): string[] {
  if (!isPlainObject(value)) return []
  const found: string[] = []
  for (const [key, child] of Object.entries(value)) {
    const type = shape.fields.get(key)
    const here = `${path}.${key}`
    if (type === undefined) {
      found.push(here)
      continue
    }
    const ref = /^(Array<)?(I\w+)>?;$/.exec(type)
    const file = ref === null ? undefined : shape.imports.get(ref[2] as string)
    const childShape = file === undefined ? null : shapeOf(file)
    if (childShape === null || childShape.fields.size === 0) continue
    if (ref?.[1] !== undefined && Array.isArray(child)) {
      child.forEach((item, i) => { found.push(...unknownFields(item, childShape, `${here}[${i}]`)) })
    } else {
      found.push(...unknownFields(child, childShape, here))
    }
  }
  return found
}
