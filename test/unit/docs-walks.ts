/**
 * The walks of docs/architecture.md checked against the code: a walk is a numbered list of
 * steps, each naming first (in backticks) the file the work enters, and in backticks the
 * function or callback by which the previous step's file hands over to it. Two consecutive
 * files are joined when one imports (or #includes, directly or through a header) the other, or
 * by a name the later step gives, read in the code with comments stripped:
 * - between two C files, a name both use that a header both include declares;
 * - otherwise, a name one file defines (a TypeScript method, function or function-valued
 *   property; a function the addon registers in C) and the other, in TypeScript, calls as a
 *   member, unless the caller imports another file that defines it (the call goes there).
 * Pure text reading: `read` gives a file's text, or null when it is absent.
 */
import { dirname, join, normalize } from 'node:path'

export type ReadSource = (path: string) => string | null

export interface WalkStep {
  readonly file: string
  /** The identifiers the step names in backticks (the last name of a dotted or called one). */
  readonly names: readonly string[]
  readonly text: string
}

export interface WalkFigures {
  readonly files: number
  readonly typescript: number
  readonly c: number
  /** Consecutive steps from a TypeScript file to a C file or back. */
  readonly crossings: number
  /** Files of server/ the walk enters. */
  readonly server: number
}

const PATH = /`((?:lib|server)\/[\w./-]+\.(?:ts|c|h))`/g
const STEP = /^\d+\. /
const NAME = /^(?:[\w$#]+\.)*([A-Za-z_$#][\w$]*)(?:\(\))?$/
const TS_IMPORT = /^\s*(?:import|export)\s[^'";]*?from\s+'(\.{1,2}\/[^']+)'|\bimport\(\s*'(\.{1,2}\/[^']+)'\s*\)/gm
const C_INCLUDE = /^\s*#\s*include\s+"([^"]+)"/gm

const isC = (path: string): boolean => path.endsWith('.c') || path.endsWith('.h')

/** The steps of one walk's text (a numbered list; a step's continuation lines are indented). */
export function stepsOf (walk: string): WalkStep[] {
  const steps: string[] = []
  for (const line of walk.split('\n')) {
    if (STEP.test(line)) steps.push(line)
    else if (steps.length > 0 && /^\s+\S/.test(line)) steps[steps.length - 1] += ' ' + line.trim()
    else if (steps.length > 0 && line.trim() !== '') break
  }
  return steps.map((text) => {
    const file = text.match(/`((?:lib|server)\/[\w./-]+\.(?:ts|c|h))`/)?.[1] ?? ''
    const names: string[] = []
    for (const span of text.matchAll(/`([^`]+)`/g)) {
      const name = (span[1] as string).match(NAME)?.[1]
      if (name !== undefined && name.replace('#', '').length >= 3) names.push(name)
    }
    return { file, names, text }
  })
}

/** Every lib/ or server/ file a text names in backticks. */
export function pathsIn (text: string): string[] {
  return [...text.matchAll(PATH)].map((m) => m[1] as string)
}

/** Source text without comments (string literals kept, so names an addon registers count). */
export function withoutComments (source: string): string {
  let out = ''
  let i = 0
  while (i < source.length) {
    const ch = source[i] as string
    const next = source[i + 1]
    if (ch === '/' && next === '*') {
      const end = source.indexOf('*/', i + 2)
      i = end < 0 ? source.length : end + 2
      out += ' '
    } else if (ch === '/' && next === '/') {
      const end = source.indexOf('\n', i)
      i = end < 0 ? source.length : end
    } else if (ch === '"' || ch === "'" || ch === '`') {
      let j = i + 1
      while (j < source.length && source[j] !== ch && source[j] !== '\n') j += source[j] === '\\' ? 2 : 1
      out += source.slice(i, j + 1)
      i = j + 1
    } else {
      out += ch
      i++
    }
  }
  return out
}

/** The repository paths a file imports (TypeScript, relative) or includes (C, quoted). */
export function dependenciesOf (path: string, source: string): string[] {
  const pattern = isC(path) ? C_INCLUDE : TS_IMPORT
  return [...source.matchAll(pattern)].map((m) => normalize(join(dirname(path), (m[1] ?? m[2]) as string)))
}

const escape = (name: string): string => name.replace(/[$#]/g, (c) => '\\' + c)

function occurs (name: string, code: string): boolean {
  return new RegExp(`(?<![\\w$#])${escape(name)}(?![\\w$])`).test(code)
}

/**
 * Whether code defines name as something another file can be handed to: a method, function or
 * function-valued property in TypeScript (`name (`, `name: (`, `function name`), a function
 * the addon registers in C (`"name"`).
 */
function defines (name: string, code: string, c: boolean): boolean {
  const n = escape(name)
  if (c) return new RegExp(`"${n}"`).test(code)
  return new RegExp(`(?:^|[\\s{;,])(?:function\\s+)?${n}\\??\\s\\(|(?:^|[\\s{;,])${n}\\??:\\s*(?:async\\s*)?\\(|function\\s+${n}\\s*\\(`, 'm').test(code)
}

/** Whether TypeScript code calls or passes name as a member (`.name(`, `.name?.(`, `.name`). */
function uses (name: string, code: string): boolean {
  return new RegExp(`\\.${escape(name)}(?![\\w$])`).test(code)
}

/**
 * Why file a and file b (the step naming `names`) are joined, or null when they are not.
 */
export function joinOf (a: string, b: string, names: readonly string[], read: ReadSource): string | null {
  const sourceA = read(a)
  const sourceB = read(b)
  if (sourceA === null || sourceB === null) return null
  if (dependenciesOf(a, sourceA).includes(b)) return `${a} imports ${b}`
  if (dependenciesOf(b, sourceB).includes(a)) return `${b} imports ${a}`
  if (isC(a) && headersOf(a, read).includes(b)) return `${a} includes ${b}`
  if (isC(b) && headersOf(b, read).includes(a)) return `${b} includes ${a}`
  const code = new Map([[a, withoutComments(sourceA)], [b, withoutComments(sourceB)]])
  for (const name of names) {
    if (!occurs(name, code.get(a) as string) || !occurs(name, code.get(b) as string)) continue
    if (isC(a) && isC(b)) {
      const shared = headersOf(a, read).filter((h) => headersOf(b, read).includes(h))
      const header = shared.find((h) => occurs(name, withoutComments(read(h) ?? '')))
      if (header !== undefined) return `\`${name}\` declared in ${header}, which both include`
      continue
    }
    for (const [definer, user] of [[a, b], [b, a]] as const) {
      if (isC(user) || !defines(name, code.get(definer) as string, isC(definer)) || !uses(name, code.get(user) as string)) continue
      // A TypeScript call resolves to what the caller imports: a name another of its imports defines is not a hand-over to this file.
      const other = isC(definer) ? undefined : dependenciesOf(user, read(user) ?? '').find((dep) => dep !== definer && defines(name, withoutComments(read(dep) ?? ''), false))
      if (other === undefined) return `${definer} defines \`${name}\`, ${user} calls it`
    }
  }
  return null
}

/** The headers a C file includes, directly or through other headers. */
function headersOf (path: string, read: ReadSource): string[] {
  const seen = new Set<string>()
  const visit = (file: string): void => {
    for (const header of dependenciesOf(file, read(file) ?? '')) {
      if (seen.has(header)) continue
      seen.add(header)
      visit(header)
    }
  }
  visit(path)
  return [...seen]
}

/** What is wrong with a walk: a step without a file, a file that does not exist, a pair not joined, a file named but not walked. */
export function walkProblems (walk: string, read: ReadSource): string[] {
  const problems: string[] = []
  const steps = stepsOf(walk)
  if (steps.length === 0) problems.push('no numbered steps')
  steps.forEach((step, i) => {
    if (step.file === '') {
      problems.push(`step ${i + 1} names no file first`)
      return
    }
    if (read(step.file) === null) problems.push(`step ${i + 1}: ${step.file} does not exist`)
    const previous = steps[i - 1]
    if (previous === undefined || previous.file === '' || previous.file === step.file) return
    if (joinOf(previous.file, step.file, step.names, read) === null) {
      problems.push(`step ${i + 1}: ${previous.file} → ${step.file} is not joined by an import or by a name the step gives (${step.names.join(', ') || 'none'})`)
    }
  })
  const walked = new Set(steps.map((step) => step.file))
  for (const path of pathsIn(walk)) if (!walked.has(path)) problems.push(`${path} is named but is no step's file`)
  return problems
}

/** The figures a walk's table row states. */
export function figuresOf (walk: string): WalkFigures {
  const steps = stepsOf(walk)
  const files = [...new Set(steps.map((step) => step.file))]
  let crossings = 0
  for (let i = 1; i < steps.length; i++) if (isC((steps[i - 1] as WalkStep).file) !== isC((steps[i] as WalkStep).file)) crossings++
  return {
    files: files.length,
    typescript: files.filter((file) => file.endsWith('.ts')).length,
    c: files.filter(isC).length,
    crossings,
    server: files.filter((file) => file.startsWith('server/')).length,
  }
}
