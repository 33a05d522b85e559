/** Raw QUIC reverse tunnels (issue 5): listener, TLS consumers, relay. */
import type { RunningTunnel, TunnelContext } from './tunnels.ts'

export async function startRawQuicTunnel (context: TunnelContext): Promise<RunningTunnel> {
  context.logger.warn('raw QUIC reverse tunnels are not wired yet')
  return { udp: null, tcp: null, stopAccepting: () => {}, close: async () => {} }
}
