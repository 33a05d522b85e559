// SPEC §3 rules 1–4: what one EndpointSlice says about its pods. Table-driven over the
// JSON shapes the API server sends, including the malformed ones.
import t from 'tap'
import { parseEndpointSlice, identityOf, isReady, isServing, isTerminating, type ParsedSlice } from '../../lib/discovery/endpoint-slice.ts'
import type { PodEndpoint, PodTarget } from '../../lib/discovery/types.ts'

const PORTS = { grpc: 'grpc', quic: 'quic', http: 'http' }
const STD_PORTS = [
  { name: 'grpc', port: 50051, protocol: 'TCP' },
  { name: 'quic', port: 50052, protocol: 'UDP' },
  { name: 'http', port: 8000, protocol: 'TCP' },
]

function slice (endpoints: unknown[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: 'stargate-headless-abcde', namespace: 'stargate', resourceVersion: '7' },
    addressType: 'IPv4',
    ports: STD_PORTS,
    endpoints,
    ...extra,
  }
}

function podEndpoint (name: string, address: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    addresses: [address],
    conditions: { ready: true, serving: true, terminating: false },
    targetRef: { kind: 'Pod', name, namespace: 'stargate', uid: `uid-${name}` },
    ...extra,
  }
}

function target (identity: string, address: string, extra: Partial<PodTarget> = {}): PodTarget {
  return {
    identity,
    namespace: 'stargate',
    address,
    host: address.includes(':') ? `[${address}]` : address,
    grpcPort: 50051,
    quicPort: 50052,
    httpPort: 8000,
    nodeName: null,
    zone: null,
    serving: true,
    ...extra,
  }
}

/** The observation of a ready (target) endpoint. */
function ready (identity: string, address: string, extra: Partial<PodTarget> = {}): PodEndpoint {
  return { target: target(identity, address, extra), ready: true }
}

// The upstream router dropped the hostname fallback; so do we.
t.test('rule 1: the identity is the name of a Pod targetRef only, else the endpoint is skipped', async (t) => {
  const cases: Array<[string, Record<string, unknown>, string | null]> = [
    ['Pod targetRef', { targetRef: { kind: 'Pod', name: 'stargate-0' } }, 'stargate-0'],
    ['targetRef without kind (a Pod, as the Rust router reads it)', { targetRef: { name: 'stargate-7d9f8b6c4-x2x7q' } }, 'stargate-7d9f8b6c4-x2x7q'],
    ['targetRef with null kind', { targetRef: { kind: null, name: 'stargate-1' } }, 'stargate-1'],
    ['targetRef with empty kind (not Pod)', { targetRef: { kind: '', name: 'stargate-1' } }, null],
    ['Pod targetRef wins over hostname', { targetRef: { kind: 'Pod', name: 'pod-a' }, hostname: 'host-a' }, 'pod-a'],
    ['non-Pod targetRef with a hostname', { targetRef: { kind: 'Node', name: 'node-1' }, hostname: 'stargate-2' }, null],
    ['non-Pod targetRef without hostname', { targetRef: { kind: 'Node', name: 'node-1' } }, null],
    ['Pod targetRef without a name, with a hostname', { targetRef: { kind: 'Pod' }, hostname: 'stargate-3' }, null],
    ['Pod targetRef with an empty name, with a hostname', { targetRef: { kind: 'Pod', name: '' }, hostname: 'stargate-3' }, null],
    ['hostname only', { hostname: 'stargate-4' }, null],
    ['empty hostname only', { hostname: '' }, null],
    ['targetRef that is not an object', { targetRef: 'stargate-5', hostname: 'stargate-5h' }, null],
    ['neither', {}, null],
    ['an IP address only', { addresses: ['10.1.2.3'] }, null],
    ['a dashed-IP pod name is kept because it is the literal pod name', { targetRef: { kind: 'Pod', name: '10-1-2-3' } }, '10-1-2-3'],
  ]
  for (const [why, endpoint, want] of cases) t.equal(identityOf({ addresses: ['10.1.2.3'], ...endpoint }), want, why)
})

t.test('rule 1: an endpoint with only an IP address is skipped as no_identity, never named after the IP', async (t) => {
  const parsed = parseEndpointSlice(slice([
    { addresses: ['10.1.2.3'], conditions: { ready: true } },
    podEndpoint('stargate-0', '10.1.2.4'),
  ]), PORTS)
  t.strictSame(parsed, { observations: [{ identity: 'stargate-0', target: ready('stargate-0', '10.1.2.4') }], skipped: ['no_identity'] })
  for (const o of parsed.observations) t.notMatch(o.identity, /^\d+-\d+-\d+-\d+$/)
})

// Upstream (stargate v0.14.2, NVIDIA/nvcf#1271/#1272, router fix 148daaf6) takes
// `ready` and not `terminating` whatever `serving` says, so that a warming Stargate behind a
// publishNotReadyAddresses Service (ready=true, serving=false) gets its Pylons. Requiring
// `serving` dropped every warming Stargate: it turned ready with no Pylon registered.
t.test('rule 2: a target is ready (absent = true) and not terminating (absent = false), whatever serving says', async (t) => {
  // [ready, serving, terminating] -> [isReady, isServing, isTerminating]; undefined = field absent.
  type B = boolean | undefined
  const cases: Array<[B, B, B, boolean, boolean, boolean]> = [
    [undefined, undefined, undefined, true, true, false],
    [undefined, undefined, false, true, true, false],
    [undefined, undefined, true, false, true, true],
    [undefined, true, undefined, true, true, false],
    [undefined, true, false, true, true, false],
    [undefined, true, true, false, true, true],
    [undefined, false, undefined, true, false, false],
    [undefined, false, false, true, false, false],
    [undefined, false, true, false, false, true],
    [true, undefined, undefined, true, true, false],
    [true, undefined, false, true, true, false],
    [true, undefined, true, false, true, true],
    [true, true, undefined, true, true, false],
    [true, true, false, true, true, false],
    [true, true, true, false, true, true],
    // A warming Stargate behind a publishNotReadyAddresses Service: a target, not serving.
    [true, false, undefined, true, false, false],
    [true, false, false, true, false, false],
    // publishNotReadyAddresses keeps ready=true while a pod terminates: still not a target.
    [true, false, true, false, false, true],
    [false, undefined, undefined, false, false, false],
    [false, undefined, false, false, false, false],
    [false, undefined, true, false, false, true],
    [false, true, undefined, false, true, false],
    [false, true, false, false, true, false],
    [false, true, true, false, true, true],
    [false, false, undefined, false, false, false],
    [false, false, false, false, false, false],
    [false, false, true, false, false, true],
  ]
  for (const [ready, serving, terminating, wantReady, wantServing, wantTerminating] of cases) {
    const conditions: Record<string, boolean> = {}
    if (ready !== undefined) conditions.ready = ready
    if (serving !== undefined) conditions.serving = serving
    if (terminating !== undefined) conditions.terminating = terminating
    const why = `ready=${ready} serving=${serving} terminating=${terminating}`
    t.strictSame([isReady({ conditions }), isServing({ conditions }), isTerminating({ conditions })], [wantReady, wantServing, wantTerminating], why)
  }
  t.strictSame([isReady({}), isServing({}), isTerminating({})], [true, true, false], 'no conditions object at all')
  t.strictSame([isReady({ conditions: null }), isServing({ conditions: null }), isTerminating({ conditions: null })], [true, true, false], 'conditions null')
  // Hostile shapes: only the boolean true or false counts.
  t.strictSame([isReady({ conditions: { ready: 'false', terminating: 'true' } }), isTerminating({ conditions: { terminating: 1 } })], [true, false], 'non-boolean conditions read as absent')
})

t.test('rule 2: each endpoint is a target, present but not ready, or terminating (an observation without one)', async (t) => {
  const parsed = parseEndpointSlice(slice([
    podEndpoint('stargate-0', '10.0.0.1', { conditions: { ready: false, serving: true, terminating: true } }),
    podEndpoint('stargate-1', '10.0.0.2', { conditions: {} }),
    podEndpoint('stargate-2', '10.0.0.3', { conditions: { ready: true, serving: false, terminating: false } }),
    podEndpoint('stargate-3', '10.0.0.4', { conditions: { ready: false, serving: false, terminating: false } }),
    podEndpoint('stargate-4', '10.0.0.5', { conditions: { ready: true, serving: false, terminating: true } }),
  ]), PORTS)
  t.strictSame(parsed, {
    observations: [
      { identity: 'stargate-0', target: null },
      { identity: 'stargate-1', target: ready('stargate-1', '10.0.0.2') },
      { identity: 'stargate-2', target: ready('stargate-2', '10.0.0.3', { serving: false }) },
      { identity: 'stargate-3', target: { target: target('stargate-3', '10.0.0.4', { serving: false }), ready: false } },
      { identity: 'stargate-4', target: null },
    ],
    skipped: [],
  })
})

t.test('rule 3: ports are found by exact name and protocol', async (t) => {
  const one = [podEndpoint('stargate-0', '10.0.0.1')]
  const cases: Array<[string, unknown, ParsedSlice]> = [
    ['all three ports', STD_PORTS, { observations: [{ identity: 'stargate-0', target: ready('stargate-0', '10.0.0.1') }], skipped: [] }],
    ['absent protocol means TCP', [{ name: 'grpc', port: 1 }, { name: 'quic', port: 2, protocol: 'UDP' }, { name: 'http', port: 3 }],
      { observations: [{ identity: 'stargate-0', target: ready('stargate-0', '10.0.0.1', { grpcPort: 1, quicPort: 2, httpPort: 3 }) }], skipped: [] }],
    ['http is optional', STD_PORTS.slice(0, 2),
      { observations: [{ identity: 'stargate-0', target: ready('stargate-0', '10.0.0.1', { httpPort: null }) }], skipped: [] }],
    ['http on UDP does not count', [...STD_PORTS.slice(0, 2), { name: 'http', port: 8000, protocol: 'UDP' }],
      { observations: [{ identity: 'stargate-0', target: ready('stargate-0', '10.0.0.1', { httpPort: null }) }], skipped: [] }],
    ['an invalid http port is ignored', [...STD_PORTS.slice(0, 2), { name: 'http', port: 0 }],
      { observations: [{ identity: 'stargate-0', target: ready('stargate-0', '10.0.0.1', { httpPort: null }) }], skipped: [] }],
    ['names are exact (case matters)', [{ name: 'GRPC', port: 1 }, STD_PORTS[1], STD_PORTS[2]], { observations: [], skipped: ['missing_grpc_port'] }],
    ['grpc on UDP does not count', [{ name: 'grpc', port: 50051, protocol: 'UDP' }, STD_PORTS[1]], { observations: [], skipped: ['missing_grpc_port'] }],
    ['grpc on SCTP does not count', [{ name: 'grpc', port: 50051, protocol: 'SCTP' }, STD_PORTS[1]], { observations: [], skipped: ['missing_grpc_port'] }],
    ['quic must be UDP', [STD_PORTS[0], { name: 'quic', port: 50052, protocol: 'TCP' }], { observations: [], skipped: ['missing_quic_port'] }],
    ['quic without protocol is TCP, so missing', [STD_PORTS[0], { name: 'quic', port: 50052 }], { observations: [], skipped: ['missing_quic_port'] }],
    ['a UDP and a TCP port both named grpc: the TCP one counts',
      [{ name: 'grpc', port: 9, protocol: 'UDP' }, { name: 'grpc', port: 50051, protocol: 'TCP' }, STD_PORTS[1]],
      { observations: [{ identity: 'stargate-0', target: ready('stargate-0', '10.0.0.1', { httpPort: null }) }], skipped: [] }],
    ['no ports at all', [], { observations: [], skipped: ['missing_grpc_port'] }],
    ['ports field absent', undefined, { observations: [], skipped: ['missing_grpc_port'] }],
    ['grpc port 0', [{ name: 'grpc', port: 0 }, STD_PORTS[1]], { observations: [], skipped: ['invalid_port'] }],
    ['grpc port 70000', [{ name: 'grpc', port: 70000 }, STD_PORTS[1]], { observations: [], skipped: ['invalid_port'] }],
    ['grpc port missing its number', [{ name: 'grpc', protocol: 'TCP' }, STD_PORTS[1]], { observations: [], skipped: ['invalid_port'] }],
    ['grpc port as a string', [{ name: 'grpc', port: '50051' }, STD_PORTS[1]], { observations: [], skipped: ['invalid_port'] }],
    ['quic port 0', [STD_PORTS[0], { name: 'quic', port: 0, protocol: 'UDP' }], { observations: [], skipped: ['invalid_port'] }],
    ['quic port 65536', [STD_PORTS[0], { name: 'quic', port: 65536, protocol: 'UDP' }], { observations: [], skipped: ['invalid_port'] }],
    ['port 65535 is valid', [{ name: 'grpc', port: 65535 }, { name: 'quic', port: 1, protocol: 'UDP' }],
      { observations: [{ identity: 'stargate-0', target: ready('stargate-0', '10.0.0.1', { grpcPort: 65535, quicPort: 1, httpPort: null }) }], skipped: [] }],
    ['only grpc', [STD_PORTS[0]], { observations: [], skipped: ['missing_quic_port'] }],
    ['only quic', [STD_PORTS[1]], { observations: [], skipped: ['missing_grpc_port'] }],
  ]
  for (const [why, ports, want] of cases) {
    const raw = slice(one)
    if (ports === undefined) delete raw.ports
    else raw.ports = ports
    t.strictSame(parseEndpointSlice(raw, PORTS), want, why)
  }
})

t.test('rule 3: a slice without grpc or quic contributes no targets for any of its endpoints', async (t) => {
  const endpoints = [podEndpoint('stargate-0', '10.0.0.1'), podEndpoint('stargate-1', '10.0.0.2'), podEndpoint('stargate-2', '10.0.0.3')]
  t.strictSame(parseEndpointSlice(slice(endpoints, { ports: [STD_PORTS[0]] }), PORTS), { observations: [], skipped: ['missing_quic_port'] })
  t.strictSame(parseEndpointSlice(slice(endpoints, { ports: [STD_PORTS[1]] }), PORTS), { observations: [], skipped: ['missing_grpc_port'] })
})

t.test('rule 3: port names come from configuration', async (t) => {
  const raw = slice([podEndpoint('stargate-0', '10.0.0.1')], {
    ports: [{ name: 'control', port: 7000 }, { name: 'tunnel', port: 7001, protocol: 'UDP' }, { name: 'web', port: 7002 }],
  })
  t.strictSame(parseEndpointSlice(raw, { grpc: 'control', quic: 'tunnel', http: 'web' }).observations, [
    { identity: 'stargate-0', target: ready('stargate-0', '10.0.0.1', { grpcPort: 7000, quicPort: 7001, httpPort: 7002 }) },
  ])
  t.strictSame(parseEndpointSlice(raw, PORTS), { observations: [], skipped: ['missing_grpc_port'] })
})

t.test('rule 4: the first address is used and IPv6 is bracketed in host', async (t) => {
  const v4 = parseEndpointSlice(slice([podEndpoint('stargate-0', '10.0.0.1', { addresses: ['10.0.0.1', '10.0.0.9'] })]), PORTS)
  t.strictSame(v4.observations, [{ identity: 'stargate-0', target: ready('stargate-0', '10.0.0.1') }])
  t.equal(v4.observations[0]?.target?.target.host, '10.0.0.1')

  const v6 = parseEndpointSlice(slice([podEndpoint('stargate-0', 'fd00::1', { addresses: ['fd00::1', 'fd00::2'] })], { addressType: 'IPv6' }), PORTS)
  t.strictSame(v6.observations, [{ identity: 'stargate-0', target: ready('stargate-0', 'fd00::1') }])
  t.equal(v6.observations[0]?.target?.target.address, 'fd00::1')
  t.equal(v6.observations[0]?.target?.target.host, '[fd00::1]')
})

t.test('rule 4: endpoints without a usable address of the slice family are skipped as no_address', async (t) => {
  const cases: Array<[string, 'IPv4' | 'IPv6', unknown]> = [
    ['IPv6 address in an IPv4 slice', 'IPv4', ['fd00::1']],
    ['IPv4 address in an IPv6 slice', 'IPv6', ['10.0.0.1']],
    ['empty address list', 'IPv4', []],
    ['addresses absent', 'IPv4', undefined],
    ['a hostname instead of an IP', 'IPv4', ['stargate-0.example']],
    ['a number', 'IPv4', [167772161]],
    ['first address wrong family, second right: the first decides', 'IPv4', ['fd00::1', '10.0.0.1']],
    ['an IPv6 address with a zone id (an interface of the reader, not a pod)', 'IPv6', ['fe80::1%eth0']],
  ]
  for (const [why, addressType, addresses] of cases) {
    const endpoint = podEndpoint('stargate-0', '10.0.0.1')
    if (addresses === undefined) delete endpoint.addresses
    else endpoint.addresses = addresses
    t.strictSame(parseEndpointSlice(slice([endpoint, podEndpoint('stargate-1', addressType === 'IPv4' ? '10.0.0.2' : 'fd00::2')], { addressType }), PORTS), {
      observations: [{ identity: 'stargate-1', target: ready('stargate-1', addressType === 'IPv4' ? '10.0.0.2' : 'fd00::2') }],
      skipped: ['no_address'],
    }, why)
  }
})

t.test('slices that cannot hold targets are skipped with a bounded reason', async (t) => {
  const cases: Array<[string, unknown, ParsedSlice]> = [
    ['null', null, { observations: [], skipped: ['malformed_slice'] }],
    ['an array', [slice([podEndpoint('stargate-0', '10.0.0.1')])], { observations: [], skipped: ['malformed_slice'] }],
    ['a string', 'EndpointSlice', { observations: [], skipped: ['malformed_slice'] }],
    ['no metadata', { ...slice([podEndpoint('stargate-0', '10.0.0.1')]), metadata: undefined }, { observations: [], skipped: ['malformed_slice'] }],
    ['metadata not an object', { ...slice([podEndpoint('stargate-0', '10.0.0.1')]), metadata: 'x' }, { observations: [], skipped: ['malformed_slice'] }],
    ['addressType FQDN', slice([{ addresses: ['stargate-0.example'], targetRef: { kind: 'Pod', name: 'stargate-0' } }], { addressType: 'FQDN' }),
      { observations: [], skipped: ['unsupported_address_type'] }],
    ['addressType absent', { ...slice([podEndpoint('stargate-0', '10.0.0.1')]), addressType: undefined }, { observations: [], skipped: ['unsupported_address_type'] }],
    ['no endpoints', slice([]), { observations: [], skipped: [] }],
    ['endpoints null', slice([], { endpoints: null }), { observations: [], skipped: [] }],
    ['no endpoints and no ports is not a port problem', slice([], { ports: [] }), { observations: [], skipped: [] }],
    ['an endpoint that is not an object', slice([null, 'x', podEndpoint('stargate-0', '10.0.0.1')]),
      { observations: [{ identity: 'stargate-0', target: ready('stargate-0', '10.0.0.1') }], skipped: ['malformed_slice', 'malformed_slice'] }],
  ]
  for (const [why, raw, want] of cases) t.strictSame(parseEndpointSlice(raw, PORTS), want, why)
})

t.test('a mixed slice reports each skipped endpoint and keeps the good ones in order', async (t) => {
  const parsed = parseEndpointSlice(slice([
    podEndpoint('stargate-0', '10.0.0.1', { nodeName: 'node-a', zone: 'zone-1' }),
    { addresses: ['10.0.0.2'], conditions: { ready: true } },
    podEndpoint('stargate-2', 'fd00::3'),
    { addresses: ['10.0.0.4'], targetRef: { kind: 'Node', name: 'n' }, hostname: 'stargate-4' },
    podEndpoint('stargate-5', '10.0.0.5', { conditions: { ready: true, terminating: true } }),
  ]), PORTS)
  t.strictSame(parsed, {
    observations: [
      { identity: 'stargate-0', target: ready('stargate-0', '10.0.0.1', { nodeName: 'node-a', zone: 'zone-1' }) },
      { identity: 'stargate-5', target: null },
    ],
    skipped: ['no_identity', 'no_address', 'no_identity'],
  })
})

t.test('the namespace of a target is the slice namespace', async (t) => {
  const raw = slice([podEndpoint('stargate-0', '10.0.0.1')], { metadata: { name: 's', namespace: 'other' } })
  t.equal(parseEndpointSlice(raw, PORTS).observations[0]?.target?.target.namespace, 'other')
  const noNamespace = slice([podEndpoint('stargate-0', '10.0.0.1')], { metadata: { name: 's' } })
  t.equal(parseEndpointSlice(noNamespace, PORTS).observations[0]?.target?.target.namespace, '')
})
