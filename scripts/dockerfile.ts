/**
 * The subset of the Dockerfile format our Dockerfile uses, parsed into stages of typed
 * instructions, so `npm run image-smoke` (scripts/image-smoke.ts) builds what the file says
 * rather than a copy of it. Pure: text in, stages out. Anything outside the subset is an
 * error naming the line, so the smoke run cannot silently skip an instruction a real build
 * would run.
 *
 * Known: FROM <image> [AS <name>], ARG (ignored: none is referenced), ENV k=v… or ENV k v,
 * WORKDIR, RUN <shell>, COPY [--from=<stage>] <src>… <dest>, USER, EXPOSE and LABEL
 * (metadata), ENTRYPOINT / CMD in exec (JSON) form. Comments, blank lines and backslash
 * line continuations as Docker reads them.
 */

export type Instruction =
  | { readonly kind: 'run', readonly command: string, readonly line: number }
  | { readonly kind: 'copy', readonly from: string | null, readonly sources: readonly string[], readonly dest: string, readonly line: number }
  | { readonly kind: 'env', readonly vars: ReadonlyArray<readonly [string, string]>, readonly line: number }
  | { readonly kind: 'workdir', readonly path: string, readonly line: number }
  | { readonly kind: 'user', readonly user: string, readonly line: number }
  | { readonly kind: 'entrypoint' | 'cmd', readonly argv: readonly string[], readonly line: number }
  | { readonly kind: 'metadata', readonly keyword: 'EXPOSE' | 'LABEL' | 'ARG', readonly text: string, readonly line: number }

export interface Stage {
  readonly base: string
  readonly name: string | null
  readonly line: number
  readonly instructions: readonly Instruction[]
}

export class DockerfileError extends Error {
  readonly line: number
  constructor (line: number, message: string) {
    super(`Dockerfile line ${line}: ${message}`)
    this.name = 'DockerfileError'
    this.line = line
  }
}

/** Logical lines: comments dropped, `\` continuations joined; each with its first line number. */
export function logicalLines (text: string): Array<{ readonly line: number, readonly text: string }> {
  const out: Array<{ line: number, text: string }> = []
  let pending: { line: number, text: string } | null = null
  const physical = text.split('\n')
  for (let i = 0; i < physical.length; i++) {
    const raw = (physical[i] ?? '').replace(/\r$/, '')
    const trimmed = raw.trim()
    // A comment line inside a continuation is dropped too, as Docker does.
    if (trimmed.startsWith('#')) continue
    if (pending === null && trimmed === '') continue
    const continued = raw.endsWith('\\')
    const part = continued ? raw.slice(0, -1) : raw
    if (pending === null) pending = { line: i + 1, text: part.trim() }
    else pending.text += ' ' + part.trim()
    if (!continued) {
      out.push(pending)
      pending = null
    }
  }
  if (pending !== null) out.push(pending)
  return out
}

function splitWords (text: string): string[] {
  return text.split(/\s+/).filter((w) => w !== '')
}

function execForm (keyword: string, rest: string, line: number): string[] {
  let parsed: unknown
  try {
    parsed = JSON.parse(rest)
  } catch {
    throw new DockerfileError(line, `${keyword} must be in exec form (a JSON array), got ${rest}`)
  }
  if (!Array.isArray(parsed) || !parsed.every((a) => typeof a === 'string')) {
    throw new DockerfileError(line, `${keyword} must be a JSON array of strings`)
  }
  return parsed as string[]
}

function parseEnv (rest: string, line: number): Array<[string, string]> {
  if (!rest.includes('=')) {
    const [key, ...value] = splitWords(rest)
    if (key === undefined || value.length === 0) throw new DockerfileError(line, 'ENV needs a name and a value')
    return [[key, value.join(' ')]]
  }
  return splitWords(rest).map((pair) => {
    const at = pair.indexOf('=')
    if (at <= 0) throw new DockerfileError(line, `ENV expects name=value pairs, got ${pair}`)
    const value = pair.slice(at + 1)
    if (value.includes('$') || value.startsWith('"') || value.startsWith("'")) throw new DockerfileError(line, `ENV values with quotes or variables are not supported: ${pair}`)
    return [pair.slice(0, at), value]
  })
}

function parseCopy (rest: string, line: number): Instruction {
  const words = splitWords(rest)
  let from: string | null = null
  while (words[0]?.startsWith('--') === true) {
    const flag = words.shift() as string
    if (flag.startsWith('--from=')) from = flag.slice('--from='.length)
    else throw new DockerfileError(line, `COPY ${flag} is not supported`)
  }
  if (words.length < 2) throw new DockerfileError(line, 'COPY needs a source and a destination')
  const dest = words.pop() as string
  if (words.some((w) => /[*?[]/.test(w))) throw new DockerfileError(line, 'COPY sources with wildcards are not supported')
  if (words.length > 1 && !dest.endsWith('/')) throw new DockerfileError(line, 'COPY of several sources needs a destination ending in /')
  return { kind: 'copy', from, sources: words, dest, line }
}

export function parseDockerfile (text: string): Stage[] {
  const stages: Array<{ base: string, name: string | null, line: number, instructions: Instruction[] }> = []
  for (const { line, text: logical } of logicalLines(text)) {
    const space = logical.search(/\s/)
    const keyword = (space < 0 ? logical : logical.slice(0, space)).toUpperCase()
    const rest = space < 0 ? '' : logical.slice(space + 1).trim()
    if (keyword === 'FROM') {
      const words = splitWords(rest)
      const base = words[0]
      if (base === undefined) throw new DockerfileError(line, 'FROM needs an image')
      if (words.length !== 1 && !(words.length === 3 && words[1]?.toUpperCase() === 'AS')) throw new DockerfileError(line, `FROM <image> [AS <name>], got FROM ${rest}`)
      stages.push({ base, name: words[2] ?? null, line, instructions: [] })
      continue
    }
    const stage = stages.at(-1)
    if (stage === undefined) throw new DockerfileError(line, `${keyword} before the first FROM`)
    switch (keyword) {
      case 'RUN':
        if (rest.startsWith('[')) throw new DockerfileError(line, 'RUN in exec form is not supported')
        stage.instructions.push({ kind: 'run', command: rest, line })
        break
      case 'COPY': stage.instructions.push(parseCopy(rest, line)); break
      case 'ENV': stage.instructions.push({ kind: 'env', vars: parseEnv(rest, line), line }); break
      case 'WORKDIR': stage.instructions.push({ kind: 'workdir', path: rest, line }); break
      case 'USER': stage.instructions.push({ kind: 'user', user: rest, line }); break
      case 'ENTRYPOINT': stage.instructions.push({ kind: 'entrypoint', argv: execForm(keyword, rest, line), line }); break
      case 'CMD': stage.instructions.push({ kind: 'cmd', argv: execForm(keyword, rest, line), line }); break
      case 'EXPOSE': case 'LABEL': case 'ARG':
        stage.instructions.push({ kind: 'metadata', keyword, text: rest, line })
        break
      default: throw new DockerfileError(line, `${keyword} is not an instruction scripts/image-smoke.ts knows`)
    }
  }
  if (stages.length === 0) throw new DockerfileError(1, 'no FROM')
  return stages
}

/** What the last stage leaves as the image's run configuration. */
export interface ImageConfig {
  readonly env: ReadonlyMap<string, string>
  readonly workdir: string
  readonly user: string
  readonly entrypoint: readonly string[]
  readonly cmd: readonly string[]
}

/** Docker's default PATH for a container whose image sets none (the node images set none). */
export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

export function imageConfigOf (stage: Stage): ImageConfig {
  const env = new Map<string, string>([['PATH', DEFAULT_PATH]])
  let workdir = '/'
  let user = 'root'
  let entrypoint: readonly string[] = []
  let cmd: readonly string[] = []
  for (const step of stage.instructions) {
    switch (step.kind) {
      case 'env': for (const [k, v] of step.vars) env.set(k, v); break
      case 'workdir': workdir = step.path.startsWith('/') ? step.path : `${workdir.replace(/\/$/, '')}/${step.path}`; break
      case 'user': user = step.user; break
      case 'entrypoint': entrypoint = step.argv; cmd = []; break
      case 'cmd': cmd = step.argv; break
      case 'run': case 'copy': case 'metadata': break
      default: {
        const never: never = step
        throw new Error(`unexpected instruction ${String(never)}`)
      }
    }
  }
  return { env, workdir, user, entrypoint, cmd }
}
