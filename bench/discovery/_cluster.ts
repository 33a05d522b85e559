/**
 * A synthetic cluster for the discovery benchmarks: the EndpointSlices of a StatefulSet's
 * headless Service as the API server serves them (the shape `kubectl get endpointslice -o
 * json --show-managed-fields` prints on a GKE cluster): metadata with labels, owner
 * reference and managedFields; endpoints with addresses, conditions, hostname, a Pod
 * targetRef, nodeName and zone; ports grpc/TCP, quic/UDP, http/TCP.
 *
 * The model is mutable (change an endpoint, bump the slice's resourceVersion) and renders
 * slices as JSON text, so each benchmark sample can parse fresh objects, as the watch does.
 */

export interface EndpointModel {
  podName: string
  podUid: string
  ip: string
  ready: boolean
  nodeName: string
  zone: string
}

export interface SliceModel {
  readonly name: string
  readonly uid: string
  resourceVersion: number
  generation: number
  readonly endpoints: EndpointModel[]
}

import { random } from '../_util.ts'

export const NAMESPACE = 'stargate'
export const SERVICE = 'stargate-headless'
export const PORTS = { grpc: 'grpc', quic: 'quic', http: 'http' } as const

function hex (rand: () => number, length: number): string {
  let out = ''
  for (let i = 0; i < length; i++) out += Math.floor(rand() * 16).toString(16)
  return out
}

function uid (rand: () => number): string {
  return `${hex(rand, 8)}-${hex(rand, 4)}-${hex(rand, 4)}-${hex(rand, 4)}-${hex(rand, 12)}`
}

const ZONES = ['us-central1-a', 'us-central1-b', 'us-central1-c']

export class ClusterModel {
  readonly slices: SliceModel[] = []
  readonly #rand: () => number
  #nextVersion = 4_180_000

  constructor (sliceCount: number, endpointsPerSlice: number, seed = 1) {
    this.#rand = random(seed)
    const nodes = Array.from({ length: 60 }, (_, i) => `gke-prod-stargate-pool-${hex(this.#rand, 8)}-${String(i).padStart(4, '0')}`)
    let pod = 0
    for (let s = 0; s < sliceCount; s++) {
      const endpoints: EndpointModel[] = []
      for (let e = 0; e < endpointsPerSlice; e++, pod++) {
        const node = Math.floor(this.#rand() * nodes.length)
        endpoints.push({
          podName: `stargate-${pod}`,
          podUid: uid(this.#rand),
          ip: this.freshIp(),
          ready: true,
          nodeName: nodes[node] as string,
          zone: ZONES[node % ZONES.length] as string,
        })
      }
      this.slices.push({ name: `${SERVICE}-${hex(this.#rand, 5)}`, uid: uid(this.#rand), resourceVersion: this.#nextVersion++, generation: 1, endpoints })
    }
  }

  get endpointCount (): number {
    return this.slices.reduce((n, s) => n + s.endpoints.length, 0)
  }

  /** A pod IP in 10.64.0.0/10 (GKE's default pod range). */
  freshIp (): string {
    const n = Math.floor(this.#rand() * (1 << 22))
    return `10.${64 + (n >>> 16)}.${(n >>> 8) & 255}.${n & 255}`
  }

  /** Records that a slice changed, as the API server does on every write. */
  touch (slice: SliceModel): void {
    slice.resourceVersion = this.#nextVersion++
    slice.generation++
  }

  sliceObject (slice: SliceModel): unknown {
    return {
      kind: 'EndpointSlice',
      apiVersion: 'discovery.k8s.io/v1',
      metadata: {
        name: slice.name,
        generateName: `${SERVICE}-`,
        namespace: NAMESPACE,
        uid: slice.uid,
        resourceVersion: String(slice.resourceVersion),
        generation: slice.generation,
        creationTimestamp: '2025-05-12T08:14:03Z',
        labels: {
          'app.kubernetes.io/name': 'stargate',
          'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io',
          'kubernetes.io/service-name': SERVICE,
          'service.kubernetes.io/headless': '',
        },
        annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': '2025-05-12T09:41:27Z' },
        ownerReferences: [{ apiVersion: 'v1', kind: 'Service', name: SERVICE, uid: '5b0c2f4e-1f7d-4b8e-9a55-0f1d2c3b4a59', controller: true, blockOwnerDeletion: true }],
        managedFields: [{
          manager: 'kube-controller-manager',
          operation: 'Update',
          apiVersion: 'discovery.k8s.io/v1',
          time: '2025-05-12T09:41:27Z',
          fieldsType: 'FieldsV1',
          fieldsV1: {
            'f:addressType': {},
            'f:endpoints': {},
            'f:metadata': {
              'f:annotations': { '.': {}, 'f:endpoints.kubernetes.io/last-change-trigger-time': {} },
              'f:generateName': {},
              'f:labels': { '.': {}, 'f:app.kubernetes.io/name': {}, 'f:endpointslice.kubernetes.io/managed-by': {}, 'f:kubernetes.io/service-name': {}, 'f:service.kubernetes.io/headless': {} },
              'f:ownerReferences': { '.': {}, 'k:{"uid":"5b0c2f4e-1f7d-4b8e-9a55-0f1d2c3b4a59"}': {} },
            },
            'f:ports': {},
          },
        }],
      },
      addressType: 'IPv4',
      endpoints: slice.endpoints.map((e) => ({
        addresses: [e.ip],
        conditions: { ready: e.ready, serving: e.ready, terminating: false },
        hostname: e.podName,
        targetRef: { kind: 'Pod', namespace: NAMESPACE, name: e.podName, uid: e.podUid },
        nodeName: e.nodeName,
        zone: e.zone,
      })),
      ports: [
        { name: 'grpc', protocol: 'TCP', port: 50071 },
        { name: 'quic', protocol: 'UDP', port: 50072 },
        { name: 'http', protocol: 'TCP', port: 8080, appProtocol: 'http' },
      ],
    }
  }

  /** The slice as a watch event line (what the client library JSON.parses per event). */
  watchEventLine (slice: SliceModel): string {
    return JSON.stringify({ type: 'MODIFIED', object: this.sliceObject(slice) })
  }

  /** The slices as fresh objects, as a list response parses into. */
  listItems (): unknown[] {
    return JSON.parse(JSON.stringify(this.slices.map((s) => this.sliceObject(s)))) as unknown[]
  }
}
