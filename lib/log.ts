/**
 * pino logger factory. JSON lines by default; pretty output only when asked. Secrets are
 * redacted by path so that a header object logged by mistake never leaks a token.
 */
import { pino, type Logger, type DestinationStream } from 'pino'

export type { Logger }

export const REDACT_PATHS = [
  'authorization', '*.authorization', '*.*.authorization',
  'token', '*.token', 'key', '*.key', 'privateKey', '*.privateKey',
  '"x-stargate-auth-token"', '*["x-stargate-auth-token"]', '*.*["x-stargate-auth-token"]',
]

export function createLogger (options: { level: string, format: 'json' | 'pretty', destination?: DestinationStream }): Logger {
  const base = {
    level: options.level,
    base: { name: 'stargate-router' },
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
  }
  if (options.destination !== undefined) return pino(base, options.destination)
  if (options.format === 'pretty') {
    return pino({ ...base, transport: { target: 'pino-pretty', options: { destination: 1 } } })
  }
  return pino(base, pino.destination({ dest: 1, sync: false }))
}
