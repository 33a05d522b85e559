/**
 * The front door's per-request logger (request.log), bound lazily: Fastify's default
 * builds a pino child per request (Object.create, the bindings serialised to a JSON fragment),
 * while a forwarded request logs nothing unless it fails. This object holds the parent and the
 * bindings Fastify gives it (`{ requestId }`, its requestIdLogLabel) and builds the child on
 * the first line that is enabled, so a line carries the id exactly as before. A level the
 * parent has off is dropped before any child is built.
 *
 * In a CPU profile of the router under load, pino's child() and its bindings' stringify are
 * ~0.45 µs of the ~1.5 µs of JavaScript Fastify adds per request (docs/benchmarks.md).
 */
import type { LogFn } from 'pino'
import type { Logger } from '../log.ts'

type Level = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace'

/** One method per level, shared by every instance through the prototype (no closure per request). */
function levelMethod (level: Level): LogFn {
  return function log (this: RequestLogger, ...args: unknown[]): void {
    if (!this.parent.isLevelEnabled(level)) return
    ;(this.bound()[level] as (...a: unknown[]) => void)(...args)
  } as LogFn
}

export class RequestLogger {
  readonly parent: Logger
  /** What Fastify would have bound: `{ requestId }` (its requestIdLogLabel). */
  readonly bindings: Record<string, unknown>
  #child: Logger | null = null

  constructor (parent: Logger, bindings: Record<string, unknown>) {
    this.parent = parent
    this.bindings = bindings
  }

  /** The pino child carrying the request id, built once. */
  bound (): Logger {
    this.#child ??= this.parent.child(this.bindings)
    return this.#child
  }

  get level (): string {
    return this.parent.level
  }

  isLevelEnabled (level: string): boolean {
    return this.parent.isLevelEnabled(level)
  }

  child (bindings: Record<string, unknown>): Logger {
    return this.bound().child(bindings)
  }

  silent (): void {
    // A silent line is no line.
  }

  declare fatal: LogFn
  declare error: LogFn
  declare warn: LogFn
  declare info: LogFn
  declare debug: LogFn
  declare trace: LogFn
}

for (const level of ['fatal', 'error', 'warn', 'info', 'debug', 'trace'] as const) {
  Object.defineProperty(RequestLogger.prototype, level, { value: levelMethod(level), writable: true, configurable: true })
}
