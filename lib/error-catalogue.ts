/**
 * The shape every area's error table shares (as fastify's lib/errors.js): a code
 * keys an entry with what the user sees, what it means and what to do. The areas' tables live
 * next to the code that sends them (lib/http-forward/errors.ts, lib/control-plane/errors.ts,
 * lib/tunnel/errors.ts, …); lib/errors.ts indexes them, and scripts/docs.ts renders
 * docs/errors.md from that index, so the docs cannot drift from what is sent.
 *
 * A message that names a value has `{name}` placeholders, filled by fillMessage; the type of its
 * fields is read from the template, so a misspelt or missing field fails to compile.
 */

/** What every entry documents: the meaning of the code and what the user should do. */
export interface ErrorDoc {
  readonly meaning: string
  readonly action: string
}

/** The names of a template's `{name}` placeholders. */
export type Placeholders<S extends string> = S extends `${string}{${infer Name}}${infer Rest}` ? Name | Placeholders<Rest> : never

/** True when a template has no placeholder (its text can be serialised once). */
export type IsStatic<S extends string> = [Placeholders<S>] extends [never] ? true : false

/**
 * A template with its placeholders replaced. Only called on error paths, once per error; a
 * value is inserted as given (messages never carry secrets: callers pass names and sizes).
 */
export function fillMessage<S extends string> (template: S, fields: Readonly<Record<Placeholders<S>, string | number>>): string {
  let out = ''
  let from = 0
  for (;;) {
    const open = template.indexOf('{', from)
    const close = open < 0 ? -1 : template.indexOf('}', open)
    if (close < 0) return out + template.slice(from)
    const name = template.slice(open + 1, close) as Placeholders<S>
    out += template.slice(from, open) + String(fields[name])
    from = close + 1
  }
}

/** One row of docs/errors.md. */
export interface CatalogueRow {
  readonly code: string
  /** What the user sees: status and message (placeholders shown as `{name}`). */
  readonly seen: string
  readonly meaning: string
  readonly action: string
}

/** One area's table as the docs and the catalogue test read it. */
export interface CatalogueArea {
  readonly title: string
  /** A sentence on where these errors appear (which port, which protocol). */
  readonly where: string
  /** The exported name of the table, as the code that sends an error references it. */
  readonly table: string
  /** The file that defines the table, relative to the repository root. */
  readonly file: string
  readonly rows: readonly CatalogueRow[]
  /** Paragraphs after the table: answers of the area that are not one of its codes. */
  readonly notes?: readonly string[]
}

/** What an area says of itself around its table. */
export interface AreaText {
  readonly title: string
  /** A sentence on where these errors appear (which port, which protocol). */
  readonly where: string
  /** Paragraphs after the table: answers of the area that are not one of its codes. */
  readonly notes?: readonly string[]
}

/**
 * An area of the catalogue from its table: `name` is the table's exported name and `file` the
 * file that defines it (the catalogue test checks both), `seen` renders what the user sees of
 * one entry; the rows follow the table's order.
 */
export function catalogueArea<E extends ErrorDoc> (table: Readonly<Record<string, E>>, name: string, file: string, seen: (entry: E, code: string) => string, text: AreaText): CatalogueArea {
  const rows = Object.entries(table).map(([code, entry]) => ({ code, seen: seen(entry, code), meaning: entry.meaning, action: entry.action }))
  return { ...text, table: name, file, rows }
}
