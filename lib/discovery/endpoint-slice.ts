/**
 * SPEC §3 rules 1–4: one EndpointSlice (JSON as the API server sends it, so `unknown`)
 * to the observations it makes about pods. Pure; no I/O.
 */
import { podTarget, type PodEndpoint, type PortNames } from './types.ts'
import { podAddressFamily } from './pod-address.ts'
import { isRoutableIdentity } from '../routing/hostname-template.ts'

/** Bounded label values of stargate_k8s_router_endpointslice_skipped_total. */
export const SKIP_REASONS = [
  'malformed_slice',
  'unsupported_address_type',
  'missing_grpc_port',
  'missing_quic_port',
  'invalid_port',
  'no_identity',
  'no_address',
  'unroutable_name',
  // Not from this parser: the watch drops an object of another namespace or Service
  // (endpoint-slice-watch.ts).
  'foreign_slice',
] as const
export type SkipReason = typeof SKIP_REASONS[number]

/**
 * What one slice says about one pod: its endpoint (a target, or present but not ready), or
 * null when it is terminating (on its way out: treated as gone).
 */
export interface Observation {
  readonly identity: string
  readonly target: PodEndpoint | null
}

export interface ParsedSlice {
  readonly observations: readonly Observation[]
  /** Skipped endpoints or a skipped slice, by reason. */
  readonly skipped: readonly SkipReason[]
}

type Json = Record<string, unknown>

function asObject (value: unknown): Json | null {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? value as Json : null
}

function asString (value: unknown): string | null {
  return typeof value === 'string' && value !== '' ? value : null
}

/** Rule 3: a port by exact name and protocol (absent protocol = TCP), 1..65535. */
function findPort (ports: readonly unknown[], name: string, protocol: 'TCP' | 'UDP'): number | 'missing' | 'invalid' {
  for (const entry of ports) {
    const port = asObject(entry)
    if (port === null || port.name !== name) continue
    const proto = port.protocol === undefined || port.protocol === null ? 'TCP' : port.protocol
    if (proto !== protocol) continue
    const value = port.port
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 65535) return 'invalid'
    return value
  }
  return 'missing'
}

/**
 * Rule 1: targetRef.name when the ref is a Pod (a ref without a kind counts as one, as in the
 * Rust router), else none: the endpoint is skipped and counted `no_identity`. The upstream
 * router dropped its `hostname` fallback: a hostname is the DNS label a StatefulSet
 * sets, not necessarily the Pod name, and guessing would advertise a name nothing routes.
 */
export function identityOf (endpoint: Json): string | null {
  const ref = asObject(endpoint.targetRef)
  if (ref === null || (ref.kind !== undefined && ref.kind !== null && ref.kind !== 'Pod')) return null
  return asString(ref.name)
}

function conditionsOf (endpoint: Json): Json {
  return asObject(endpoint.conditions) ?? {}
}

/**
 * Rule 2: ready (absent = true) and not terminating (absent = false), whatever serving says,
 * as upstream since stargate v0.14.2 (NVIDIA/nvcf#1271, fix 148daaf6). Behind a
 * publishNotReadyAddresses Service Kubernetes lists a warming pod as ready=true,
 * serving=false; it must get its Pylons before gateway traffic, so it is a target. Such a
 * Service lists a terminating pod as ready=true too, hence the terminating check.
 */
export function isReady (endpoint: Json): boolean {
  return readyIn(conditionsOf(endpoint))
}

/** serving (absent = same as ready): whether LLM client HTTP may go to the pod (SPEC §6). */
export function isServing (endpoint: Json): boolean {
  return servingIn(conditionsOf(endpoint))
}

export function isTerminating (endpoint: Json): boolean {
  return conditionsOf(endpoint).terminating === true
}

function readyIn (conditions: Json): boolean {
  return conditions.ready !== false && conditions.terminating !== true
}

function servingIn (conditions: Json): boolean {
  return typeof conditions.serving === 'boolean' ? conditions.serving : conditions.ready !== false
}

export function parseEndpointSlice (raw: unknown, ports: PortNames): ParsedSlice {
  const slice = asObject(raw)
  const metadata = slice === null ? null : asObject(slice.metadata)
  if (slice === null || metadata === null) return { observations: [], skipped: ['malformed_slice'] }
  const addressType = slice.addressType
  if (addressType !== 'IPv4' && addressType !== 'IPv6') return { observations: [], skipped: ['unsupported_address_type'] }
  const ipVersion = addressType === 'IPv4' ? 4 : 6
  const endpoints = Array.isArray(slice.endpoints) ? slice.endpoints : []
  if (endpoints.length === 0) return { observations: [], skipped: [] }

  const portList = Array.isArray(slice.ports) ? slice.ports : []
  const grpcPort = findPort(portList, ports.grpc, 'TCP')
  if (grpcPort === 'missing') return { observations: [], skipped: ['missing_grpc_port'] }
  const quicPort = findPort(portList, ports.quic, 'UDP')
  if (quicPort === 'missing') return { observations: [], skipped: ['missing_quic_port'] }
  if (grpcPort === 'invalid' || quicPort === 'invalid') return { observations: [], skipped: ['invalid_port'] }
  const http = findPort(portList, ports.http, 'TCP')
  const httpPort = typeof http === 'number' ? http : null

  const namespace = asString(metadata.namespace) ?? ''
  const observations: Observation[] = []
  const skipped: SkipReason[] = []
  for (const entry of endpoints) {
    const endpoint = asObject(entry)
    if (endpoint === null) { skipped.push('malformed_slice'); continue }
    const identity = identityOf(endpoint)
    if (identity === null) { skipped.push('no_identity'); continue }
    // A name no host can carry (a dot, over 63 characters) would be advertised but never routed.
    if (!isRoutableIdentity(identity)) { skipped.push('unroutable_name'); continue }
    // Rule 4: the first address; it must be an address of the slice's family.
    const address = Array.isArray(endpoint.addresses) ? endpoint.addresses[0] : undefined
    if (typeof address !== 'string' || podAddressFamily(address) !== ipVersion) { skipped.push('no_address'); continue }
    const conditions = conditionsOf(endpoint)
    if (conditions.terminating === true) { observations.push({ identity, target: null }); continue }
    const target = podTarget({ identity, namespace, address, grpcPort, quicPort, httpPort, nodeName: asString(endpoint.nodeName), zone: asString(endpoint.zone), serving: servingIn(conditions) })
    observations.push({ identity, target: { target, ready: readyIn(conditions) } })
  }
  return { observations, skipped }
}
