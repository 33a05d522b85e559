/**
 * The error catalogue: every error a user or an operator can see, indexed from each
 * area's table in the order docs/errors.md shows them. Each table lives with the code that sends
 * its errors; this module only lists them, for scripts/docs.ts (which renders docs/errors.md) and
 * for test/unit/errors-catalogue.test.ts (which fails on an undocumented, unused or stale code).
 */
import { catalogueArea, type CatalogueArea } from './error-catalogue.ts'
import { HTTP_ERRORS, HTTP_ERROR_AREA } from './http-forward/errors.ts'
import { GRPC_ERRORS, GRPC_ERROR_AREA } from './control-plane/errors.ts'
import { QUIC_CLOSE_AREA, QUIC_CLOSE_REASONS, STREAM_REFUSAL_AREA, STREAM_REFUSALS, WEBTRANSPORT_CLOSE_AREA, WEBTRANSPORT_CLOSE_REASONS } from './tunnel/errors.ts'
import { REJECTIONS, WEBTRANSPORT_REJECTION_AREA } from './tunnel/webtransport-connect.ts'
import { HANDSHAKE_FAILURES_DOC } from './quic/handshake-failure.ts'
import { STARTUP_ERRORS, STARTUP_ERROR_AREA } from './config/errors.ts'

export type { CatalogueArea, CatalogueRow, ErrorDoc } from './error-catalogue.ts'
export { fillMessage } from './error-catalogue.ts'
export { GRPC_ERRORS, HANDSHAKE_FAILURES_DOC, HTTP_ERRORS, QUIC_CLOSE_REASONS, REJECTIONS, STARTUP_ERRORS, STREAM_REFUSALS, WEBTRANSPORT_CLOSE_REASONS }

const HANDSHAKE_FAILURE_AREA = catalogueArea(HANDSHAKE_FAILURES_DOC, 'HANDSHAKE_FAILURES_DOC', 'lib/quic/handshake-failure.ts', (_entry, code) => `metric and log reason \`${code}\` / \`upstream_${code}\``, {
  title: 'Raw QUIC handshake failures (operators)',
  where: 'The `reason` label of `stargate_router_quic_handshake_failures_total` and of the warn log `raw quic handshake refused` (rate-limited per reason); prefixed `upstream_` for the leg to the pod. The Pylon sees the TLS alert or close of its own stack.',
})

export const ERROR_CATALOGUE: readonly CatalogueArea[] = [
  STARTUP_ERROR_AREA,
  GRPC_ERROR_AREA,
  HTTP_ERROR_AREA,
  QUIC_CLOSE_AREA,
  STREAM_REFUSAL_AREA,
  HANDSHAKE_FAILURE_AREA,
  WEBTRANSPORT_REJECTION_AREA,
  WEBTRANSPORT_CLOSE_AREA,
]
