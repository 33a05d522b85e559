/**
 * The router's shutdown has a budget (SPEC §11: the drain timeout + 1 s whatever is open). Its
 * last steps (closing tunnels, watchers, the TLS reloader, pod pools, the health listener) run
 * side by side and get what is left of it: a step that has not finished by then, a reload
 * stuck on a volume that never answers, say, is left behind by name, since the process exits
 * next anyway. A step that fails counts as finished: shutdown goes on either way.
 */

/** Named steps in flight; undefined for a step that does not apply (no peers). */
export type ShutdownSteps = Readonly<Record<string, Promise<unknown> | undefined>>

/** The names of the steps still running after ms (empty when all ended in time). */
export async function settleWithin (steps: ShutdownSteps, ms: number): Promise<string[]> {
  const pending = new Set<string>()
  const all: Array<Promise<unknown>> = []
  for (const [name, step] of Object.entries(steps)) {
    if (step === undefined) continue
    pending.add(name)
    all.push(step.then(() => { pending.delete(name) }, () => { pending.delete(name) }))
  }
  let timer: NodeJS.Timeout | null = null
  await Promise.race([
    Promise.all(all),
    new Promise<void>((resolve) => { timer = setTimeout(resolve, Math.max(0, ms)) }),
  ])
  if (timer !== null) clearTimeout(timer)
  return [...pending]
}
