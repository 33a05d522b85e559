// SPEC §3 rule 8: the targets file, YAML or JSON. Bad entries are skipped with one problem
// line each; a file that cannot be used at all is an error (the caller keeps the last good
// snapshot).
import t from 'tap'
import { TARGETS_FILE } from '../../lib/discovery/file.ts'
import { parseWatchedList } from '../../lib/discovery/watched-list.ts'
import type { PodTarget } from '../../lib/discovery/types.ts'

function target (identity: string, address: string, extra: Partial<PodTarget> = {}): PodTarget {
  return {
    identity,
    namespace: 'default-ns',
    address,
    host: address.includes(':') ? `[${address}]` : address,
    grpcPort: 50051,
    quicPort: 50052,
    httpPort: null,
    nodeName: null,
    zone: null,
    serving: true,
    ...extra,
  }
}

t.test('a YAML object with a targets list gives targets in file order', async (t) => {
  const text = [
    '# two pods',
    'targets:',
    '  - identity: stargate-1',
    '    address: 10.0.0.12',
    '    grpcPort: 50051',
    '    quicPort: 50052',
    '    httpPort: 8000',
    '    namespace: stargate',
    '    nodeName: node-a',
    '    zone: zone-1',
    '  - identity: stargate-0',
    '    address: fd00::1',
    '    grpcPort: 50051',
    '    quicPort: 50052',
  ].join('\n')
  t.strictSame(parseWatchedList(text, TARGETS_FILE, 'default-ns'), {
    ok: true,
    items: [
      target('stargate-1', '10.0.0.12', { httpPort: 8000, namespace: 'stargate', nodeName: 'node-a', zone: 'zone-1' }),
      target('stargate-0', 'fd00::1'),
    ],
    problems: [],
  })
})

t.test('serving: false lists a warming pod (a target, no LLM client HTTP); absent or null means serving', async (t) => {
  const text = [
    '- {identity: stargate-0, address: 10.0.0.1, grpcPort: 50051, quicPort: 50052, serving: false}',
    '- {identity: stargate-1, address: 10.0.0.2, grpcPort: 50051, quicPort: 50052, serving: true}',
    '- {identity: stargate-2, address: 10.0.0.3, grpcPort: 50051, quicPort: 50052, serving: null}',
  ].join('\n')
  t.strictSame(parseWatchedList(text, TARGETS_FILE, 'default-ns'), {
    ok: true,
    items: [target('stargate-0', '10.0.0.1', { serving: false }), target('stargate-1', '10.0.0.2'), target('stargate-2', '10.0.0.3')],
    problems: [],
  })
})

t.test('a bare YAML list is accepted', async (t) => {
  const text = '- {identity: stargate-0, address: 10.0.0.1, grpcPort: 50051, quicPort: 50052}\n'
  t.strictSame(parseWatchedList(text, TARGETS_FILE, 'default-ns'), { ok: true, items: [target('stargate-0', '10.0.0.1')], problems: [] })
})

t.test('JSON, as an object or a bare list, is accepted', async (t) => {
  const entry = { identity: 'stargate-0', address: '10.0.0.1', grpcPort: 50051, quicPort: 50052, httpPort: 8000 }
  const want = { ok: true, items: [target('stargate-0', '10.0.0.1', { httpPort: 8000 })], problems: [] }
  t.strictSame(parseWatchedList(JSON.stringify({ targets: [entry] }), TARGETS_FILE, 'default-ns'), want)
  t.strictSame(parseWatchedList(JSON.stringify([entry], null, 2), TARGETS_FILE, 'default-ns'), want)
})

t.test('an empty targets list is a valid file with no targets', async (t) => {
  t.strictSame(parseWatchedList('targets: []\n', TARGETS_FILE, 'ns'), { ok: true, items: [], problems: [] })
  t.strictSame(parseWatchedList('[]', TARGETS_FILE, 'ns'), { ok: true, items: [], problems: [] })
})

t.test('each bad entry is skipped with one problem line and the good ones are kept', async (t) => {
  const good = { address: '10.0.0.1', grpcPort: 50051, quicPort: 50052 }
  const cases: Array<[string, unknown, string]> = [
    ['not an object', 'stargate-0', 'targets[0]: not an object'],
    ['a list', [1, 2], 'targets[0]: not an object'],
    ['null', null, 'targets[0]: not an object'],
    ['no identity', { ...good }, 'targets[0]: identity must be a pod name (lower-case DNS label)'],
    ['upper-case identity', { ...good, identity: 'Stargate-0' }, 'targets[0]: identity must be a pod name (lower-case DNS label)'],
    ['identity with a dot', { ...good, identity: 'stargate-0.example' }, 'targets[0]: identity must be a pod name (lower-case DNS label)'],
    ['identity ending in a dash', { ...good, identity: 'stargate-' }, 'targets[0]: identity must be a pod name (lower-case DNS label)'],
    ['identity of 64 characters', { ...good, identity: 'a'.repeat(64) }, 'targets[0]: identity must be a pod name (lower-case DNS label)'],
    ['identity as a number', { ...good, identity: 7 }, 'targets[0]: identity must be a pod name (lower-case DNS label)'],
    ['no address', { identity: 'bad', grpcPort: 1, quicPort: 2 }, 'targets[0] (bad): address must be an IPv4 or IPv6 address'],
    ['a hostname as address', { ...good, identity: 'bad', address: 'stargate-0.svc' }, 'targets[0] (bad): address must be an IPv4 or IPv6 address'],
    ['an address with a port', { ...good, identity: 'bad', address: '10.0.0.1:50051' }, 'targets[0] (bad): address must be an IPv4 or IPv6 address'],
    ['a bracketed IPv6 address', { ...good, identity: 'bad', address: '[fd00::1]' }, 'targets[0] (bad): address must be an IPv4 or IPv6 address'],
    // net.isIP accepts a zone id; undici cannot build an origin from it (the router exited).
    ['an IPv6 address with a zone id', { ...good, identity: 'bad', address: 'fe80::1%lo' }, 'targets[0] (bad): address must be an IPv4 or IPv6 address'],
    ['grpcPort 0', { ...good, identity: 'bad', grpcPort: 0 }, 'targets[0] (bad): grpcPort and quicPort must be 1..65535'],
    ['grpcPort as a string', { ...good, identity: 'bad', grpcPort: '50051' }, 'targets[0] (bad): grpcPort and quicPort must be 1..65535'],
    ['quicPort 65536', { ...good, identity: 'bad', quicPort: 65536 }, 'targets[0] (bad): grpcPort and quicPort must be 1..65535'],
    ['quicPort missing', { identity: 'bad', address: '10.0.0.1', grpcPort: 50051 }, 'targets[0] (bad): grpcPort and quicPort must be 1..65535'],
    ['fractional port', { ...good, identity: 'bad', grpcPort: 1.5 }, 'targets[0] (bad): grpcPort and quicPort must be 1..65535'],
    ['httpPort 0', { ...good, identity: 'bad', httpPort: 0 }, 'targets[0] (bad): httpPort must be 1..65535'],
    ['httpPort as a string', { ...good, identity: 'bad', httpPort: 'http' }, 'targets[0] (bad): httpPort must be 1..65535'],
    ['serving as a string', { ...good, identity: 'bad', serving: 'false' }, 'targets[0] (bad): serving must be true or false'],
  ]
  for (const [why, entry, problem] of cases) {
    const text = JSON.stringify({ targets: [entry, { identity: 'stargate-ok', ...good }] })
    t.strictSame(parseWatchedList(text, TARGETS_FILE, 'default-ns'), { ok: true, items: [target('stargate-ok', '10.0.0.1')], problems: [problem] }, why)
  }
})

t.test('a duplicate identity keeps the first entry and reports the later one', async (t) => {
  const text = [
    'targets:',
    '  - {identity: stargate-0, address: 10.0.0.1, grpcPort: 50051, quicPort: 50052}',
    '  - {identity: stargate-1, address: 10.0.0.2, grpcPort: 50051, quicPort: 50052}',
    '  - {identity: stargate-0, address: 10.0.0.3, grpcPort: 50051, quicPort: 50052}',
  ].join('\n')
  t.strictSame(parseWatchedList(text, TARGETS_FILE, 'default-ns'), {
    ok: true,
    items: [target('stargate-0', '10.0.0.1'), target('stargate-1', '10.0.0.2')],
    problems: ['targets[2]: duplicate identity stargate-0; the first entry is kept'],
  })
})

t.test('a skipped bad entry does not count as a seen identity', async (t) => {
  const text = JSON.stringify([
    { identity: 'stargate-0', address: 'nope', grpcPort: 1, quicPort: 2 },
    { identity: 'stargate-0', address: '10.0.0.1', grpcPort: 50051, quicPort: 50052 },
  ])
  t.strictSame(parseWatchedList(text, TARGETS_FILE, 'default-ns'), {
    ok: true,
    items: [target('stargate-0', '10.0.0.1')],
    problems: ['targets[0] (stargate-0): address must be an IPv4 or IPv6 address'],
  })
})

t.test('a file that is not YAML is rejected with the parser position', async (t) => {
  const cases: Array<[string, string]> = [
    ['targets: [a, b', 'not valid YAML or JSON: Flow sequence in block collection must be sufficiently indented and end with a ] at line 1, column 15'],
    ['[1,2', 'not valid YAML or JSON: Flow sequence must end with a ] at line 1, column 5'],
    ['\t- x', 'not valid YAML or JSON: Tabs are not allowed as indentation at line 1, column 1'],
    ['targets: []\ntargets: []', 'not valid YAML or JSON: Map keys must be unique at line 2, column 1'],
  ]
  for (const [text, error] of cases) t.strictSame(parseWatchedList(text, TARGETS_FILE, 'ns'), { ok: false, error }, JSON.stringify(text))
})

t.test('a file of the wrong shape is rejected', async (t) => {
  const error = 'expected a list of targets or an object with a "targets" list'
  for (const text of ['', 'hello', '42', 'targets: 5', 'pods: []', '{"targets": {"stargate-0": {}}}', 'null']) {
    t.strictSame(parseWatchedList(text, TARGETS_FILE, 'ns'), { ok: false, error }, JSON.stringify(text))
  }
})

t.test('a target namespace must be a DNS label, as a peer namespace must (one rule)', async (t) => {
  const entry = { identity: 'stargate-0', address: '10.0.0.1', grpcPort: 50051, quicPort: 50052 }
  const text = JSON.stringify([{ ...entry, namespace: 'Bad_NS' }, { ...entry, identity: 'stargate-1', namespace: '' }])
  const result = parseWatchedList(text, TARGETS_FILE, 'default-ns')
  if (!result.ok) throw new Error(result.error)
  t.strictSame(result.problems, ['targets[0] (stargate-0): namespace must be a lower-case DNS label'])
  t.strictSame(result.items.map((target) => [target.identity, target.namespace]), [['stargate-1', 'default-ns']], 'an empty namespace is the default')
})
