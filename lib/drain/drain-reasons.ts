/**
 * Why the router drains connections, and what each peer reads for it: the gRPC status of the
 * control-plane streams it ends (lib/control-plane/errors.ts) and the close reason of the
 * tunnels it closes (lib/tunnel/errors.ts). The reason is also the `reason` label of
 * connections_drained_total, so the table is the label's bounded set. A new reason (replica
 * balancing moving one connection) is one row here plus its rows in those two tables.
 */
import { GRPC_ERRORS, type GrpcErrorCode } from '../control-plane/errors.ts'
import { QUIC_CLOSE_REASONS, type QuicCloseCode } from '../tunnel/errors.ts'

export const DRAIN_REASONS = {
  /** SIGTERM/SIGINT (SPEC §11). */
  shutdown: { grpc: 'shutting_down', tunnel: 'shutdown' },
  /** Replica balancing moves one connection to even out the replicas (SPEC §10). */
  rebalance: { grpc: 'rebalancing', tunnel: 'rebalancing' },
} as const satisfies Record<string, { readonly grpc: GrpcErrorCode, readonly tunnel: QuicCloseCode }>

export type DrainReason = keyof typeof DRAIN_REASONS
export const DRAIN_REASON_NAMES = Object.keys(DRAIN_REASONS) as DrainReason[]

/** The UNAVAILABLE status and message a draining connection's Watch and registration streams end with. */
export function grpcErrorOf (reason: DrainReason): { readonly status: number, readonly message: string } {
  return GRPC_ERRORS[DRAIN_REASONS[reason].grpc]
}

/** The close reason (application code 0) of a tunnel closed once drained. */
export function tunnelCloseReasonOf (reason: DrainReason): string {
  return QUIC_CLOSE_REASONS[DRAIN_REASONS[reason].tunnel].reason
}
