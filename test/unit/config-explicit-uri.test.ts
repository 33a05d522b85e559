// SPEC §2: --grpc-pylon-dial-addr and --remote-stargate-url follow upstream's shared
// parser (parse_explicit_http_uri, NVIDIA/nvcf#1299, also what Pylons apply): trimmed, an
// explicit http:// or https:// authority and nothing after it but one `/`. The failure mode: a
// value the router accepted and wrote into every StargateInfo, such as `https://gw:443/pylon`
// or `https://gw:`, was refused by every Pylon (or dialled at a port it never meant).
import t from 'tap'
import { checkExplicitUri, describeUriProblem, type UriProblem } from '../../lib/config/explicit-uri.ts'

t.test('accepted: an explicit http(s) authority, trimmed, an optional port and one trailing /', async (t) => {
  const cases: Array<[string, string, 'http' | 'https']> = [
    // upstream's own accepted cases
    ['https://region-b.example.test:50071', 'https://region-b.example.test:50071', 'https'],
    ['http://127.0.0.1:50071', 'http://127.0.0.1:50071', 'http'],
    ['https://[::1]', 'https://[::1]', 'https'],
    ['https://[::1]:50071/', 'https://[::1]:50071/', 'https'],
    // trimmed, and used as trimmed
    ['  https://gw.example.com:443 \n', 'https://gw.example.com:443', 'https'],
    ['\thttp://gw.example.com', 'http://gw.example.com', 'http'],
    ['https://gw.example.com/', 'https://gw.example.com/', 'https'],
    ['HTTPS://gw.example.com', 'HTTPS://gw.example.com', 'https'],
    ['https://gw.example.com:1', 'https://gw.example.com:1', 'https'],
    ['https://gw.example.com:65535', 'https://gw.example.com:65535', 'https'],
  ]
  for (const [value, uri, scheme] of cases) t.strictSame(checkExplicitUri(value), { ok: true, scheme, uri }, JSON.stringify(value))
})

t.test('refused, each with its reason', async (t) => {
  const cases: Array<[string, UriProblem]> = [
    // upstream's own refused cases
    ['region-b.example.test:50071', 'no_scheme'],
    ['ftp://region-b.example.test:50071', 'scheme'],
    ['https://', 'no_host'],
    ['https://user@region-b.example.test:50071', 'userinfo'],
    ['https://region-b.example.test:50071/watch', 'path'],
    ['https://region-b.example.test:50071?region=b', 'query'],
    ['https://region-b.example.test:0', 'port'],
    ['https://[::1]:0', 'port'],
    ['https://region-b.example.test:', 'empty_port'],
    ['https://region-b.example.test:65536', 'port'],
    // and more
    ['', 'no_scheme'],
    ['   ', 'no_scheme'],
    ['https://gw.example.com#frag', 'fragment'],
    ['https://gw.example.com/#frag', 'fragment'],
    ['https://gw.example.com/?a=1#b', 'query'],
    ['https://gw.example.com//', 'path'],
    ['https://gw.example.com/v1/pylon', 'path'],
    ['https://[::1]:', 'empty_port'],
    ['https://gw.example.com:00000', 'port'],
    ['https://gw.example.com:-1', 'port'],
    ['https://gw.example.com:443x', 'port'],
    ['https://gw.example.com:9999999', 'port'],
    ['https://:443', 'no_host'],
    ['https://[]:443', 'no_host'],
    ['https://@gw.example.com', 'userinfo'],
    ['https://u:p@gw.example.com', 'userinfo'],
    ['grpc://gw.example.com', 'scheme'],
    ['https:/gw.example.com', 'no_scheme'],
    ['https://gw example.com', 'malformed'],
    ['https://gw.example.com\u0000', 'malformed'],
    ['https://[::1', 'malformed'],
  ]
  for (const [value, problem] of cases) t.strictSame(checkExplicitUri(value), { ok: false, problem }, JSON.stringify(value))
})

t.test('a problem is described without echoing user info, a query or a fragment', async (t) => {
  t.equal(describeUriProblem('https://gw.example.com?token=s3cret', 'query'), "got 'https://gw.example.com?…', which has a query: nothing may follow the host and port but one /")
  t.equal(describeUriProblem(' https://gw.example.com/#s3cret ', 'fragment'), "got 'https://gw.example.com/#…', which has a fragment: nothing may follow the host and port but one /")
  t.equal(describeUriProblem('https://u:s3cret@gw.example.com', 'userinfo'), 'got a URI with user info (user@ or user:password@), which is not allowed')
  t.equal(describeUriProblem('https://gw.example.com:', 'empty_port'), "got 'https://gw.example.com:', whose port is empty (a colon with no number after it)")
  t.equal(describeUriProblem('https://gw.example.com/pylon', 'path'), "got 'https://gw.example.com/pylon', which has a path: nothing may follow the host and port but one /")
})
