/**
 * Removes references to the project's own issue tracker from comments and docs: a reader
 * outside cannot open "issue 30", so a comment says what the code guards against and names the
 * SPEC or RFC section instead. test/unit/docs-no-history.test.ts keeps the tree free of them (and
 * of other history talk); this script does the mechanical part:
 *
 *   leading references   "Issue 30: x" → "X", "Issue 14, SPEC §5: x" → "SPEC §5: x",
 *                        "Issue 14 fault suite: x" → "Fault suite: x", "Issues 5 and 15, x" → "X"
 *   in parentheses       "(issue 17)" → "", "(SPEC §6, issue 14)" → "(SPEC §6)",
 *                        "(issue 30: the rule)" → "(the rule)"
 *   elsewhere            "issue 14: no silent fallback" → "no silent fallback"
 *   other projects       "undici issue 386" → "nodejs/undici#386" (an address one can open)
 *
 * What it cannot rewrite (a reference inside a sentence) it lists as file:line, and the exit code
 * is 1 until those are reworded by hand.
 *
 *   node scripts/strip-issue-refs.ts                 list what would change and what is left
 *   node scripts/strip-issue-refs.ts --write         rewrite the files in place
 *   node scripts/strip-issue-refs.ts --write lib/x   only under the paths given
 *
 * Default paths: the source trees (lib, server, test, bench, scripts) and the docs.
 */
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = fileURLToPath(new URL('..', import.meta.url))

/** Where project text lives: docs, deployment files and every source tree. */
export const PROJECT_PATHS = ['README.md', '.env.example', 'docs', 'deploy', 'lib', 'server', 'scripts', 'test', 'bench'] as const

/** Build output and third-party trees inside those paths. */
const SKIPPED_DIRS = new Set(['node_modules', 'target', 'build', '.git', '.tap', '.cache', 'coverage'])
const TEXT_FILE = /\.(?:ts|mts|mjs|cjs|js|c|h|gyp|md|ya?ml|json|sh|py|rs|toml|txt|tpl|proto)$|\.env\.example$|(?:^|\/)\.helmignore$/

/** The text files under the given paths (relative to the repository root), sorted. */
export function textFiles (paths: readonly string[] = PROJECT_PATHS): string[] {
  const out: string[] = []
  const visit = (rel: string): void => {
    const abs = join(ROOT, rel)
    let stat
    try {
      stat = statSync(abs)
    } catch {
      return
    }
    if (stat.isDirectory()) {
      for (const entry of readdirSync(abs, { withFileTypes: true })) {
        if (entry.isDirectory() && SKIPPED_DIRS.has(entry.name)) continue
        visit(rel === '' ? entry.name : `${rel}/${entry.name}`)
      }
    } else if (stat.isFile() && TEXT_FILE.test(rel)) {
      out.push(rel)
    }
  }
  for (const path of paths) visit(path.replace(/\/+$/, ''))
  return out.sort()
}

/** A reference to an issue of this project: "issue 30", "Issues 5 and 15", "issue #12". */
export const ISSUE_REF = /\bissues? #?\d+/i

/** Other projects' trackers, written so that a reader can open them. */
const UPSTREAM_REPOS: Readonly<Record<string, string>> = {
  quinn: 'quinn-rs/quinn',
  undici: 'nodejs/undici',
  ngtcp2: 'ngtcp2/ngtcp2',
  nghttp2: 'nghttp2/nghttp2',
  fastify: 'fastify/fastify',
}

const NUMBERS = String.raw`#?\d+(?:\s*(?:,|and|\/|–|-)\s*#?\d+)*`
/**
 * A reference opening a comment line: "Issue 30", "Issues 5 and 15", "Issue 8, 9 and 13",
 * "Issue 15/16", with an optional "(note)" and "fault suite" / "benchmark" / "baselines", then
 * its separator and the first character of what follows.
 */
const LEADING = new RegExp(String.raw`^(\s*(?:\/\/!?|\/\*\*?|\*|#|<!--)?\s*)Issues? ${NUMBERS}(?:\s*\([^)]*\))?` +
  String.raw`(?:\s+(fault suite|benchmark|baselines?))?(\s+with\s+(?=SPEC\b)|\s*[:,]\s*|\s+(?=SPEC\b)|\s*$)(.?)`)
const PARENTHESES = /\s?\(([^()]*\bissues? #?\d+[^()]*)\)/gi
/** A part of a parenthesis that is only a reference: "issue 14", "from review of issue 14", 'issue 15 "Benchmarks"'. */
const REFERENCE_ONLY = new RegExp(String.raw`^(?:(?:found in|from) review of )?issues? ${NUMBERS}(?:\s+"[^"]*")?$`, 'i')
const REFERENCE_PREFIX = new RegExp(String.raw`^issues? ${NUMBERS}\s*[:,]\s*`, 'i')
/** "SPEC §10, issue 9: x" → "SPEC §10: x". */
const TRAILING = new RegExp(String.raw`,\s*issues? ${NUMBERS}(?=:)`, 'gi')
/** "issue 30: x" after an opening parenthesis, a quote, a sentence's end or at the start. */
const INLINE_PREFIX = new RegExp(String.raw`(^|[("'\x60]\s*|[.;!?]\s+)[Ii]ssues? ${NUMBERS}:(?:\s+|$)(.?)`, 'g')
const OTHER_PROJECT = /\b([A-Za-z0-9]+) (?:issue|PR|pull request) #?(\d+)/gi
/** "quinn-rs/quinn#2785, fixed in PR 2787" → "…, fixed in quinn-rs/quinn#2787". */
const SAME_PROJECT_PR = /\b([\w.-]+\/[\w.-]+)#(\d+)([^()]*?)\bPR #?(\d+)/g

function capitalize (text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1)
}

/** The content of a parenthesis without its issue references; '' when nothing else was in it. */
function withoutReferences (content: string): string {
  const parts = content.split(/(\s*[,;]\s*)/)
  const kept: string[] = []
  for (let i = 0; i < parts.length; i += 2) {
    const part = parts[i] ?? ''
    if (REFERENCE_ONLY.test(part.trim())) continue
    if (kept.length > 0) kept.push(parts[i - 1] ?? ', ')
    kept.push(part.replace(REFERENCE_PREFIX, ''))
  }
  return kept.join('')
}

/** One line with this project's issue references removed where the rewrite is mechanical. */
export function stripLine (line: string): string {
  let out = line.replace(OTHER_PROJECT, (whole, project: string, n: string) => {
    const repo = UPSTREAM_REPOS[project.toLowerCase()]
    return repo === undefined ? whole : `${repo}#${n}`
  })
  out = out.replace(SAME_PROJECT_PR, (_whole, repo: string, n: string, between: string, pr: string) => `${repo}#${n}${between}${repo}#${pr}`)
  out = out.replace(TRAILING, '')
  out = out.replace(LEADING, (_whole, lead: string, kind: string | undefined, separator: string, next: string) => {
    if (kind === undefined) return lead + next.toUpperCase()
    return `${lead}${capitalize(kind)}${separator.includes(',') ? ', ' : ': '}${next}`
  })
  out = out.replace(PARENTHESES, (whole, content: string) => {
    const kept = withoutReferences(content)
    if (kept.trim() === '') return ''
    return `${whole.startsWith(' ') ? ' ' : ''}(${kept})`
  })
  return out.replace(INLINE_PREFIX, (_whole, before: string, next: string) =>
    before + (before.trim() === '' || /[.!?]\s*$/.test(before) ? next.toUpperCase() : next))
}

/** The text with this project's issue references removed where the rewrite is mechanical. */
export function stripIssueRefs (text: string): string {
  return text.split('\n').map(stripLine).join('\n')
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2)
  const write = args.includes('--write')
  const paths = args.filter((a) => !a.startsWith('--'))
  let changed = 0
  const left: string[] = []
  for (const file of textFiles(paths.length > 0 ? paths.map((p) => relative(ROOT, join(process.cwd(), p))) : PROJECT_PATHS)) {
    if (file === 'scripts/strip-issue-refs.ts' || file === 'test/unit/docs-no-history.test.ts') continue
    const before = readFileSync(join(ROOT, file), 'utf8')
    const after = stripIssueRefs(before)
    if (after !== before) {
      changed++
      if (write) writeFileSync(join(ROOT, file), after)
      else console.log(`would change ${file}`)
    }
    after.split('\n').forEach((line, i) => {
      if (ISSUE_REF.test(line)) left.push(`${file}:${i + 1}: ${line.trim()}`)
    })
  }
  console.log(`${write ? 'changed' : 'would change'} ${changed} files`)
  if (left.length > 0) {
    console.log(`\nreferences left to reword by hand (${left.length}):\n${left.join('\n')}`)
    process.exitCode = 1
  }
}
