/**
 * The errors an LLM client can get from the router (SPEC §6): one table with the wire code,
 * HTTP status and message. The body is `{ error: { code, message } }` and the code is also in
 * `x-stargate-error-code`, so clients and dashboards need not parse bodies.
 */
export const HTTP_ERRORS = {
  no_ready_targets: { status: 503, message: 'no ready stargate has an http port' },
  unknown_target: { status: 404, message: 'the host names no ready stargate' },
  target_unavailable: { status: 503, message: 'the named stargate has no http port' },
  upstream_timeout: { status: 504, message: 'the stargate did not answer in time' },
  upstream_error: { status: 502, message: 'the stargate could not be reached or failed before responding' },
  payload_too_large: { status: 413, message: 'request body is larger than the router accepts' },
  headers_too_large: { status: 431, message: 'request headers are larger than the router accepts' },
  bad_request: { status: 400, message: 'malformed request' },
  // Limits and hostile peers (issue 14)
  upstream_busy: { status: 503, message: 'the stargate has too many requests queued; retry later' },
  upstream_invalid_response: { status: 502, message: 'the stargate sent a response the router cannot forward' },
  host_mismatch: { status: 400, message: 'the host header and the request target name different hosts' },
  request_timeout: { status: 408, message: 'the request body stopped arriving for longer than the router waits' },
} as const

export type HttpErrorCode = keyof typeof HTTP_ERRORS

/** Pre-serialised bodies: an error response costs no JSON.stringify. */
export const ERROR_BODIES: Readonly<Record<HttpErrorCode, Buffer>> = Object.fromEntries(
  Object.entries(HTTP_ERRORS).map(([code, { message }]) => [code, Buffer.from(JSON.stringify({ error: { code, message } }))])
) as Record<HttpErrorCode, Buffer>
