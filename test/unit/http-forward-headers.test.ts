// SPEC §6: which forwarding fields reach a pod (trusted proxies or not), requests naming two
// hosts or a host that is no valid host[:port] (RFC 9110 §7.2), and the CIDR syntax of --trusted-proxy-cidrs. Pure rules, table-driven.
import t from 'tap'
import { upstreamRequestHeaders, type ForwardedFor } from '../../lib/http-forward/headers.ts'
import { resolveRequestTarget } from '../../lib/http-forward/request-target.ts'
import { TrustedProxies, parseCidr } from '../../lib/http-forward/trusted-proxies.ts'

const base: ForwardedFor = { clientAddress: '192.0.2.7', proto: 'http', host: 'llm.example', requestId: 'req-1', trusted: false }

function pairs (list: readonly string[]): Array<[string, string]> {
  const out: Array<[string, string]> = []
  for (let i = 0; i < list.length; i += 2) out.push([list[i] as string, list[i + 1] as string])
  return out
}

const CLAIMS = [
  'Host', 'llm.example',
  'X-Forwarded-For', '6.6.6.6',
  'x-forwarded-for', '7.7.7.7',
  'Forwarded', 'for=6.6.6.6',
  'X-Real-IP', '6.6.6.6',
  'X-Forwarded-Proto', 'https',
  'X-Forwarded-Host', 'evil.example',
  'X-Request-Id', 'client-chosen',
  'Expect', '100-continue',
  'Accept', 'text/event-stream',
]

t.test('from an untrusted peer the client\'s forwarding claims are replaced by the router\'s', async (t) => {
  t.strictSame(pairs(upstreamRequestHeaders(CLAIMS, base)), [
    ['Host', 'llm.example'],
    ['Accept', 'text/event-stream'],
    ['x-forwarded-for', '192.0.2.7'],
    ['x-forwarded-proto', 'http'],
    ['x-forwarded-host', 'llm.example'],
    ['x-request-id', 'req-1'],
  ])
})

t.test('from a trusted proxy x-forwarded-for is appended to and its other fields stand', async (t) => {
  t.strictSame(pairs(upstreamRequestHeaders(CLAIMS, { ...base, trusted: true })), [
    ['Host', 'llm.example'],
    ['Forwarded', 'for=6.6.6.6'],
    ['X-Real-IP', '6.6.6.6'],
    ['Accept', 'text/event-stream'],
    ['x-forwarded-for', '6.6.6.6, 7.7.7.7, 192.0.2.7'],
    ['x-forwarded-proto', 'https'],
    ['x-forwarded-host', 'evil.example'],
    ['x-request-id', 'req-1'],
  ])
})

t.test('a trusted proxy that sets no forwarding fields gets the router\'s', async (t) => {
  t.strictSame(pairs(upstreamRequestHeaders(['host', 'a.example'], { ...base, trusted: true })).slice(1), [
    ['x-forwarded-for', '192.0.2.7'],
    ['x-forwarded-proto', 'http'],
    ['x-forwarded-host', 'llm.example'],
    ['x-request-id', 'req-1'],
  ])
})

t.test('request targets: which host a request names, or that it names two', async (t) => {
  const cases: Array<[string, boolean, string, string | undefined, string | undefined, ReturnType<typeof resolveRequestTarget>]> = [
    ['origin-form with Host', false, '/v1/x', 'a.example', undefined, { ok: true, host: 'a.example', path: '/v1/x' }],
    ['origin-form without Host', false, '/v1/x', undefined, undefined, { ok: true, host: undefined, path: '/v1/x' }],
    ['absolute-form agreeing with Host', false, 'http://A.example/v1/x?q=1', 'a.example', undefined, { ok: true, host: 'A.example', path: '/v1/x?q=1' }],
    ['absolute-form with a port agreeing with Host', false, 'https://a.example:8443/', 'a.example:8443', undefined, { ok: true, host: 'a.example:8443', path: '/' }],
    ['absolute-form without a path', false, 'http://a.example', 'a.example', undefined, { ok: true, host: 'a.example', path: '/' }],
    ['absolute-form with only a query', false, 'http://a.example?q', 'a.example', undefined, { ok: true, host: 'a.example', path: '/?q' }],
    ['absolute-form naming another host', false, 'http://b.example/v1/x', 'a.example', undefined, { ok: false, code: 'host_mismatch' }],
    ['absolute-form with an empty authority (RFC 9110 §4.2.1)', false, 'http:///v1/x', 'a.example', undefined, { ok: false, code: 'bad_request' }],
    ['absolute-form with userinfo (RFC 9110 §4.2.4)', false, 'http://user@a.example/v1/x', 'a.example', undefined, { ok: false, code: 'bad_request' }],
    ['absolute-form with an unbalanced bracket', false, 'http://[::1/v1/x', undefined, undefined, { ok: false, code: 'bad_request' }],
    ['Host with an unbalanced bracket', false, '/v1/x', '[::1', undefined, { ok: false, code: 'bad_request' }],
    ['Host that is a lone bracket', false, '/v1/x', '[', undefined, { ok: false, code: 'bad_request' }],
    ['Host with a port that is not a number', false, '/v1/x', 'a.example:http', undefined, { ok: false, code: 'bad_request' }],
    ['Host that is an IPv6 literal with a port', false, '/v1/x', '[::1]:8080', undefined, { ok: true, host: '[::1]:8080', path: '/v1/x' }],
    ['h2 :authority only', true, '/v1/x', undefined, 'a.example', { ok: true, host: 'a.example', path: '/v1/x' }],
    ['h2 :authority and the same host, other case', true, '/v1/x', 'A.EXAMPLE', 'a.example', { ok: true, host: 'a.example', path: '/v1/x' }],
    ['h2 host disagreeing with :authority', true, '/v1/x', 'b.example', 'a.example', { ok: false, code: 'host_mismatch' }],
    ['h2 :authority with an unbalanced bracket', true, '/v1/x', undefined, '[1.2.3.4', { ok: false, code: 'bad_request' }],
    ['h2 host only, with an unbalanced bracket', true, '/v1/x', '[::1', undefined, { ok: false, code: 'bad_request' }],
    ['h2 host only', true, '/v1/x', 'a.example', undefined, { ok: true, host: 'a.example', path: '/v1/x' }],
    ['origin-form with a fragment (RFC 9112 §3.2)', false, '/v1/x#top', 'a.example', undefined, { ok: false, code: 'bad_request' }],
    ['origin-form with a lone #', false, '/v1/x?q=#', 'a.example', undefined, { ok: false, code: 'bad_request' }],
    ['absolute-form with a fragment', false, 'http://a.example/v1/x#top', 'a.example', undefined, { ok: false, code: 'bad_request' }],
    ['h2 :path with a fragment', true, '/v1/x#top', undefined, 'a.example', { ok: false, code: 'bad_request' }],
    ['a percent-encoded # is no fragment', false, '/v1/x%23top', 'a.example', undefined, { ok: true, host: 'a.example', path: '/v1/x%23top' }],
  ]
  for (const [why, h2, url, host, authority, want] of cases) t.strictSame(resolveRequestTarget(h2, url, host, authority), want, why)
})

t.test('--trusted-proxy-cidrs syntax: blocks and bare addresses, v4 and v6', async (t) => {
  t.strictSame(parseCidr('10.0.0.0/8'), { ok: true, address: '10.0.0.0', prefix: 8, family: 'ipv4' })
  t.strictSame(parseCidr('192.0.2.1'), { ok: true, address: '192.0.2.1', prefix: 32, family: 'ipv4' })
  t.strictSame(parseCidr('fd00::/8'), { ok: true, address: 'fd00::', prefix: 8, family: 'ipv6' })
  t.strictSame(parseCidr('10.0.0.0/33'), { ok: false, message: "'10.0.0.0/33' has a prefix length outside 0..32" })
  t.strictSame(parseCidr('10.0.0.0/'), { ok: false, message: "'10.0.0.0/' has a prefix length outside 0..32" })
  t.strictSame(parseCidr('gateway.local'), { ok: false, message: "'gateway.local' is not an IP address or CIDR block such as 10.0.0.0/8" })
})

t.test('trust is decided by the peer address, IPv4-mapped IPv6 included', async (t) => {
  const trusted = new TrustedProxies(['10.0.0.0/8', 'fd00::/8'])
  t.equal(trusted.trusts('10.1.2.3'), true)
  t.equal(trusted.trusts('::ffff:10.1.2.3'), true, 'a dual-stack listener reports IPv4 peers mapped')
  t.equal(trusted.trusts('fd00::1'), true)
  t.equal(trusted.trusts('11.0.0.1'), false)
  t.equal(trusted.trusts('fe80::1'), false)
  t.equal(trusted.trusts(undefined), false, 'a socket that already closed has no address')
  t.equal(new TrustedProxies([]).trusts('10.1.2.3'), false, 'default: nobody is trusted')
})
