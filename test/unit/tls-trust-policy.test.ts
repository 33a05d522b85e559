// Policy in lib/, wiring in server/ (SPEC §7, §8): which bundle verifies Stargate pods
// on each upstream leg, when a change of TLS material counts as a trust change (it closes what
// was dialled under the old trust), and which connections the client-trust sweep closes.
// Table-driven over the legs, the flags and the material.
import t from 'tap'
import type { X509Certificate } from 'node:crypto'
import { UPSTREAM_LEGS, untrustedConnections, upstreamTrustFor, type UpstreamLeg, type UpstreamTrustFlags } from '../../lib/tls/trust-policy.ts'
import { followUpstreamTrust } from '../../lib/tls/upstream-trust-consumer.ts'
import type { ChangeListener } from '../../lib/tls/manager.ts'
import type { ServerIdentity, TlsConsumer, TlsState, TrustBundle } from '../../lib/tls/types.ts'
import { validateTrustBundle } from '../../lib/tls/validate.ts'
import { createCa, createLeaf } from '../fixtures/certs.ts'

const now = new Date()
const podCa = await createCa({ name: 'stargate pods ca' })
const nextCa = await createCa({ name: 'next pods ca' })
const routerLeaf = await createLeaf(podCa, { dnsNames: ['*.stargate.external'] })
const renewedLeaf = await createLeaf(podCa, { dnsNames: ['*.stargate.external'] })

function bundle (pem: string): TrustBundle {
  const result = validateTrustBundle(pem, now)
  if (!result.ok) throw new Error(result.detail)
  return result.value
}

function identity (certPem: string, generated = false): ServerIdentity {
  return { certPem, keyPem: 'unused', chain: [], notAfter: now, fingerprint: certPem.slice(-40), generated }
}

function state (serverIdentity: ServerIdentity | null, upstreamTrust: TrustBundle | null): TlsState {
  return { serverIdentity, upstreamTrust, clientTrust: null, generations: { server_identity: 1, upstream_trust: upstreamTrust === null ? 0 : 1, client_trust: 0 } }
}

const TUNNELS: readonly UpstreamLeg[] = ['raw_quic', 'webtransport_h3', 'webtransport_h2']
const TCP: readonly UpstreamLeg[] = ['registration', 'http_forward']
const flags = (over: Partial<UpstreamTrustFlags> = {}): UpstreamTrustFlags => ({ upstreamTls: false, upstreamTlsSystemCa: false, quicInsecure: false, ...over })

const configured = identity(routerLeaf.chainPem)
const generated = identity(routerLeaf.chainPem, true)
const podBundle = bundle(podCa.certPem)

interface Case {
  readonly name: string
  readonly legs: readonly UpstreamLeg[]
  readonly state: TlsState
  readonly flags: UpstreamTrustFlags
  /** kind, and for 'verify' the bundle PEM, whether system roots join it, and its source. */
  readonly expect: { kind: 'cleartext' | 'unverified' } | { kind: 'verify', caPem: string | null, systemRoots: boolean, source: string }
}

const cases: Case[] = [
  { name: 'registration and HTTP are cleartext without --upstream-tls', legs: TCP, state: state(configured, podBundle), flags: flags(), expect: { kind: 'cleartext' } },
  { name: 'tunnels always verify, with the --upstream-tls-cert-path bundle', legs: TUNNELS, state: state(configured, podBundle), flags: flags(), expect: { kind: 'verify', caPem: podCa.certPem, systemRoots: false, source: 'upstream_trust' } },
  { name: '--upstream-tls verifies with the bundle', legs: TCP, state: state(configured, podBundle), flags: flags({ upstreamTls: true }), expect: { kind: 'verify', caPem: podCa.certPem, systemRoots: false, source: 'upstream_trust' } },
  { name: 'without a bundle every leg trusts the router certificate file', legs: UPSTREAM_LEGS, state: state(configured, null), flags: flags({ upstreamTls: true }), expect: { kind: 'verify', caPem: routerLeaf.chainPem, systemRoots: false, source: 'server_identity' } },
  { name: 'a generated identity trusts nothing on every leg', legs: UPSTREAM_LEGS, state: state(generated, null), flags: flags({ upstreamTls: true }), expect: { kind: 'verify', caPem: null, systemRoots: false, source: 'none' } },
  { name: '--upstream-tls-system-ca adds the system roots to registration and HTTP', legs: TCP, state: state(configured, podBundle), flags: flags({ upstreamTls: true, upstreamTlsSystemCa: true }), expect: { kind: 'verify', caPem: podCa.certPem, systemRoots: true, source: 'upstream_trust' } },
  { name: '--upstream-tls-system-ca alone trusts only the system roots', legs: TCP, state: state(generated, null), flags: flags({ upstreamTls: true, upstreamTlsSystemCa: true }), expect: { kind: 'verify', caPem: null, systemRoots: true, source: 'none' } },
  { name: '--upstream-tls-system-ca does not reach the tunnels', legs: TUNNELS, state: state(configured, podBundle), flags: flags({ upstreamTlsSystemCa: true }), expect: { kind: 'verify', caPem: podCa.certPem, systemRoots: false, source: 'upstream_trust' } },
  { name: '--quic-insecure leaves the tunnels unverified', legs: TUNNELS, state: state(configured, podBundle), flags: flags({ quicInsecure: true }), expect: { kind: 'unverified' } },
  { name: '--quic-insecure does not reach registration and HTTP', legs: TCP, state: state(configured, podBundle), flags: flags({ upstreamTls: true, quicInsecure: true }), expect: { kind: 'verify', caPem: podCa.certPem, systemRoots: false, source: 'upstream_trust' } },
]

for (const c of cases) {
  t.test(c.name, async (t) => {
    for (const leg of c.legs) t.match(upstreamTrustFor(leg, c.state, c.flags), c.expect, leg)
  })
}

interface ChangeCase {
  readonly name: string
  readonly before: TlsState
  readonly after: TlsState
  readonly changes: boolean
}

const changes: ChangeCase[] = [
  { name: 'a renewed router certificate changes the trust when it is the trust', before: state(configured, null), after: state(identity(renewedLeaf.chainPem), null), changes: true },
  { name: 'a renewed router certificate leaves a separate bundle alone', before: state(configured, podBundle), after: state(identity(renewedLeaf.chainPem), podBundle), changes: false },
  { name: 'a new bundle changes the trust', before: state(configured, podBundle), after: state(configured, bundle(podCa.certPem + nextCa.certPem)), changes: true },
  { name: 'the same bundle bytes are the same trust', before: state(configured, podBundle), after: state(configured, bundle(podCa.certPem)), changes: false },
]

for (const c of changes) {
  t.test(c.name, async (t) => {
    for (const leg of UPSTREAM_LEGS) {
      const before = upstreamTrustFor(leg, c.before, flags({ upstreamTls: true }))
      const after = upstreamTrustFor(leg, c.after, flags({ upstreamTls: true }))
      t.equal(before.key !== after.key, c.changes, leg)
    }
  })
}

t.test('--quic-insecure tunnels never see a trust change', async (t) => {
  const before = upstreamTrustFor('raw_quic', state(configured, null), flags({ quicInsecure: true }))
  const after = upstreamTrustFor('raw_quic', state(identity(renewedLeaf.chainPem), bundle(nextCa.certPem)), flags({ quicInsecure: true }))
  t.equal(before.key, after.key)
})

t.test('the client-trust sweep picks the connections whose certificate the new bundle does not trust', async (t) => {
  const oldPylon = await createLeaf(podCa, { dnsNames: ['pylon-a'], clientAuth: true })
  const newPylon = await createLeaf(nextCa, { dnsNames: ['pylon-b'], clientAuth: true })
  const connections = [
    { name: 'old', chain: [oldPylon.x509] },
    { name: 'new', chain: [newPylon.x509] },
    { name: 'no certificate', chain: [] as X509Certificate[] },
  ]
  const untrusted = untrustedConnections(connections, (c) => c.chain, bundle(nextCa.certPem), now)
  t.same(untrusted.map((c) => c.name), ['old'])
  t.same(untrustedConnections(connections, (c) => c.chain, bundle(podCa.certPem + nextCa.certPem), now), [], 'an overlapping bundle keeps both')
})

/** The part of TlsMaterialManager a follower uses, driven by hand: build every consumer, commit, notify. */
class ManualManager {
  #state: TlsState
  readonly #consumers: Array<TlsConsumer<unknown>> = []
  readonly #listeners: ChangeListener[] = []
  constructor (initial: TlsState) { this.#state = initial }
  addConsumer<C> (consumer: TlsConsumer<C>): () => void {
    consumer.commit(consumer.build(this.#state), this.#state, null)
    this.#consumers.push(consumer as TlsConsumer<unknown>)
    return () => { this.#consumers.splice(this.#consumers.indexOf(consumer as TlsConsumer<unknown>), 1) }
  }

  onChange (listener: ChangeListener): () => void {
    this.#listeners.push(listener)
    return () => { this.#listeners.splice(this.#listeners.indexOf(listener), 1) }
  }

  change (next: TlsState): void {
    const built = this.#consumers.map((consumer) => consumer.build(next))
    this.#consumers.forEach((consumer, i) => { consumer.commit(built[i], next, 'server_identity') })
    const previous = this.#state
    this.#state = next
    for (const listener of this.#listeners) listener('server_identity', previous, next)
  }
}

t.test('a follower rebuilds and reports a replacement only when the trust changed', async (t) => {
  const manager = new ManualManager(state(configured, null))
  const built: string[] = []
  const released: string[] = []
  const replaced: number[] = []
  const follower = followUpstreamTrust<string>(manager, {
    name: 'test',
    leg: 'raw_quic',
    flags: flags(),
    build: (trust, generation) => { built.push(`${trust.key.slice(0, 8)}@${generation}`); return `runtime ${generation}` },
    release: (runtime) => { released.push(runtime) },
    onReplaced: (current) => { replaced.push(current.generation) },
  })
  t.equal(follower.current().runtime, 'runtime 1')
  manager.change(state(configured, null))
  t.same(replaced, [], 'the same certificate again: nothing replaced')
  manager.change(state(identity(renewedLeaf.chainPem), null))
  t.same(replaced, [2], 'the router certificate is the trust: renewing it replaces the trust')
  t.same(released, ['runtime 1'], 'the previous runtime object is released')
  t.equal(follower.current().runtime, 'runtime 2')
  t.equal(built.length, 2, 'built once per distinct trust')
  follower.release()
  follower.release()
  t.same(released, ['runtime 1', 'runtime 2'], 'dispose releases the current one, once')
})
