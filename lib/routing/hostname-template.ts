/**
 * The advertised hostname template (SPEC §4): `{pod_name}` and `{namespace}` placeholders.
 * render() builds the advertised host of a pod; match() maps an :authority or SNI back to
 * the pod identity. match() is on the hot path of every registration and tunnel: it
 * compares against a prefix and suffix fixed at compile time, with no regex and no
 * allocation beyond the returned identity.
 */
import { isDnsLabel } from '../dns-name.ts'

export interface HostnameTemplate {
  readonly source: string
  /** The host advertised for a pod identity. */
  render (podName: string): string
  /** The pod identity a host names, or null when the host does not match the template. */
  match (host: string): string | null
}

export type CompileResult =
  | { readonly ok: true, readonly template: HostnameTemplate }
  | { readonly ok: false, readonly message: string }

/**
 * Whether a pod name can be routed at all (SPEC §1 and §4): match() takes the
 * identity from exactly one DNS label of the host, so a pod name with a dot (legal for a
 * Deployment's pods: they are DNS subdomains) or longer than a label's 63 characters renders a
 * host that never matches back. Such a pod is not a target, so it is never advertised: an
 * advertised identity must be one the router can route.
 */
export function isRoutableIdentity (podName: string): boolean {
  return isDnsLabel(podName)
}

const POD = '{pod_name}'
const NAMESPACE = '{namespace}'

export function compileHostnameTemplate (source: string, namespace: string): CompileResult {
  const first = source.indexOf(POD)
  if (first < 0) return { ok: false, message: `template must contain {pod_name}, got '${source}'` }
  if (source.indexOf(POD, first + POD.length) >= 0) {
    return { ok: false, message: `template must contain {pod_name} exactly once, got '${source}'` }
  }
  const substituted = source.replaceAll(NAMESPACE, namespace).toLowerCase()
  const at = substituted.indexOf(POD)
  const prefix = substituted.slice(0, at)
  const suffix = substituted.slice(at + POD.length)
  for (const part of [prefix, suffix]) {
    if (part.includes('{') || part.includes('}')) {
      return { ok: false, message: `template may only use {pod_name} and {namespace}, got '${source}'` }
    }
    if (!/^[a-z0-9.-]*$/.test(part)) {
      return { ok: false, message: `template must render a DNS name (letters, digits, '-', '.'), got '${source}'` }
    }
  }
  return { ok: true, template: new CompiledTemplate(source, prefix, suffix) }
}

class CompiledTemplate implements HostnameTemplate {
  readonly source: string
  readonly #prefix: string
  readonly #suffix: string
  readonly #minLength: number

  constructor (source: string, prefix: string, suffix: string) {
    this.source = source
    this.#prefix = prefix
    this.#suffix = suffix
    this.#minLength = prefix.length + suffix.length + 1
  }

  render (podName: string): string {
    return this.#prefix + podName + this.#suffix
  }

  match (host: string): string | null {
    let end = host.length
    // Strip a :port (digits after the last colon). IPv6 literals never match a template.
    for (let i = end - 1; i >= 0; i--) {
      const c = host.charCodeAt(i)
      if (c === 58 /* : */) { end = i; break }
      if (c < 48 || c > 57) break
    }
    if (end > 0 && host.charCodeAt(end - 1) === 46 /* trailing dot */) end--
    if (end < this.#minLength) return null
    const identity = this.#matchExact(host, end)
    if (identity !== null) return identity
    // Hosts are lower-case almost always; only a miss pays for toLowerCase(), which returns
    // the same string when nothing changes. Recurse, as lower-casing may change the length.
    const lower = host.toLowerCase()
    return lower === host ? null : this.match(lower)
  }

  /**
   * The identity in host[0, end) if it is prefix + one label + suffix, compared case-sensitively.
   * indexOf() compares in native code; char-by-char JS loops or startsWith() at an offset
   * cost about twice as much here (bench/routing/resolve.bench.ts).
   */
  #matchExact (host: string, end: number): string | null {
    const start = this.#prefix.length
    const suffixStart = end - this.#suffix.length
    if (start !== 0 && !host.startsWith(this.#prefix)) return null
    if (host.indexOf(this.#suffix, suffixStart) !== suffixStart) return null
    const dot = host.indexOf('.', start)
    if (dot >= 0 && dot < suffixStart) return null
    // Pod names are lower-case; a host may still carry upper case in the pod part.
    return host.slice(start, suffixStart).toLowerCase()
  }
}
