// SPEC §12: the pure rules behind "a slow client costs a pod nothing it cannot
// afford": which client a request counts against for the per-client share (the TCP peer, or
// what a trusted proxy says in x-forwarded-for; IPv6 by /64), how many requests that share
// allows, when a body is too silent, too slow or too late, and how a body read before its pod
// connection is held (one copy, not one object per read). Table-driven.
import t from 'tap'
import { addressKey, clientKeyOf, clientShareLimit } from '../../lib/http-forward/client-address.ts'
import { TrustedProxies } from '../../lib/http-forward/trusted-proxies.ts'
import { BodyPace, type BodyLimits, type BodyVerdict } from '../../lib/http-forward/body-pace.ts'
import { BodyBuffer } from '../../lib/http-forward/body-buffer.ts'

t.test('an address counts as itself (IPv4) or by its /64 (IPv6); anything else is not an address', async (t) => {
  const cases: Array<[string, string | null]> = [
    ['192.0.2.7', '192.0.2.7'],
    ['::ffff:192.0.2.7', '192.0.2.7'],
    ['::FFFF:192.0.2.7', '192.0.2.7'],
    ['2001:db8:1:2:3:4:5:6', '2001:db8:1:2::/64'],
    ['2001:db8:1:2::9', '2001:db8:1:2::/64'],
    ['2001:0db8:0001:0002:ffff::1', '2001:db8:1:2::/64'],
    ['2001:db8::1', '2001:db8:0:0::/64'],
    ['1:2::3:4:5:6:7', '1:2:0:3::/64'],
    ['::1', '0:0:0:0::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
    ['64:ff9b::192.0.2.1', '64:ff9b:0:0::/64'],
    ['1::2:3:4:5:1.2.3.4', '1:0:2:3::/64'],
    ['unknown', null],
    ['', null],
    ['192.0.2.7:8080', null],
  ]
  for (const [address, key] of cases) t.equal(addressKey(address), key, address)
})

t.test('the client is the TCP peer unless the peer is a trusted proxy; then x-forwarded-for, right to left', async (t) => {
  const trusted = new TrustedProxies(['10.0.0.0/8'])
  const none = new TrustedProxies([])
  const cases: Array<[string, string | undefined, string | string[] | undefined, TrustedProxies, string]> = [
    ['a client straight to the router', '198.51.100.9', undefined, trusted, '198.51.100.9'],
    ['an untrusted peer cannot claim another address', '198.51.100.9', '203.0.113.5', trusted, '198.51.100.9'],
    ['without trusted proxies, x-forwarded-for is never read', '10.1.2.3', '203.0.113.5', none, '10.1.2.3'],
    ['a Gateway\'s client', '10.1.2.3', '203.0.113.5', trusted, '203.0.113.5'],
    ['the rightmost untrusted entry: what the Gateway saw, not what the client wrote', '10.1.2.3', '6.6.6.6, 203.0.113.5', trusted, '203.0.113.5'],
    ['through two trusted proxies', '10.1.2.3', '203.0.113.5, 10.9.9.9', trusted, '203.0.113.5'],
    ['repeated fields read as one list', '10.1.2.3', ['6.6.6.6', '203.0.113.5, 10.9.9.9'], trusted, '203.0.113.5'],
    ['an entry with a port', '10.1.2.3', '203.0.113.5:4711', trusted, '203.0.113.5'],
    ['a bracketed IPv6 entry with a port, by its /64', '10.1.2.3', '[2001:db8:1:2::7]:4711', trusted, '2001:db8:1:2::/64'],
    ['a trusted proxy that sends none counts as one client', '10.1.2.3', undefined, trusted, '10.1.2.3'],
    ['a garbage entry ends the walk at the last trusted hop', '10.1.2.3', '203.0.113.5, unknown', trusted, '10.1.2.3'],
    ['behind a trusted hop, garbage further left is not read', '10.1.2.3', 'garbage, 203.0.113.5', trusted, '203.0.113.5'],
    ['an IPv4-mapped peer', '::ffff:198.51.100.9', undefined, trusted, '198.51.100.9'],
    ['an IPv6 peer, by its /64', '2001:db8:5:6::1', undefined, trusted, '2001:db8:5:6::/64'],
  ]
  for (const [name, peer, xff, proxies, key] of cases) t.equal(clientKeyOf(peer, xff, proxies), key, name)
})

t.test('a share of a pod\'s connections is at least one request; 0 percent is no limit', async (t) => {
  const cases: Array<[number, number, number]> = [
    [1024, 25, 256],
    [1024, 100, 1024],
    [16, 25, 4],
    [3, 25, 1],
    [1, 1, 1],
    [1024, 0, 0],
  ]
  for (const [connections, percent, limit] of cases) t.equal(clientShareLimit(connections, percent), limit, `${percent}% of ${connections}`)
})

const LIMITS: BodyLimits = { idleTimeoutMs: 10_000, minBytesPerSecond: 100, rateWindowMs: 1000, deadlineMs: 5000 }

/** Events on one body, from t=0: bytes received, or a check (held or not); the verdicts of the checks. */
type Step = readonly ['bytes', number, number] | readonly ['check', number, boolean]

function run (steps: readonly Step[], limits: BodyLimits = LIMITS): Array<BodyVerdict | null> {
  const pace = new BodyPace(0, limits)
  const verdicts: Array<BodyVerdict | null> = []
  for (const step of steps) {
    if (step[0] === 'bytes') pace.received(step[2], step[1])
    else verdicts.push(pace.check(step[1], step[2], limits))
  }
  return verdicts
}

t.test('a body is judged by its rate over each window, its silence, and its deadline', async (t) => {
  const cases: Array<[string, readonly Step[], Array<BodyVerdict | null>, BodyLimits?]> = [
    ['keeping the rate passes each window', [['bytes', 400, 120], ['check', 1000, false], ['bytes', 1500, 150], ['check', 2000, false]], [null, null]],
    ['a window below the rate fails', [['bytes', 400, 120], ['check', 1000, false], ['bytes', 1500, 50], ['check', 2000, false]], [null, 'body_rate_too_low']],
    ['the rate is averaged over the window, not per read', [['bytes', 950, 100], ['check', 1000, false]], [null]],
    ['a window is judged only once it is over', [['check', 500, false], ['check', 999, false], ['check', 1000, false]], [null, null, 'body_rate_too_low']],
    ['one byte every two seconds', [['bytes', 100, 1], ['check', 1000, false]], ['body_rate_too_low']],
    ['no minimum rate: slow but alive passes', [['bytes', 100, 1], ['check', 1000, false], ['bytes', 1900, 1], ['check', 2000, false]], [null, null], { ...LIMITS, minBytesPerSecond: 0 }],
    ['silence for the idle timeout', [['check', 10_000, false]], ['request_timeout'], { ...LIMITS, minBytesPerSecond: 0, deadlineMs: 0 }],
    ['the deadline, even at a good rate', [['bytes', 900, 200], ['check', 1000, false], ['bytes', 4900, 1000], ['check', 5000, false]], [null, 'body_deadline_exceeded']],
    ['no deadline', [['bytes', 900, 200], ['check', 1000, false], ['bytes', 5900, 1000], ['check', 6000, false]], [null, null], { ...LIMITS, deadlineMs: 0 }],
    ['time the router holds the body back restarts the window and the idle clock', [['check', 1000, true], ['check', 1500, true], ['bytes', 2400, 100], ['check', 2500, false]], [null, null, null]],
    ['and moves the deadline later', [['bytes', 900, 200], ['check', 1000, false], ['check', 4000, true], ['bytes', 4900, 1000], ['check', 5000, false], ['bytes', 7900, 1000], ['check', 8000, false]], [null, null, null, 'body_deadline_exceeded']],
  ]
  for (const [name, steps, verdicts, limits] of cases) t.same(run(steps, limits), verdicts, name)
})

t.test('a body read a byte at a time is held as one copy no larger than the limit plus the last read', async (t) => {
  const body = new BodyBuffer()
  const text = 'a body sent one byte per read'
  for (const c of text) body.append(Buffer.from(c), 64)
  t.equal(body.bytes().toString(), text)
  t.ok(body.bytes().buffer.byteLength <= 64, `one backing store within the limit, not one per read: ${body.bytes().buffer.byteLength} bytes`)
  const big = new BodyBuffer()
  for (let i = 0; i < 100; i++) big.append(Buffer.alloc(10, i), 64)
  t.equal(big.length, 1000, 'past the limit (the caller stops reading there) it still holds every byte')
  t.same([...big.bytes().subarray(0, 30)], [...Buffer.alloc(10, 0), ...Buffer.alloc(10, 1), ...Buffer.alloc(10, 2)], 'in order')
})

t.test('a body that arrives in one read is kept as it came, without a copy', async (t) => {
  const body = new BodyBuffer()
  const chunk = Buffer.from('{"model":"m","messages":[]}')
  body.append(chunk, 65536)
  t.equal(body.bytes(), chunk)
  body.append(Buffer.from('!'), 65536)
  t.equal(body.bytes().toString(), chunk.toString() + '!', 'a second read copies both')
})
