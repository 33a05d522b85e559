// SPEC §10 and §3 rule 2: what one EndpointSlice of the router's own Service says
// about peers. Table-driven over the pure rule (parsePeerSlice): ids from the Pod targetRef
// or the address, readiness, and the health port with its fallback.
import t from 'tap'
import { parsePeerSlice } from '../../lib/discovery/peers.ts'
import { endpointSlice, type EndpointSpec, type EndpointSliceSpec, type Json } from '../fixtures/endpoint-slices.ts'

const PORT = { name: 'health', fallback: 8080 }
const HEALTH = [{ name: 'http', protocol: 'TCP', port: 50071 }, { name: 'health', protocol: 'TCP', port: 9090 }]

function slice (endpoints: readonly EndpointSpec[], rest: Partial<EndpointSliceSpec> = {}): Json {
  return endpointSlice({ namespace: 'routers', service: 'stargate-router', name: 'stargate-router-x1', ports: HEALTH, ...rest, endpoints })
}

function peersOf (raw: unknown): Array<[string, string, number] | [string, null]> {
  return parsePeerSlice(raw, PORT).observations.map((o) => o.target === null ? [o.identity, null] : [o.identity, o.target.address, o.target.port])
}

t.test('a peer is namespace/pod-name from the Pod targetRef, at its address and the named health port', async (t) => {
  t.strictSame(peersOf(slice([{ pod: 'router-0', ip: '10.0.0.1' }, { pod: 'router-1', ip: '10.0.0.2' }])), [
    ['routers/router-0', '10.0.0.1', 9090],
    ['routers/router-1', '10.0.0.2', 9090],
  ])
})

t.test('an endpoint with no targetRef is a peer named namespace/<address>', async (t) => {
  t.strictSame(peersOf(slice([{ ip: '10.0.0.7' }])), [['routers/10.0.0.7', '10.0.0.7', 9090]])
  t.strictSame(peersOf(slice([{ ip: '10.0.0.8', hostname: 'router-h' }])), [['routers/10.0.0.8', '10.0.0.8', 9090]], 'a hostname is not a Pod name')
})

t.test('a targetRef that is not a Pod falls back to the address; an empty kind counts as a Pod', async (t) => {
  t.strictSame(peersOf(slice([{ pod: 'vm-1', ip: '10.0.0.9', targetRefKind: 'VirtualMachine' }])), [['routers/10.0.0.9', '10.0.0.9', 9090]])
  t.strictSame(peersOf(slice([{ pod: 'router-2', ip: '10.0.0.3', targetRefKind: null }])), [['routers/router-2', '10.0.0.3', 9090]])
})

// SPEC §10: peers use the target rule of §3 rule 2 (ready and not terminating, whatever serving says).
t.test('only ready, non-terminating endpoints are peers (absent ready means ready; serving does not count)', async (t) => {
  // [ready, serving, terminating, peer]; null = condition absent from the slice
  const cases: Array<[boolean | null, boolean | null, boolean | null, boolean]> = [
    [true, true, false, true],
    [null, null, null, true],
    [null, true, null, true],
    [false, false, false, false],
    [false, true, false, false],
    [null, false, null, true],
    [true, false, false, true], // a publishNotReadyAddresses Service's not-yet-ready pod
    [true, false, true, false], // ...and its terminating one
    [false, true, true, false], // draining: still serving, but terminating
    [null, true, true, false],
    [true, true, true, false],
  ]
  for (const [ready, serving, terminating, peer] of cases) {
    const got = peersOf(slice([{ pod: 'router-0', ip: '10.0.0.1', ready, serving, terminating }]))
    t.strictSame(got, [peer ? ['routers/router-0', '10.0.0.1', 9090] : ['routers/router-0', null]], `ready=${ready} serving=${serving} terminating=${terminating}`)
  }
})

t.test('a slice without the health port keeps its peers at the fallback port and says so', async (t) => {
  const cases: Array<[string, Json[] | null]> = [
    ['no ports at all', null],
    ['other ports only', [{ name: 'http', protocol: 'TCP', port: 50071 }]],
    ['the name on UDP', [{ name: 'health', protocol: 'UDP', port: 9090 }]],
    ['an invalid port number', [{ name: 'health', protocol: 'TCP', port: 0 }]],
    ['a port without a number', [{ name: 'health', protocol: 'TCP' }]],
  ]
  for (const [why, ports] of cases) {
    const parsed = parsePeerSlice(slice([{ pod: 'router-0', ip: '10.0.0.1' }], { ports }), PORT)
    t.strictSame(parsed.observations.map((o) => o.target?.port), [8080], why)
    t.equal(parsed.usedFallbackPort, true, `${why}: reported`)
    t.strictSame(parsed.skipped, [], `${why}: nothing skipped`)
  }
  t.equal(parsePeerSlice(slice([{ pod: 'router-0', ip: '10.0.0.1' }], { ports: [{ name: 'health', port: 9191 }] }), PORT).observations[0]?.target?.port, 9191, 'an absent protocol is TCP')
})

t.test('endpoints that cannot be reached are skipped with a reason, the rest of the slice still counts', async (t) => {
  const parsed = parsePeerSlice(slice([
    { pod: 'router-0' }, // no address
    { pod: 'router-1', ip: 'fd00::1' }, // wrong family for an IPv4 slice
    { pod: 'router-2', ip: '10.0.0.2' },
  ]), PORT)
  t.strictSame(parsed.skipped, ['no_address', 'no_address'])
  const zoned = parsePeerSlice(slice([{ pod: 'router-0', ip: 'fe80::1%eth0' }, { pod: 'router-1', ip: 'fd00::1' }], { addressType: 'IPv6' }), PORT)
  t.strictSame(zoned.skipped, ['no_address'], 'an IPv6 address with a zone id is no peer address')
  t.strictSame(zoned.observations.map((o) => o.identity), ['routers/router-1'])
  t.strictSame(parsed.observations.map((o) => o.identity), ['routers/router-2'])
})

t.test('IPv6 slices give IPv6 peers; FQDN slices and non-objects give none', async (t) => {
  t.strictSame(peersOf(slice([{ pod: 'router-0', ip: 'fd00::10' }], { addressType: 'IPv6' })), [['routers/router-0', 'fd00::10', 9090]])
  t.strictSame(parsePeerSlice(slice([{ pod: 'router-0', ip: 'router.example' }], { addressType: 'FQDN' }), PORT).skipped, ['unsupported_address_type'])
  for (const raw of [null, 'slice', [], { metadata: null }]) t.strictSame(parsePeerSlice(raw, PORT).skipped, ['malformed_slice'], JSON.stringify(raw))
})
