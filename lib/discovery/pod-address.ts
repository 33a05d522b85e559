/**
 * The IP family of an address discovery read for a pod or a peer replica: 4, 6, or 0 when it is
 * not an address one can have. `net.isIP` also accepts an IPv6 zone id (`fe80::1%eth0`): a zone
 * names an interface of the host that reads the address, never where a pod is, and URL parsers
 * refuse it (undici's origin for HTTP forwarding threw on such a target), so it is not one.
 */
import { isIP } from 'node:net'

export function podAddressFamily (address: string): 0 | 4 | 6 {
  if (address.includes('%')) return 0
  const family = isIP(address)
  return family === 4 || family === 6 ? family : 0
}
