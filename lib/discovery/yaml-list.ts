/**
 * The front half of both watched list files, targets and peers (SPEC §3 rule 8, issue 17):
 * YAML or JSON text holding a bare list or an object with one named list. Pure; the callers
 * check the entries.
 */
import { parse as parseYaml } from 'yaml'

export type YamlListResult =
  | { readonly ok: true, readonly list: readonly unknown[] }
  | { readonly ok: false, readonly error: string }

/** `key` names the list both in an object (`{ targets: [...] }`) and in the error message. */
export function parseYamlList (text: string, key: string): YamlListResult {
  let doc: unknown
  try {
    doc = parseYaml(text)
  } catch (err) {
    // The yaml library's first line ends with ':' before a source excerpt on the next lines.
    return { ok: false, error: `not valid YAML or JSON: ${((err as Error).message.split('\n')[0] ?? '').replace(/:$/, '')}` }
  }
  const list = Array.isArray(doc) ? doc : (typeof doc === 'object' && doc !== null ? (doc as Record<string, unknown>)[key] : undefined)
  if (!Array.isArray(list)) return { ok: false, error: `expected a list of ${key} or an object with a "${key}" list` }
  return { ok: true, list }
}

/** A port number from a parsed file entry, or null when it is not an integer in 1..65535. */
export function portOf (value: unknown): number | null {
  return typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= 65535 ? value : null
}
