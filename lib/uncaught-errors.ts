/**
 * The process's last line of defence: what an exception nobody caught, or a promise
 * rejection nobody handled, does to the router.
 *
 * Handlers and timers that touch a connection are written to hold when it is already closing
 * or gone (lib/safe-io.ts); this is for the one that was missed. Node's default ends the
 * process, and with it every Pylon's registration and tunnel, for a fault that concerned one
 * connection. Here an error is classified by its code:
 *
 *   contained  the call concerned one connection that is already closed, or that its peer or
 *              the network ended (CONTAINED_ERRORS says why for each code): logged (rate-limited
 *              per code), counted in stargate_k8s_router_uncaught_errors_total{kind=<code>},
 *              and the process keeps serving. The rest of the handler that threw did not run,
 *              so that connection's bookkeeping may be off (a gauge, a set entry); the count is
 *              there to alert on, and each one is a bug to fix where it was thrown.
 *   fatal      anything else, including Node's complaints about a call on a live object
 *              (ERR_HTTP2_HEADERS_SENT, ERR_HTTP2_STATUS_INVALID, ERR_INVALID_ARG_TYPE): the
 *              router's own state may be wrong in ways no one can bound, so it is logged with
 *              its stack and the process exits 1 once the log is out, for the orchestrator to
 *              restart it.
 *
 * Only an Error with one of these codes is contained, and an errno code (EPIPE, ECONNRESET …)
 * only from a system call (Node's system errors carry `syscall`): a thrown string or a plain
 * object that happens to have a `code` is fatal.
 */

/** Code → why an uncaught error with it concerns one connection only. */
export const CONTAINED_ERRORS = {
  ERR_HTTP2_INVALID_SESSION: 'a call (goaway, ping, settings) on an HTTP/2 session Node had already destroyed',
  ERR_HTTP2_INVALID_STREAM: 'a call (respond, sendTrailers, additionalHeaders) on an HTTP/2 stream that was already closed or destroyed',
  ERR_HTTP2_GOAWAY_SESSION: 'a new stream on an HTTP/2 session that had sent or received GOAWAY',
  ERR_HTTP2_SOCKET_UNBOUND: 'the socket of an HTTP/2 session read after the session let go of it',
  ERR_HTTP2_SESSION_ERROR: 'an HTTP/2 session that ended with its peer\'s GOAWAY error code, emitted with no listener',
  ERR_HTTP2_STREAM_ERROR: 'an HTTP/2 stream that ended with its peer\'s RST_STREAM error code, emitted with no listener',
  ERR_HTTP2_STREAM_CANCEL: 'an HTTP/2 stream cancelled before it was opened, emitted with no listener',
  ERR_STREAM_DESTROYED: 'a write to a stream or socket that was already destroyed',
  ERR_STREAM_WRITE_AFTER_END: 'a write to a stream or socket that had already ended',
  ERR_STREAM_PREMATURE_CLOSE: 'a stream that closed before it ended (its peer went away)',
  ERR_SOCKET_CLOSED: 'a call on a socket that was already closed',
  ECONNRESET: 'a TCP connection its peer reset',
  EPIPE: 'a write to a TCP connection its peer had closed',
  ECONNABORTED: 'a TCP connection aborted on this side (e.g. by the kernel)',
  ETIMEDOUT: 'a TCP connection or dial the network timed out',
  ECONNREFUSED: 'a dial to one address that was refused',
  EHOSTUNREACH: 'a dial to one address with no route to its host',
  ENETUNREACH: 'a dial to one address whose network is unreachable',
} as const

export type ContainedCode = keyof typeof CONTAINED_ERRORS

/** The label values of stargate_k8s_router_uncaught_errors_total{kind}. */
export const CONTAINED_CODES: readonly ContainedCode[] = Object.keys(CONTAINED_ERRORS) as ContainedCode[]

export type UncaughtClass =
  | { readonly contained: true, readonly code: ContainedCode }
  | { readonly contained: false, readonly code: string | null }

const ERRNO_CODE = /^E[A-Z]+$/

export function classifyUncaught (err: unknown): UncaughtClass {
  if (!(err instanceof Error)) return { contained: false, code: null }
  const { code, syscall } = err as NodeJS.ErrnoException
  if (typeof code !== 'string') return { contained: false, code: null }
  if (!Object.hasOwn(CONTAINED_ERRORS, code)) return { contained: false, code }
  if (ERRNO_CODE.test(code) && typeof syscall !== 'string') return { contained: false, code }
  return { contained: true, code: code as ContainedCode }
}

export type UncaughtSource = 'exception' | 'rejection'

export interface SafetyNetLogger {
  warn (fields: object, msg: string): void
  fatal (fields: object, msg: string): void
}

export interface SafetyNetOptions {
  readonly logger: SafetyNetLogger
  /** A contained error (count it). */
  readonly onContained: (code: ContainedCode) => void
  /** Ends the process with this code once the log lines are out. */
  readonly exit: (code: number) => void
}

/** What the safety net listens on: the process (a test passes an EventEmitter). */
export interface ProcessEvents {
  on (event: 'uncaughtException', listener: (err: unknown) => void): unknown
  on (event: 'unhandledRejection', listener: (reason: unknown) => void): unknown
  off (event: 'uncaughtException', listener: (err: unknown) => void): unknown
  off (event: 'unhandledRejection', listener: (reason: unknown) => void): unknown
}

/** The log line of a contained error (rate-limited per kind, lib/log.ts). */
export const CONTAINED_MESSAGE = 'uncaught error contained to one connection'
export const FATAL_MESSAGE = 'uncaught error: exiting'

/** Classifies, logs and counts or exits (see the file); the function the process events call. */
export function createUncaughtHandler (options: SafetyNetOptions): (err: unknown, source: UncaughtSource) => void {
  let exiting = false
  return function onUncaught (err, source) {
    if (exiting) return // the first fatal error is on its way out; what follows changes nothing
    const verdict = classifyUncaught(err)
    if (verdict.contained) {
      options.onContained(verdict.code)
      options.logger.warn({ kind: verdict.code, source, err }, CONTAINED_MESSAGE)
      return
    }
    exiting = true
    try {
      options.logger.fatal({ code: verdict.code, source, err }, FATAL_MESSAGE)
    } finally {
      options.exit(1)
    }
  }
}

/** Installs the handler on the process's two events; returns the uninstall. */
export function installSafetyNet (proc: ProcessEvents, options: SafetyNetOptions): () => void {
  const handle = createUncaughtHandler(options)
  const onException = (err: unknown): void => { handle(err, 'exception') }
  const onRejection = (reason: unknown): void => { handle(reason, 'rejection') }
  proc.on('uncaughtException', onException)
  proc.on('unhandledRejection', onRejection)
  return () => {
    proc.off('uncaughtException', onException)
    proc.off('unhandledRejection', onRejection)
  }
}
