/**
 * The reverse-tunnel listener of the tunnel port (SPEC §7): raw QUIC (default) or
 * WebTransport, chosen by --tunnel-protocol. Both route by SNI through the same snapshot and
 * hostname template as registration, and take TLS material from the same manager.
 */
import type { RunningTunnel, TunnelContext } from './tunnel-types.ts'
import { startRawQuicTunnel } from './raw-quic-wiring.ts'
import { startWebTransportTunnel } from './webtransport-wiring.ts'

export function startTunnel (context: TunnelContext): Promise<RunningTunnel> {
  return context.config.tunnelProtocol === 'raw-quic' ? startRawQuicTunnel(context) : startWebTransportTunnel(context)
}
