// SPEC §10 and §3 rule 8: peers from --peers-file follow the targets file's rules:
// YAML or JSON, at most 1 MiB, bad entries skipped and logged, and a file that is too large
// or malformed keeps the last good peer set. Real files in a temp directory.
import t, { type Test } from 'tap'
import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { FilePeerSource, PEERS_FILE } from '../../lib/discovery/peers-file.ts'
import { WATCHED_LIST_MAX_BYTES, parseWatchedList } from '../../lib/discovery/watched-list.ts'
import { PeerSet, type PeerSelf } from '../../lib/discovery/peers.ts'
import { createLogSink, type LogSink } from '../fixtures/log-sink.ts'
import { waitFor } from '../fixtures/wait.ts'

const DEFAULTS = { namespace: 'routers', port: 8080 }

t.test('a peers file lists peers by name or address, with defaults for namespace and port', async (t) => {
  const yaml = [
    'peers:',
    '  - name: stargate-router-0',
    '    address: 10.0.0.21',
    '  - address: 10.0.0.22',
    '    port: 9090',
    '  - name: stargate-router-2',
    '    namespace: other',
    '    address: fd00::23',
  ].join('\n')
  t.strictSame(parseWatchedList(yaml, PEERS_FILE, DEFAULTS), {
    ok: true,
    items: [
      { id: 'routers/stargate-router-0', address: '10.0.0.21', port: 8080 },
      { id: 'routers/10.0.0.22', address: '10.0.0.22', port: 9090 },
      { id: 'other/stargate-router-2', address: 'fd00::23', port: 8080 },
    ],
    problems: [],
  })
  t.strictSame(parseWatchedList('[{"name":"r-0","address":"10.0.0.1"}]', PEERS_FILE, DEFAULTS), { ok: true, items: [{ id: 'routers/r-0', address: '10.0.0.1', port: 8080 }], problems: [] }, 'a bare JSON list')
})

t.test('bad entries are skipped with one problem line each; the rest of the file counts', async (t) => {
  const yaml = [
    'peers:',
    '  - just-a-string',
    '  - name: r-0',
    '  - name: r-1',
    '    address: not-an-ip',
    '  - name: R_2',
    '    address: 10.0.0.2',
    '  - name: r-3',
    '    address: 10.0.0.3',
    '    port: 70000',
    '  - name: r-4',
    '    address: 10.0.0.4',
    '    namespace: Bad_NS',
    '  - name: r-5',
    '    address: 10.0.0.5',
    '  - name: r-5',
    '    address: 10.0.0.55',
    '  - name: r-6',
    '    address: fe80::6%eth0',
  ].join('\n')
  const result = parseWatchedList(yaml, PEERS_FILE, DEFAULTS)
  if (!result.ok) throw new Error(result.error)
  t.strictSame(result.items, [{ id: 'routers/r-5', address: '10.0.0.5', port: 8080 }])
  t.strictSame(result.problems, [
    'peers[0]: not an object',
    'peers[1]: address must be an IPv4 or IPv6 address',
    'peers[2]: address must be an IPv4 or IPv6 address',
    'peers[3] (10.0.0.2): name must be a pod name (lower-case DNS name)',
    'peers[4] (10.0.0.3): port must be 1..65535',
    'peers[5] (10.0.0.4): namespace must be a lower-case DNS label',
    'peers[7]: duplicate peer routers/r-5; the first entry is kept',
    'peers[8]: address must be an IPv4 or IPv6 address',
  ])
})

t.test('a file that is not YAML, or has no list of peers, is rejected whole', async (t) => {
  const cases: Array<[string, string]> = [
    ['peers: [unclosed', 'not valid YAML or JSON'],
    ['peers: 5', 'expected a list of peers or an object with a "peers" list'],
    ['targets: []', 'expected a list of peers or an object with a "peers" list'],
    ['"a string"', 'expected a list of peers or an object with a "peers" list'],
  ]
  for (const [text, prefix] of cases) {
    const result = parseWatchedList(text, PEERS_FILE, DEFAULTS)
    t.equal(result.ok, false, text)
    if (!result.ok) t.match(result.error, prefix, text)
  }
})

interface Harness {
  readonly path: string
  readonly peers: PeerSet
  readonly log: LogSink
  readonly source: FilePeerSource
}

async function startSource (t: Test, initial: string, self: PeerSelf = { address: null, id: null }): Promise<Harness> {
  const dir = await mkdtemp(join(tmpdir(), 'stargate-peers-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const path = join(dir, 'peers.yaml')
  await writeFile(path, initial)
  const peers = new PeerSet({ self })
  const log = createLogSink({ level: 'debug' })
  const source = new FilePeerSource({ path, namespace: 'routers', defaultPort: 8080, peers, logger: log.logger, debounceMs: 20, pollMs: 200 })
  t.teardown(() => source.stop())
  await source.start()
  return { path, peers, log, source }
}

async function replaceFile (path: string, text: string): Promise<void> {
  await writeFile(`${path}.tmp`, text)
  await rename(`${path}.tmp`, path)
}

const TWO = 'peers:\n  - name: r-0\n    address: 10.0.0.1\n  - name: r-1\n    address: 10.0.0.2\n'

t.test('the peers file is applied at start and followed through atomic renames, leaving this replica out', async (t) => {
  const h = await startSource(t, TWO, { address: '10.0.0.1', id: null })
  t.strictSame(h.peers.peers().map((p) => p.id), ['routers/r-1'])
  t.equal(h.source.lastError(), null)
  await replaceFile(h.path, TWO + '  - name: r-2\n    address: 10.0.0.3\n')
  await waitFor(() => h.peers.size === 2, { message: 'the new peer' })
  t.strictSame(h.peers.peers().map((p) => p.id), ['routers/r-1', 'routers/r-2'])
})

t.test('a malformed peers file keeps the last good peers and says why', async (t) => {
  const h = await startSource(t, TWO)
  await replaceFile(h.path, 'peers: [unclosed\n')
  await waitFor(() => h.source.lastError(), { message: 'the rejection' })
  t.match(h.source.lastError(), /^peers file invalid: not valid YAML or JSON/)
  t.strictSame(h.peers.peers().map((p) => p.id), ['routers/r-0', 'routers/r-1'], 'last good peers kept')
  t.ok(h.log.lines().some((l) => l.msg === 'peers file rejected; keeping the last good peers' && l.failure === 'invalid'))
  await replaceFile(h.path, 'peers:\n  - name: r-9\n    address: 10.0.0.9\n')
  await waitFor(() => h.source.lastError() === null, { message: 'recovery' })
  t.strictSame(h.peers.peers().map((p) => p.id), ['routers/r-9'])
})

t.test('a peers file over 1 MiB keeps the last good peers and is never parsed', async (t) => {
  const h = await startSource(t, TWO)
  await replaceFile(h.path, TWO + '#' + 'x'.repeat(WATCHED_LIST_MAX_BYTES) + '\n')
  await waitFor(() => h.source.lastError(), { message: 'the rejection' })
  t.match(h.source.lastError(), /^peers file too_large: .* over the 1048576-byte limit/)
  t.strictSame(h.peers.peers().map((p) => p.id), ['routers/r-0', 'routers/r-1'], 'last good peers kept')
})

t.test('entries that are skipped are logged, one line each', async (t) => {
  const h = await startSource(t, TWO + '  - name: r-2\n')
  t.strictSame(h.peers.peers().map((p) => p.id), ['routers/r-0', 'routers/r-1'])
  t.strictSame(h.log.lines().filter((l) => l.msg === 'peers file entry skipped').map((l) => l.problem), ['peers[2]: address must be an IPv4 or IPv6 address'])
})

t.test('a missing peers file gives no peers and says so', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'stargate-peers-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const peers = new PeerSet({ self: { address: null, id: null } })
  const log = createLogSink()
  const source = new FilePeerSource({ path: join(dir, 'absent.yaml'), namespace: 'routers', defaultPort: 8080, peers, logger: log.logger, pollMs: 0 })
  t.teardown(() => source.stop())
  await source.start()
  t.equal(peers.size, 0)
  t.match(source.lastError(), /^peers file missing: .*absent\.yaml does not exist/)
})
