// The DNS name rules Kubernetes applies to object names, one copy for targets, peers and flags.
import t from 'tap'
import { isDnsLabel, isDnsSubdomain, isServiceName } from '../../lib/dns-name.ts'

t.test('names are checked as Kubernetes checks labels, subdomains and Service names', async (t) => {
  const cases: Array<[string, boolean, boolean, boolean]> = [
    // name, DNS-1123 label, DNS-1123 subdomain, Service name (DNS-1035 label)
    ['stargate-0', true, true, true],
    ['0-stargate', true, true, false],
    ['stargate.external', false, true, false],
    ['Stargate', false, false, false],
    ['-stargate', false, false, false],
    ['stargate-', false, false, false],
    ['', false, false, false],
    ['a'.repeat(63), true, true, true],
    ['a'.repeat(64), false, true, false],
    ['a'.repeat(253), false, true, false],
    ['a'.repeat(254), false, false, false],
  ]
  for (const [name, label, subdomain, service] of cases) {
    t.equal(isDnsLabel(name), label, `${name.slice(0, 20)} (${name.length}) label`)
    t.equal(isDnsSubdomain(name), subdomain, `${name.slice(0, 20)} (${name.length}) subdomain`)
    t.equal(isServiceName(name), service, `${name.slice(0, 20)} (${name.length}) service`)
  }
})
