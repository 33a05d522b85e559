/**
 * Which peers may speak for the client (`--trusted-proxy-cidrs`). A client-supplied
 * `x-forwarded-for`, `forwarded` or `x-real-ip` is only believed when the TCP peer is a proxy
 * the operator named (a Gateway or load balancer in front of the router); from anyone else those
 * fields are replaced, or a client could make a pod log, rate-limit or authorise by an address
 * of its choosing. Default: no trusted proxy.
 */
import { BlockList, isIP } from 'node:net'

export type CidrParse =
  | { readonly ok: true, readonly address: string, readonly prefix: number, readonly family: 'ipv4' | 'ipv6' }
  | { readonly ok: false, readonly message: string }

/** `10.0.0.0/8`, `fd00::/8`, or a bare address (one host). */
export function parseCidr (text: string): CidrParse {
  const slash = text.indexOf('/')
  const address = slash < 0 ? text : text.slice(0, slash)
  const version = isIP(address)
  if (version === 0) return { ok: false, message: `'${text}' is not an IP address or CIDR block such as 10.0.0.0/8` }
  const family = version === 4 ? 'ipv4' : 'ipv6'
  const max = version === 4 ? 32 : 128
  if (slash < 0) return { ok: true, address, prefix: max, family }
  const prefixText = text.slice(slash + 1)
  if (!/^\d{1,3}$/.test(prefixText) || Number(prefixText) > max) return { ok: false, message: `'${text}' has a prefix length outside 0..${max}` }
  return { ok: true, address, prefix: Number(prefixText), family }
}

export class TrustedProxies {
  readonly #list: BlockList | null

  /** cidrs were validated by the configuration (parseCidr); an invalid one throws here. */
  constructor (cidrs: readonly string[]) {
    if (cidrs.length === 0) {
      this.#list = null
      return
    }
    const list = new BlockList()
    for (const cidr of cidrs) {
      const parsed = parseCidr(cidr)
      if (!parsed.ok) throw new Error(parsed.message)
      list.addSubnet(parsed.address, parsed.prefix, parsed.family)
    }
    this.#list = list
  }

  /** True when forwarding headers from this peer address are to be believed. */
  trusts (address: string | undefined): boolean {
    const list = this.#list
    if (list === null || address === undefined || address === '') return false
    // A dual-stack listener reports IPv4 peers as ::ffff:a.b.c.d.
    if (address.startsWith('::ffff:') && isIP(address.slice(7)) === 4) return list.check(address.slice(7), 'ipv4')
    return list.check(address, isIP(address) === 6 ? 'ipv6' : 'ipv4')
  }
}
