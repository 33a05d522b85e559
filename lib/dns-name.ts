/**
 * The DNS name rules Kubernetes applies to object names (one copy, shared by the
 * target and peer sources and the configuration). Kubernetes validates these itself, so a
 * name that fails here did not come from the API server (a hand-written file, a typo in a flag).
 */

/** RFC 1123 label (Kubernetes "DNS-1123 label"): namespaces, StatefulSet pod names. */
const LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/
/** RFC 1123 subdomain: most other object names, Deployment pods included. */
const SUBDOMAIN = /^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$/
/** RFC 1035 label (Kubernetes "DNS-1035 label"): Service names, which must start with a letter. */
const SERVICE = /^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/

export function isDnsLabel (name: string): boolean {
  return LABEL.test(name)
}

export function isDnsSubdomain (name: string): boolean {
  return SUBDOMAIN.test(name)
}

export function isServiceName (name: string): boolean {
  return SERVICE.test(name)
}
