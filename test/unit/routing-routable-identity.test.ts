// SPEC §4: which pod names a host can carry in the template's one DNS label. Names
// that cannot (a dot, over 63 characters) are skipped as targets, counted as unroutable_name.
import t from 'tap'
import { compileHostnameTemplate, isRoutableIdentity } from '../../lib/routing/hostname-template.ts'
import { parseEndpointSlice } from '../../lib/discovery/endpoint-slice.ts'
import { endpointSlice } from '../fixtures/endpoint-slices.ts'

t.test('routable names are DNS labels: a host can carry them and the template maps the host back', async (t) => {
  const compiled = compileHostnameTemplate('{pod_name}.stargate.example', 'ns')
  if (!compiled.ok) throw new Error(compiled.message)
  const cases: Array<[string, boolean]> = [
    ['stargate-0', true],
    ['stargate-7d9f8b6c4-x2x7q', true],
    ['0stargate', true],
    ['a'.repeat(63), true],
    ['a'.repeat(64), false], // longer than a DNS label: no TLS client sends it as SNI
    ['stargate.v2-0', false],
    ['-stargate', false],
    ['stargate-', false],
    ['Stargate-0', false],
    ['', false],
  ]
  for (const [name, routable] of cases) t.equal(isRoutableIdentity(name), routable, `${JSON.stringify(name)} routable: ${routable}`)
  for (const [name] of cases.filter(([, routable]) => routable)) t.equal(compiled.template.match(compiled.template.render(name)), name, `${name} matches back`)
  t.equal(compiled.template.match(compiled.template.render('stargate.v2-0')), null, 'a dotted name renders a host that matches nothing')
})

t.test('an endpoint whose pod name has a dot contributes no target and is counted', async (t) => {
  const slice = endpointSlice({ namespace: 'ns', service: 'stargate', name: 's', endpoints: [{ pod: 'stargate.v2-0', ip: '10.0.0.1' }, { pod: 'stargate-1', ip: '10.0.0.2' }] })
  const parsed = parseEndpointSlice(slice, { grpc: 'grpc', quic: 'quic', http: 'http' })
  t.same(parsed.observations.map((o) => o.identity), ['stargate-1'])
  t.same(parsed.skipped, ['unroutable_name'])
})
