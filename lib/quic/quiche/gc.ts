/**
 * A full garbage collection on demand, for the driver's native-memory housekeeping
 * (driver.ts collectGarbage). Uses globalThis.gc when the process runs with --expose-gc,
 * else exposes it at run time (v8.setFlagsFromString + a fresh context, the documented way to
 * reach a flag-defined global); null when neither works.
 */
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'

export function fullGc (): (() => void) | null {
  const existing = (globalThis as { gc?: () => void }).gc
  if (typeof existing === 'function') return existing
  try {
    setFlagsFromString('--expose-gc')
    const gc: unknown = runInNewContext('gc')
    return typeof gc === 'function' ? gc as () => void : null
  } catch {
    return null
  }
}
