// The one host:port rule: the port colon is the last colon after any `]`.
import t from 'tap'
import { formatHost, splitHostPort } from '../../lib/host-port.ts'

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
