/**
 * pino logger factory. JSON lines by default; pretty output only when asked.
 *
 * Two guards apply to every line: secrets are redacted at any depth
 * (lib/log-redact.ts), so a header object logged by mistake never leaks a token or a cookie;
 * and the lines an unauthenticated peer can cause at will are rate-limited per reason
 * (lib/log-rate-limit.ts), so a connection loop cannot flood the log.
 */
import { pino, type Logger, type DestinationStream, type LogFn } from 'pino'
import { redactSecrets } from './log-redact.ts'
import { LogRateLimiter, type LimitedMessage } from './log-rate-limit.ts'
import { CONTAINED_MESSAGE } from './uncaught-errors.ts'

export type { Logger }

/** What per-request code logs through: a pino child, or the front door's lazily bound one. */
export type RequestLog = Pick<Logger, 'error' | 'warn' | 'debug' | 'isLevelEnabled'>

/**
 * Messages a peer that has not authenticated (or a misbehaving pod) can trigger once per
 * connection or request. A prefix ends with '*'; `by` names the bounded field that splits the
 * limit (never free text the peer chose).
 */
export const PEER_TRIGGERED_MESSAGES: readonly LimitedMessage[] = [
  { msg: 'front door tls handshake failed' },
  { msg: 'front door http/1.1 client error' },
  { msg: 'front door http2 session error' },
  { msg: 'front door accept error', by: 'code' },
  { msg: 'health listener accept error', by: 'code' },
  { msg: 'closing http2 connection: rapid stream resets (GOAWAY ENHANCE_YOUR_CALM)' },
  { msg: 'raw quic handshake refused', by: 'reason' },
  { msg: 'raw quic tunnel: dialing the stargate failed', by: 'target' },
  { msg: 'raw quic tunnel closed', by: 'outcome' },
  { msg: 'webtransport http/3 handshake refused', by: 'reason' },
  { msg: 'webtransport http/3 session refused: *', by: 'code' },
  { msg: 'webtransport http/3 dial could not start', by: 'target' },
  { msg: 'webtransport tls handshake failed' },
  { msg: 'webtransport http2 session error' },
  { msg: 'closing webtransport http2 connection: rapid stream resets (GOAWAY ENHANCE_YOUR_CALM)' },
  { msg: 'webtransport session request rejected: *' },
  { msg: 'webtransport session to *', by: 'code' },
  { msg: 'stargate target sent an invalid response' },
  { msg: 'upstream request failed' },
  { msg: 'upstream failed mid-response' },
  // What the API server (or anything answering in its place) sends.
  { msg: 'endpointslice watch object ignored: not a slice of the target service', by: 'reason' },
  { msg: 'peer endpointslice watch object ignored: not a slice of the peer service', by: 'reason' },
  // A contained uncaught error (lib/uncaught-errors.ts): a peer may find a way to repeat one.
  { msg: CONTAINED_MESSAGE, by: 'kind' },
]

export interface LogRateLimit {
  readonly windowMs: number
  /** Lines per message (and reason) per window before the rest is only counted. */
  readonly burst: number
}

const DEFAULT_LOG_RATE_LIMIT: LogRateLimit = { windowMs: 10_000, burst: 20 }

export interface LoggerOptions {
  readonly level: string
  readonly format: 'json' | 'pretty'
  readonly destination?: DestinationStream
  readonly rateLimit?: LogRateLimit
  readonly now?: () => number
}

export function createLogger (options: LoggerOptions): Logger {
  const limit = options.rateLimit ?? DEFAULT_LOG_RATE_LIMIT
  let logger: Logger | null = null
  const limiter = new LogRateLimiter({
    messages: PEER_TRIGGERED_MESSAGES,
    windowMs: limit.windowMs,
    burst: limit.burst,
    now: options.now,
    onSuppressed: (message, reason, suppressed) => {
      logger?.warn({ message, reason, suppressed, windowMs: limit.windowMs }, 'log lines suppressed')
    },
  })
  const base = {
    level: options.level,
    base: { name: 'stargate-router' },
    formatters: { log: redactSecrets },
    hooks: {
      logMethod (this: Logger, args: Parameters<LogFn>, method: LogFn): void {
        const first = args[0] as unknown
        const fields = typeof first === 'object' && first !== null ? first as Record<string, unknown> : null
        const msg = fields === null ? first : args[1]
        if (typeof msg === 'string' && !limiter.allow(msg, fields)) return
        method.apply(this, args)
      },
    },
  }
  if (options.destination !== undefined) logger = pino(base, options.destination)
  else if (options.format === 'pretty') logger = pino({ ...base, transport: { target: 'pino-pretty', options: { destination: 1 } } })
  else logger = pino(base, pino.destination({ dest: 1, sync: false }))
  return logger
}
