/** WebTransport reverse tunnels (issue 6): HTTP/2 listener (and HTTP/3 where it loads), relay. */
import type { RunningTunnel, TunnelContext } from './tunnels.ts'

export async function startWebTransportTunnel (context: TunnelContext): Promise<RunningTunnel> {
  context.logger.warn('WebTransport reverse tunnels are not wired yet')
  return { udp: null, tcp: null, stopAccepting: () => {}, close: async () => {} }
}
