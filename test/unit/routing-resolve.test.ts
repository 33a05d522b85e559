// SPEC §4: route resolution from :authority (registrations, HTTP) and SNI (tunnels) to a
// ready target of the snapshot, or the reason there is none.
import t from 'tap'
import { resolveAuthority, resolveSni } from '../../lib/routing/resolve.ts'
import { compileHostnameTemplate, type HostnameTemplate } from '../../lib/routing/hostname-template.ts'
import { SnapshotStore } from '../../lib/discovery/snapshot-store.ts'
import type { PodTarget, TargetSnapshot } from '../../lib/discovery/types.ts'

function compile (source: string): HostnameTemplate {
  const result = compileHostnameTemplate(source, 'stargate')
  if (!result.ok) throw new Error(result.message)
  return result.template
}

function target (identity: string, address: string): PodTarget {
  return { identity, namespace: 'stargate', address, host: address, grpcPort: 50051, quicPort: 50052, httpPort: null, nodeName: null, zone: null, serving: true }
}

function snapshotOf (targets: readonly PodTarget[]): TargetSnapshot {
  const store = new SnapshotStore()
  store.markInitialized()
  for (const x of targets) store.stage(x.identity, x)
  store.flush()
  return store.current()
}

const TEMPLATE = compile('{pod_name}.{namespace}.stargate.example')
const SNAPSHOT = snapshotOf([target('stargate-0', '10.0.0.1'), target('stargate-7d9f8b6c4-x2x7q', '10.0.0.2')])

t.test('an authority naming a ready pod resolves to its target', async (t) => {
  const cases: Array<[string, PodTarget]> = [
    ['stargate-0.stargate.stargate.example', target('stargate-0', '10.0.0.1')],
    ['stargate-0.stargate.stargate.example:50071', target('stargate-0', '10.0.0.1')],
    ['Stargate-0.Stargate.Stargate.Example.', target('stargate-0', '10.0.0.1')],
    ['stargate-7d9f8b6c4-x2x7q.stargate.stargate.example:443', target('stargate-7d9f8b6c4-x2x7q', '10.0.0.2')],
  ]
  for (const [host, want] of cases) t.strictSame(resolveAuthority(host, SNAPSHOT, TEMPLATE), { ok: true, target: want }, host)
})

t.test('an SNI naming a ready pod resolves to its target', async (t) => {
  t.strictSame(resolveSni('stargate-0.stargate.stargate.example', SNAPSHOT, TEMPLATE), { ok: true, target: target('stargate-0', '10.0.0.1') })
})

t.test('a missing authority or SNI is reported as missing', async (t) => {
  for (const host of [undefined, null, '']) {
    t.strictSame(resolveAuthority(host, SNAPSHOT, TEMPLATE), { ok: false, reason: 'missing_authority' }, `authority ${String(host)}`)
  }
  for (const host of [undefined, null, '', false] as const) {
    t.strictSame(resolveSni(host, SNAPSHOT, TEMPLATE), { ok: false, reason: 'missing_sni' }, `sni ${String(host)}`)
  }
})

t.test('a host that does not match the template is unknown', async (t) => {
  const hosts = [
    'stargate-headless',
    'stargate-0.other.stargate.example',
    'a.b.stargate.stargate.example',
    '10.0.0.1:50071',
    '10-0-0-1.stargate.example',
    '[::1]:50071',
    'stargate.stargate.example',
  ]
  for (const host of hosts) {
    t.strictSame(resolveAuthority(host, SNAPSHOT, TEMPLATE), { ok: false, reason: 'unknown_authority' }, host)
    t.strictSame(resolveSni(host, SNAPSHOT, TEMPLATE), { ok: false, reason: 'unknown_sni' }, host)
  }
})

t.test('a host naming a pod that is not in the snapshot is target_unavailable with its identity', async (t) => {
  t.strictSame(resolveAuthority('stargate-9.stargate.stargate.example:50071', SNAPSHOT, TEMPLATE), { ok: false, reason: 'target_unavailable', identity: 'stargate-9' })
  t.strictSame(resolveSni('STARGATE-9.stargate.stargate.example', SNAPSHOT, TEMPLATE), { ok: false, reason: 'target_unavailable', identity: 'stargate-9' })
})

t.test('every identity is target_unavailable while the snapshot is uninitialized', async (t) => {
  const uninitialized = new SnapshotStore().current()
  t.strictSame(resolveAuthority('stargate-0.stargate.stargate.example', uninitialized, TEMPLATE), { ok: false, reason: 'target_unavailable', identity: 'stargate-0' })
  t.strictSame(resolveSni('stargate-0.stargate.stargate.example', uninitialized, TEMPLATE), { ok: false, reason: 'target_unavailable', identity: 'stargate-0' })
})

t.test('a pod that left the ready set stops resolving in the next snapshot only', async (t) => {
  const store = new SnapshotStore()
  store.markInitialized()
  store.stage('stargate-0', target('stargate-0', '10.0.0.1'))
  store.flush()
  const before = store.current()
  store.stage('stargate-0', null)
  store.flush()
  t.equal(resolveAuthority('stargate-0.stargate.stargate.example', before, TEMPLATE).ok, true)
  t.strictSame(resolveAuthority('stargate-0.stargate.stargate.example', store.current(), TEMPLATE), { ok: false, reason: 'target_unavailable', identity: 'stargate-0' })
})
