// SPEC §4: render and match of the advertised hostname template, table-driven.
import t from 'tap'
import { compileHostnameTemplate, type HostnameTemplate } from '../../lib/routing/hostname-template.ts'

function compile (source: string, namespace = 'stargate'): HostnameTemplate {
  const result = compileHostnameTemplate(source, namespace)
  if (!result.ok) throw new Error(result.message)
  return result.template
}

t.test('render replaces {pod_name} and {namespace}', async (t) => {
  t.equal(compile('{pod_name}.stargate.external').render('stargate-0'), 'stargate-0.stargate.external')
  t.equal(compile('{pod_name}.{namespace}.svc.example').render('stargate-7d9f8b6c4-x2x7q'), 'stargate-7d9f8b6c4-x2x7q.stargate.svc.example')
  t.equal(compile('sg-{pod_name}.example').render('a'), 'sg-a.example')
})

t.test('match returns the identity for hosts the template produces', async (t) => {
  const template = compile('{pod_name}.{namespace}.stargate.example')
  const cases: Array<[string, string | null, string]> = [
    ['stargate-0.stargate.stargate.example', 'stargate-0', 'plain host'],
    ['stargate-0.stargate.stargate.example:50071', 'stargate-0', 'port is stripped'],
    ['STARGATE-0.Stargate.Stargate.Example', 'stargate-0', 'case-insensitive'],
    ['stargate-0.stargate.stargate.example.', 'stargate-0', 'trailing dot dropped'],
    ['stargate-0.stargate.stargate.example.:443', 'stargate-0', 'trailing dot before the port'],
    ['.stargate.stargate.example', null, 'empty middle'],
    ['a.b.stargate.stargate.example', null, 'middle with a dot'],
    ['stargate-0.other.stargate.example', null, 'other namespace'],
    ['stargate-0.stargate.stargate.example.evil', null, 'suffix is not at the end'],
    ['stargate-headless', null, 'the Service name'],
    ['10.1.2.3:50071', null, 'an IP address'],
    ['[::1]:50071', null, 'an IPv6 literal'],
    ['', null, 'empty'],
  ]
  for (const [host, want, why] of cases) t.equal(template.match(host), want, why)
})

t.test('match with a prefix in the template', async (t) => {
  const template = compile('sg-{pod_name}.example.com')
  t.equal(template.match('sg-stargate-1.example.com'), 'stargate-1')
  t.equal(template.match('stargate-1.example.com'), null)
  t.equal(template.match('sg-.example.com'), null)
})

t.test('render and match round-trip for both workload kinds', async (t) => {
  const template = compile('{pod_name}.stargate.external')
  for (const pod of ['stargate-0', 'stargate-12', 'stargate-7d9f8b6c4-x2x7q']) {
    t.equal(template.match(template.render(pod) + ':50071'), pod)
  }
})

t.test('invalid templates are rejected with a message naming the problem', async (t) => {
  const cases: Array<[string, RegExp]> = [
    ['stargate.example', /must contain \{pod_name\}, got 'stargate.example'/],
    ['{pod_name}.{pod_name}.example', /exactly once/],
    ['{pod_name}.{zone}.example', /only use \{pod_name\} and \{namespace\}/],
    ['{pod_name}.exa mple', /DNS name/],
    ['{pod_name}_x.example', /DNS name/],
  ]
  for (const [source, message] of cases) {
    const result = compileHostnameTemplate(source, 'ns')
    t.equal(result.ok, false, source)
    if (!result.ok) t.match(result.message, message, source)
  }
})
