// Docs and comments describe the product, not its history: no text in the project speaks of the
// sessions it was written in, of the order work was done in, of how the code used to be, or of
// issues a reader outside cannot open. History lives in git. This scans the docs, the deployment
// files and every source tree (comments and strings alike) for the phrases such talk takes, and
// names file:line for each. "Session" is a product word here (HTTP/2, WebTransport and TLS
// sessions, "session 0"), and so is "round" (rebalancing rounds, benchmark rounds), so the rules
// match history phrasing precisely ("Session 5", "Sessions 7–9", "in session 6") and leave
// product phrasing alone; the first subtests pin both sides.
import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { ISSUE_REF, ROOT, stripIssueRefs, textFiles } from '../../scripts/strip-issue-refs.ts'

interface Rule {
  readonly name: string
  readonly pattern: RegExp
  /** Only in prose (docs/, README.md): code and fixtures hold dates for other reasons. */
  readonly proseOnly?: boolean
  readonly fix: string
}

const HISTORY_LIVES_IN_GIT = 'say what the code does or what the figure is; which work session produced it is in git'

const RULES: readonly Rule[] = [
  // Case-sensitive: "Session 5 (…)", "Sessions 7–9" open a diary entry; product text writes "session 0".
  { name: 'numbered work session', pattern: /\bSessions? \d+/, fix: HISTORY_LIVES_IN_GIT },
  {
    name: 'numbered work session',
    pattern: /\bsessions? \d+\s*[–-]\s*\d+\b|\bsessions? \d+'s\b|\(\s*(?:in |since |from |see )?sessions? \d+\b|\b(?:in|since|during|until|after|before) sessions? \d+\b/i,
    fix: HISTORY_LIVES_IN_GIT,
  },
  {
    name: 'work session',
    pattern: /\b(?:this|that|the previous|the last|the next|an earlier|other) sessions?'?s? (?:runs?|jobs|merges|test suites|builds|benchmarks|figures|work)\b|\bshared with other sessions\b|\bearlier sessions?\b|\bother (?:helpers|engineers)\b/i,
    fix: HISTORY_LIVES_IN_GIT,
  },
  {
    name: 'issue number',
    pattern: ISSUE_REF,
    fix: 'name the SPEC or RFC section, or say the behaviour (`node scripts/strip-issue-refs.ts --write` does the mechanical part); another project\'s issue as owner/repo#N',
  },
  { name: 'the issue', pattern: /\bthe issue(?:'s\b| (?:sets|asks|says|requires|measured)\b)/i, fix: 'say what the target or requirement is, and why' },
  { name: 'numbered stop', pattern: /\bstop \d+\b/i, fix: HISTORY_LIVES_IN_GIT },
  {
    name: 'before the fix',
    pattern: /\b(?:before|after) the fix\b|\bthe code before\b|\bthe (?:old|previous) (?:code|build)\b/i,
    fix: 'describe the failure mode as what happens without the guard ("two content-type fields make respond() throw"), not as a past',
  },
  {
    name: 'commit diary',
    pattern: /\b(?:fixed|reverted|re-?landed|landed|introduced) in (?:commit )?[0-9a-f]{7,40}\b|\bmain (?:at )?[0-9a-f]{7,40}\b|\bbranch wt2?-|\/work\/wt/i,
    fix: 'a figure may name the commit it was measured at; the order changes landed in is git\'s',
  },
  {
    name: 'dated diary',
    pattern: /\b20\d\d-\d\d-\d\d\b(?!T)/,
    proseOnly: true,
    fix: 'the generated results block dates its own figures; prose states the figure, and the commit and load if they matter',
  },
]

/** Files that spell out the phrases to catch them. */
const SELF = new Set(['test/unit/docs-no-history.test.ts', 'scripts/strip-issue-refs.ts'])

function isProse (file: string): boolean {
  return file.endsWith('.md')
}

/** Each rule a line breaks, with the text it matched. */
function violations (line: string, prose: boolean): Array<{ rule: Rule, match: string }> {
  const out: Array<{ rule: Rule, match: string }> = []
  for (const rule of RULES) {
    if (rule.proseOnly === true && !prose) continue
    const m = rule.pattern.exec(line)
    if (m !== null) out.push({ rule, match: m[0] })
  }
  return out
}

/** A line without its comment markers, so a phrase wrapped over two comment lines reads as one. */
function body (line: string): string {
  return line.replace(/^\s*(?:\/\/!?|\/\*+|\*\/?|#|<!--)?\s*/, '')
}

/** The last words of a line, to join with the next one. */
function tail (line: string): string {
  return line.trim().split(/\s+/).slice(-3).join(' ')
}

/**
 * What a line breaks, alone and joined to the end of the line before it ("(measured in" +
 * "// session 6)"); a phrase found only across the two is reported at the second.
 */
function violationsAcross (previous: string, line: string, prose: boolean): Array<{ rule: Rule, match: string }> {
  const own = violations(line, prose)
  const before = new Set(violations(previous, prose).map((v) => v.rule))
  const seen = new Set(own.map((v) => v.rule))
  const joined = violations(`${tail(previous)} ${body(line)}`, prose).filter((v) => !seen.has(v.rule) && !before.has(v.rule))
  return [...own, ...joined]
}

/** Lines of a text outside its generated blocks (`<!-- BEGIN GENERATED … -->` to `<!-- END GENERATED … -->`), with their numbers. */
function authoredLines (text: string): Array<{ line: string, n: number }> {
  const out: Array<{ line: string, n: number }> = []
  let generated = false
  text.split('\n').forEach((line, i) => {
    if (line.startsWith('<!-- BEGIN GENERATED ')) generated = true
    if (!generated) out.push({ line, n: i + 1 })
    if (line.startsWith('<!-- END GENERATED ')) generated = false
  })
  return out
}

const flagged = (line: string, prose = true): string[] => violations(line, prose).map((v) => v.rule.name)

t.test('history phrasing is caught', async (t) => {
  const history: Array<[string, string]> = [
    ['**Session 5 (14:30–15:05 UTC): the pod leg\'s round trip', 'numbered work session'],
    ['See "Sessions 7–9" below for what these mean', 'numbered work session'],
    ['relay 75 % busy. Session 9: the latest runs above', 'numbered work session'],
    ['(Explained in session 6: ngtcp2 0.12.1 loses a step', 'numbered work session'],
    ['machine, where session 5\'s quiet runs gave ~950', 'numbered work session'],
    ['at load 2-4 (session 5); with AES-128-GCM', 'numbered work session'],
    ['each run being its own sendmmsg (session 6, docs/benchmarks.md)', 'numbered work session'],
    ['88–96 % in sessions 7–9; ratio × busy shares', 'numbered work session'],
    ['as measured in this session\'s runs', 'work session'],
    ['load average 7.9 — other sessions\' test suites were running', 'work session'],
    ['2 vCPUs shared with other sessions and VMs', 'work session'],
    ['156 s at load 8–10 with other helpers\' builds', 'work session'],
    ['// Issue 30: the process-level safety net', 'issue number'],
    ['// Issue 8, 9 and 13: the kustomize overlays', 'issue number'],
    [' * Issues 5 and 15, bad input: datagrams', 'issue number'],
    ['a DELETE never runs twice (issue 14).', 'issue number'],
    ['// SPEC §8 (issue #4 "Bad input"): every kind of bad TLS material', 'issue number'],
    ['the issue\'s 100,000 is the same file', 'the issue'],
    ['- **target**: the bound the issue sets for the median', 'the issue'],
    ['measured at stop 3 of the plan', 'numbered stop'],
    ['// the router stays up. Before the fix, two content-type fields made respond() throw', 'before the fix'],
    ['// The check passes on the code before too: nothing was retained.', 'before the fix'],
    ['(commit dd026ce, reverted in 9172620: with it, the case failed)', 'commit diary'],
    ['| 05:32, load 2.5, main 4b01dd0 (`--write-doc`) |', 'commit diary'],
    ['(2026-12-06 19:14 UTC, branch wt-quinn11 at 1ef7b3c)', 'commit diary'],
    ['**Run of 2026-12-02 05:31 UTC** (`npm run bench -- --write-doc quic/engine`)', 'dated diary'],
  ]
  for (const [line, rule] of history) t.ok(flagged(line).includes(rule), `${rule}: ${line}`)
})

t.test('product phrasing is not', async (t) => {
  const product = [
    'the byte strings the Rust protocol crate writes (40 41 00 for session 0)',
    '// h3 0.0.8 server with enable_webtransport, extended connect, datagrams, max sessions 1.',
    '| 500 sessions, 50 sending at a time: 1 KiB echo | 500 sessions direct and 500 through the router |',
    '1 KiB echo, 500 sessions 50 at a time: 9.2 ms direct',
    "t.equal(good.status, 200, 'other sessions are unaffected')",
    'stdout.match(/session 200 via SNI stargate-[^;]+/g)',
    'requests, other sessions, a header cut by FIN or reset) goes to TypeScript',
    'the streams of this session\'s other legs close with it',
    'a draining session gets GOAWAY and the drain capsule, refuses new streams',
    ' * - A peer is `known` when this round read it, `stale` when this round failed but an earlier',
    'certificate N was not issued by certificate N+1',
    'openssl x509 -noout -subject -issuer -enddate',
    '(quinn-rs/quinn#2785, fixed upstream by quinn-rs/quinn#2787)',
    '- Shutdown (upstream #1537): as upstream, Watch and registration streams end at once',
    '"checkedAt": "2025-01-07T10:00:40.120Z", "differingSince": "2025-01-07T10:00:00.104Z",',
    'Recorded 2026-12-02T18:53:32Z with `npm run bench -- --write-doc quic/bulk`',
    'a measured figure names the commit it was measured at (commit b2323e0, load ~3)',
    'the gap from the last answer on the old tunnel to the first on the new',
    'connections made under the previous bundle close',
    'a stream that the peer stops 3 s later',
  ]
  for (const line of product) t.same(flagged(line), [], line)
  t.same(flagged('not_before: 2030-01-01 in a certificate fixture', false), [], 'dates are only looked for in prose')
})

t.test('a phrase wrapped over two comment lines is caught at the second', async (t) => {
  const across = (a: string, b: string): string[] => violationsAcross(a, b, false).map((v) => v.rule.name)
  t.same(across('  // Direct runs swing between two rates (~570 and ~760 MiB/s in', '  // session 6): nine rounds give a median'), ['numbered work session'])
  t.same(across(' * the hostile peers of issue', ' * 14 — a client or a pod'), ['issue number'])
  t.same(across('// Issue 30: the process-level', '// safety net'), [], 'a phrase on the first line is reported there, not again')
  t.same(across(' * a WebTransport stream of session', ' * 0 and its datagrams'), [], 'product phrasing stays allowed across lines too')
})

t.test('scripts/strip-issue-refs.ts rewrites the mechanical cases', async (t) => {
  const cases: Array<[string, string]> = [
    ['// Issue 30: the process-level safety net', '// The process-level safety net'],
    ['// Issue 14, SPEC §5 and §12: no bytes from a Stargate pod', '// SPEC §5 and §12: no bytes from a Stargate pod'],
    ['// Issue 14 fault suite: clients vanish', '// Fault suite: clients vanish'],
    ['// Issue 30 fault suite, SPEC §12 ("a slow client")', '// Fault suite, SPEC §12 ("a slow client")'],
    [' * Issue 15 benchmark: bulk transfer', ' * Benchmark: bulk transfer'],
    [' * Issue 15 baselines: quinn ↔ quinn direct', ' * Baselines: quinn ↔ quinn direct'],
    ['// Issue 8, 9 and 13: the kustomize overlays', '// The kustomize overlays'],
    [' * Issues 5 and 15, bad input: datagrams', ' * Bad input: datagrams'],
    [' * Issue 15/16: once a tunnel is up', ' * Once a tunnel is up'],
    ['// Issue 30 (critical), on the TLS front door', '// On the TLS front door'],
    [' * Issue 5 with SPEC §8: the listener', ' * SPEC §8: the listener'],
    ['// SPEC §10, issue 9: the peer set', '// SPEC §10: the peer set'],
    ['  // Tunnel port defences (issue 15)', '  // Tunnel port defences'],
    [' * The front door (SPEC §2, issue 17): Fastify', ' * The front door (SPEC §2): Fastify'],
    [' * connection timeouts (SPEC §6, §12; issue 14), enforced', ' * connection timeouts (SPEC §6, §12), enforced'],
    [' * names (issue 17: one copy, shared by the', ' * names (one copy, shared by the'],
    [' * Caps (issue 16, from review of issue 14): every session', ' * Caps: every session'],
    [' * How start-up fails (issue 13, as the Rust router): one line', ' * How start-up fails (as the Rust router): one line'],
    ['//! Benchmark sub-commands (issue 15 "Benchmarks"), each', '//! Benchmark sub-commands, each'],
    ["  t.match(x, /trust bundle/, 'issue 14: no silent fallback')", "  t.match(x, /trust bundle/, 'no silent fallback')"],
    ['// exact frames from a raw socket. Issue 30: streams closed', '// exact frames from a raw socket. Streams closed'],
    [' *   abort it (undici issue 386); dead requests', ' *   abort it (nodejs/undici#386); dead requests'],
    [' * (quinn issue 2785, fixed in PR 2787; not in 0.9.3', ' * (quinn-rs/quinn#2785, fixed in quinn-rs/quinn#2787; not in 0.9.3'],
    ['     fixed upstream in ngtcp2 PR 891, "Update', '     fixed upstream in ngtcp2/ngtcp2#891, "Update'],
  ]
  for (const [before, after] of cases) t.equal(stripIssueRefs(before), after, before)
  const product = 'a WebTransport session 0 with max sessions 1, issued by the CA'
  t.equal(stripIssueRefs(product), product, 'product text is left alone')
  t.notOk(ISSUE_REF.test(stripIssueRefs(cases.map(([before]) => before).join('\n'))), 'no reference is left in the mechanical cases')
})

t.test('no text in the project speaks of its history', async (t) => {
  const files = textFiles().filter((file) => !SELF.has(file))
  t.ok(files.includes('docs/benchmarks.md') && files.includes('lib/quic/native/src/conn.c') && files.includes('deploy/helm/stargate-router/values.yaml'), 'the scan covers docs, C sources and the chart')
  const found: string[] = []
  for (const file of files) {
    let previous = ''
    for (const { line, n } of authoredLines(readFileSync(join(ROOT, file), 'utf8'))) {
      for (const { rule, match } of violationsAcross(previous, line, isProse(file))) found.push(`${file}:${n}: ${rule.name} "${match}" — ${rule.fix}`)
      previous = line
    }
  }
  // Each entry: file:line, the rule, what it matched, and how to say it instead.
  t.strictSame(found, [], `no history talk in docs, deploy files and sources (${found.length} found)`)
})
