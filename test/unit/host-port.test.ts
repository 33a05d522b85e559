// The one host:port rule: the port colon is the last colon after any `]`; and which Host or
// :authority values HTTP allows (RFC 9110 §7.2, RFC 3986 §3.2).
import t from 'tap'
import { formatHost, isValidAuthority, splitHostPort } from '../../lib/host-port.ts'

t.test('host:port text splits at the last colon after any IPv6 bracket', async (t) => {
  const cases: Array<[string, string, string | null]> = [
    ['stargate-0.stargate.external:50071', 'stargate-0.stargate.external', '50071'],
    ['stargate-0.stargate.external', 'stargate-0.stargate.external', null],
    ['127.0.0.1:0', '127.0.0.1', '0'],
    ['[::1]:443', '[::1]', '443'],
    ['[::1]', '[::1]', null],
    ['[fe80::1%eth0]:80', '[fe80::1%eth0]', '80'],
    ['host:', 'host', ''],
    [':443', '', '443'],
    ['', '', null],
  ]
  for (const [text, host, port] of cases) t.strictSame(splitHostPort(text), { host, port }, text)
})

t.test('an IPv6 address is bracketed for host:port text, others are not', async (t) => {
  t.equal(formatHost('fd00::10'), '[fd00::10]')
  t.equal(formatHost('10.0.0.1'), '10.0.0.1')
})

t.test('a Host or :authority is valid as uri-host [":" port], brackets balanced, no userinfo', async (t) => {
  const valid = [
    'stargate-0.stargate.external', 'stargate-0.stargate.external:8080', 'LLM.Example.', '10.0.0.1:80', '[::1]', '[::1]:443',
    '[fe80::1%eth0]:80', '[v1.fe80::a+en1]', 'host:', '', 'a_b~c!$&\'()*+,;=', 'caf%C3%A9.example',
  ]
  const invalid = [
    '[', '[::1', '[1.2.3.4', '[::1]x', '[::1]]', '[]', '[1.2.3.4]', '[::1]:8080]', 'a.example]', 'a[b', 'user@a.example',
    'a.example:80:80', 'a.example:http', 'a.example:-1', 'a b', 'a/b', 'a?b', 'a#b', 'a\\b', 'a%zz', 'a%4', 'café.example', 'a"b',
  ]
  for (const text of valid) t.ok(isValidAuthority(text), `valid: ${JSON.stringify(text)}`)
  for (const text of invalid) t.notOk(isValidAuthority(text), `invalid: ${JSON.stringify(text)}`)
})
