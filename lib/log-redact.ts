/**
 * Secret redaction for log objects (SPEC §12). pino's path-based redaction only
 * reaches fixed depths, so a header object logged one level deeper than foreseen (an error's
 * request, a debug dump) would print a bearer token or a cookie. This walks the object instead,
 * at any depth up to MAX_DEPTH, and replaces the value of every sensitive key, compared
 * case-insensitively, with '[redacted]'; in flat raw header lists ([name, value, ...]) the value
 * after a sensitive name is replaced too. Objects are copied only along paths that change, so a
 * log line without secrets costs a walk and no allocation.
 */

const REDACTED = '[redacted]'

/** Lower-case keys whose values are never logged (headers, credentials). */
const SENSITIVE_KEYS: ReadonlySet<string> = new Set([
  'authorization', 'proxy-authorization', 'cookie', 'set-cookie', 'x-api-key', 'x-stargate-auth-token',
  'token', 'key', 'privatekey', 'password', 'secret',
])

/** Deeper than any object the router logs; bounds the walk on cyclic or hostile input. */
const MAX_DEPTH = 12

function isSensitive (name: string): boolean {
  return SENSITIVE_KEYS.has(name.length < 32 ? name.toLowerCase() : name)
}

function isPlainObject (value: object): value is Record<string, unknown> {
  const proto = Object.getPrototypeOf(value) as unknown
  return proto === Object.prototype || proto === null
}

function redactValue (value: unknown, depth: number): unknown {
  if (value === null || typeof value !== 'object' || depth > MAX_DEPTH) return value
  if (Array.isArray(value)) return redactArray(value, depth)
  // Errors, Buffers, Dates… are serialised by pino itself; only plain data is walked.
  if (!isPlainObject(value)) return value
  let out: Record<string, unknown> | null = null
  for (const key in value) {
    const before = value[key]
    const after = isSensitive(key) ? (before === undefined ? before : REDACTED) : redactValue(before, depth + 1)
    if (after !== before) {
      out ??= { ...value }
      out[key] = after
    }
  }
  return out ?? value
}

function redactArray (list: readonly unknown[], depth: number): unknown[] {
  let out: unknown[] | null = null
  for (let i = 0; i < list.length; i++) {
    const before = list[i]
    const previous = i > 0 ? list[i - 1] : undefined
    // A raw header list: the value that follows a sensitive field name.
    const after = typeof previous === 'string' && typeof before === 'string' && isSensitive(previous) ? REDACTED : redactValue(before, depth + 1)
    if (after !== before) {
      out ??= list.slice()
      out[i] = after
    }
  }
  return out ?? (list as unknown[])
}

/** The log object with every sensitive value replaced (the same object when there is none). */
export function redactSecrets<T extends Record<string, unknown>> (object: T): T {
  return redactValue(object, 0) as T
}
