/**
 * Which client a request counts against for the per-client share of a pod's connections
 * (SPEC §12, --http-upstream-max-client-share-percent).
 *
 * The TCP peer, unless it is a trusted proxy (--trusted-proxy-cidrs): behind a Gateway or load
 * balancer every request arrives from the proxy's few addresses, and counting those would cap
 * all clients together at one client's share. From a trusted proxy the client is read from
 * x-forwarded-for, right to left: each proxy appends the peer it saw, so the rightmost entry
 * is what the nearest proxy saw, and entries to its left are believed only while the one to
 * their right is a trusted proxy too (the leftmost ones are whatever the client sent). An
 * entry that is not an address ends the walk at the last trusted hop; so does a trusted proxy
 * that sends no x-forwarded-for (then its own address counts, as one client).
 *
 * IPv6 addresses count by their /64: one host is usually given a whole /64, so a full address
 * would let one client be 2^64 clients. IPv4-mapped IPv6 (::ffff:a.b.c.d, a dual-stack
 * listener's view of an IPv4 peer) counts as the IPv4 address.
 */
import { isIP } from 'node:net'
import type { TrustedProxies } from './trusted-proxies.ts'

/** The key of one address: the IPv4 address, or the /64 of an IPv6 one; null when it is not an address. */
export function addressKey (address: string): string | null {
  let text = address
  const zone = text.indexOf('%')
  if (zone >= 0) text = text.slice(0, zone)
  const version = isIP(text)
  if (version === 4) return text
  if (version !== 6) return null
  if (text.length > 7 && text.slice(0, 7).toLowerCase() === '::ffff:' && isIP(text.slice(7)) === 4) return text.slice(7)
  return `${ipv6Prefix64(text)}::/64`
}

/** The first four groups of a valid IPv6 address, expanded, lower case, without leading zeros. */
function ipv6Prefix64 (address: string): string {
  const split = (part: string): string[] => part === '' ? [] : part.split(':')
  const gap = address.indexOf('::')
  let groups = split(gap < 0 ? address : address.slice(0, gap))
  if (gap >= 0) {
    const tail = split(address.slice(gap + 2))
    // A dotted IPv4 tail fills two groups.
    const tailGroups = tail.length + (tail.at(-1)?.includes('.') === true ? 1 : 0)
    groups = [...groups, ...Array.from({ length: 8 - groups.length - tailGroups }, () => '0'), ...tail]
  }
  return groups.slice(0, 4).map((g) => (parseInt(g, 16) || 0).toString(16)).join(':')
}

/** One x-forwarded-for entry as an address: tolerates `1.2.3.4:port` and `[v6]:port`. */
function entryAddress (entry: string): string {
  const text = entry.trim()
  if (text.startsWith('[')) {
    const end = text.indexOf(']')
    return end < 0 ? text : text.slice(1, end)
  }
  const colon = text.indexOf(':')
  if (colon > 0 && colon === text.lastIndexOf(':') && isIP(text.slice(0, colon)) === 4) return text.slice(0, colon)
  return text
}

/**
 * The client key of a request (module comment): from its TCP peer address and its
 * x-forwarded-for field(s), believed as far as --trusted-proxy-cidrs allows.
 */
export function clientKeyOf (peer: string | undefined, forwardedFor: string | readonly string[] | undefined, trusted: TrustedProxies): string {
  let current = peer ?? ''
  if (forwardedFor !== undefined && trusted.trusts(current)) {
    const entries = (typeof forwardedFor === 'string' ? forwardedFor : forwardedFor.join(',')).split(',')
    for (let i = entries.length - 1; i >= 0; i--) {
      const address = entryAddress(entries[i] as string)
      if (addressKey(address) === null) break
      current = address
      if (!trusted.trusts(current)) break
    }
  }
  return addressKey(current) ?? current
}

/**
 * Requests one client may hold or wait for at one pod: percent of its connections, at least
 * one; 0 when the limit is off (percent 0).
 */
export function clientShareLimit (connectionsPerPod: number, percent: number): number {
  return percent === 0 ? 0 : Math.max(1, Math.floor(connectionsPerPod * percent / 100))
}
