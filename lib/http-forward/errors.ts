/**
 * The errors an LLM client can get from the router on the HTTP port (SPEC §6): one table with
 * the wire code, HTTP status and message. The body is `{ error: { code, message } }` and the
 * code is also in `x-stargate-error-code`, so clients and dashboards need not parse bodies.
 * The forwarder (forwarder.ts) and the front door (lib/front-door/http-errors.ts) send them; the
 * table is indexed with the other areas' in lib/errors.ts and documented in docs/errors.md.
 */
import { catalogueArea, type ErrorDoc, type IsStatic } from '../error-catalogue.ts'

export const HTTP_ERRORS = {
  no_ready_targets: {
    status: 503,
    message: 'no ready stargate has an http port',
    meaning: 'the request named no particular stargate and no ready, serving pod has an http port (warming pods, `serving=false`, take no LLM traffic)',
    action: 'check that stargate pods are ready and that their EndpointSlices carry the http port (--http-port-name); after a scale-up, wait for the warm-up to end',
  },
  unknown_target: {
    status: 404,
    message: 'the host names no ready stargate',
    meaning: 'the host matches the advertised hostname template but names no pod the router knows',
    action: 'check the host the client dials against `kubectl get pods`; the pod may be gone',
  },
  target_unavailable: {
    status: 503,
    message: 'the named stargate has no http port',
    meaning: 'the host names a ready stargate whose EndpointSlice lists no http port',
    action: 'check the Service\'s http port (--http-port-name), or dial without naming a pod to reach any serving one',
  },
  target_not_serving: {
    status: 503,
    message: 'the named stargate is not serving yet',
    meaning: 'the host names a stargate that takes registrations and tunnels but is not serving (`serving=false`: warming up behind a publishNotReadyAddresses Service, or failing its readiness probe); the warm-up keeps LLM traffic away until its Pylons are registered',
    action: 'retry later, or dial without naming a pod to reach any serving one',
  },
  upstream_timeout: {
    status: 504,
    message: 'the stargate did not answer in time',
    meaning: 'the pod did not connect, send its response head or keep its body flowing within the router\'s timeouts, or the request outlived --http-request-timeout-ms',
    action: 'check the pod\'s load; raise --http-headers-timeout-ms or --http-idle-timeout-ms if its answers are slow by design',
  },
  upstream_error: {
    status: 502,
    message: 'the stargate could not be reached or failed before responding',
    meaning: 'the connection to the pod failed or was reset before a response began (after it began, the client\'s connection is cut instead)',
    action: 'check the pod\'s logs and readiness; the router retries a failed connect once on another pod',
  },
  payload_too_large: {
    status: 413,
    message: 'request body is larger than the router accepts',
    meaning: 'the request body (declared or received) is larger than --http-max-body-bytes',
    action: 'send a smaller body, or raise --http-max-body-bytes',
  },
  headers_too_large: {
    status: 431,
    message: 'request headers exceed {max_bytes} bytes',
    meaning: 'the request\'s header list is larger than --http2-max-header-list-bytes (RFC 7541 §4.1 size over HTTP/2, raw bytes over HTTP/1.1); over HTTP/2 up to twice that, the SETTINGS_MAX_HEADER_LIST_SIZE the router advertises (beyond it the stream is reset: see below)',
    action: 'send fewer or smaller headers, or raise --http2-max-header-list-bytes',
  },
  bad_request: {
    status: 400,
    message: 'malformed request: it cannot be parsed or forwarded as sent',
    meaning: 'the HTTP/1.1 request could not be parsed, its request line has no HTTP version (the HTTP/0.9 form `GET /path`), an HTTP/1.0 request carries Transfer-Encoding (faulty framing, RFC 9112 §6.1; in both cases the connection closes and nothing sent after it is read), or its request target or a header cannot be sent upstream as given (e.g. `OPTIONS *`, a target with a `#fragment`, which RFC 9112 §3.2 never lets a request target carry, or a Host or :authority that is no valid host[:port], RFC 9110 §7.2: an unbalanced IPv6 bracket, userinfo, a port that is not a number). Nothing refused is forwarded: bytes the parser refuses while a request of the connection is in flight get no 400; that request is answered and the connection closes (or it is cut, when they break into its body)',
    action: 'fix the client\'s request; the router forwards origin-form and absolute-form targets only',
  },
  // Limits and hostile peers
  upstream_busy: {
    status: 503,
    message: 'the stargate has too many requests queued; retry later',
    meaning: 'the chosen pod already has --http-upstream-max-connections + --http-upstream-max-queue requests in flight through this router',
    action: 'retry with backoff; add stargate replicas if it persists',
  },
  upstream_invalid_response: {
    status: 502,
    message: 'the stargate sent a response the router cannot forward',
    meaning: 'the pod\'s response head was malformed or had fields HTTP forbids (the router logs which)',
    action: 'fix the stargate; the router\'s warn log names the pod and the error',
  },
  host_mismatch: {
    status: 400,
    message: 'the host header and the request target name different hosts',
    meaning: 'the request names two hosts (Host vs :authority, or vs an absolute-form target), a way to smuggle requests past host routing',
    action: 'send one host: the Host header must match the request target',
  },
  request_timeout: {
    status: 408,
    message: 'the request body stopped arriving for longer than the router waits',
    meaning: 'the client stopped sending its request body for longer than --http-idle-timeout-ms',
    action: 'check the client\'s network; keep the body flowing',
  },
  // Slow clients (SPEC §12)
  body_rate_too_low: {
    status: 408,
    message: 'the request body arrived more slowly than the router accepts',
    meaning: 'the client sent less than --http-body-min-bytes-per-second on average over a window of --http-body-rate-window-ms while its body was incomplete (time the router or the pod held the body back does not count)',
    action: 'check the client\'s network; on links slower than the minimum, lower --http-body-min-bytes-per-second',
  },
  body_deadline_exceeded: {
    status: 408,
    message: 'the request body took longer than the router accepts',
    meaning: 'the body was not complete --http-body-deadline-ms after the request head (time the router or the pod held the body back does not count)',
    action: 'send smaller bodies or over a faster link; raise --http-body-deadline-ms if uploads this slow are expected',
  },
  client_over_share: {
    status: 429,
    message: 'this client holds its share of the stargate\'s connections; retry later',
    meaning: 'the client address already holds or waits for --http-upstream-max-client-share-percent of the chosen pod\'s connections (behind a proxy listed in --trusted-proxy-cidrs, the address x-forwarded-for gives)',
    action: 'retry with backoff, or spread the load over more stargates; behind a Gateway, list it in --trusted-proxy-cidrs, else all its clients count as one',
  },
  method_not_allowed: {
    status: 405,
    message: 'the router does not open tunnels: CONNECT is not supported',
    meaning: 'a CONNECT request (a tunnel through a forward proxy, RFC 9110 §9.3.6): the router is a reverse proxy that forwards requests to stargates; over HTTP/1.1 the connection closes after the answer',
    action: 'send the requests themselves to the router (or through your own forward proxy), not a CONNECT',
  },
  http_version_not_supported: {
    status: 505,
    message: 'http version not supported on this connection',
    meaning: 'an HTTP/1.1 connection carried a request line with another major version (`HTTP/2.0`): HTTP/2 starts with its connection preface (h2c, or ALPN h2 over TLS), never with a request line; the connection closes after the answer',
    action: 'speak HTTP/1.1 on an HTTP/1.1 connection, or HTTP/2 with its preface',
  },
  // The front door on Fastify
  internal_error: {
    status: 500,
    message: 'the router failed to handle the request',
    meaning: 'an unexpected error inside the router while it handled the request, before anything was forwarded (the router logs `front door request failed` at error with the request id)',
    action: 'report it with the router\'s error log line; retrying is safe, the request did not reach a pod',
  },
} as const satisfies Record<string, ErrorDoc & { readonly status: number, readonly message: string }>

export type HttpErrorCode = keyof typeof HTTP_ERRORS

/** Codes whose message has no placeholder: their bodies are serialised once, below. */
export type StaticHttpErrorCode = { [K in HttpErrorCode]: IsStatic<typeof HTTP_ERRORS[K]['message']> extends true ? K : never }[HttpErrorCode]

/** The JSON body of an error response. */
export function errorBody (code: HttpErrorCode, message: string): Buffer {
  return Buffer.from(JSON.stringify({ error: { code, message } }))
}

/** Pre-serialised bodies: an error response costs no JSON.stringify. */
export const ERROR_BODIES: Readonly<Record<StaticHttpErrorCode, Buffer>> = Object.fromEntries(
  Object.entries(HTTP_ERRORS).filter(([, { message }]) => !message.includes('{')).map(([code, { message }]) => [code, errorBody(code as HttpErrorCode, message)])
) as Record<StaticHttpErrorCode, Buffer>

export const HTTP_ERROR_AREA = catalogueArea(HTTP_ERRORS, 'HTTP_ERRORS', 'lib/http-forward/errors.ts', (e) => `HTTP ${e.status} \`${e.message}\``, {
  title: 'LLM client errors (HTTP port)',
  where: 'HTTP responses to LLM clients: the status, a JSON body `{"error":{"code","message"}}` and the code in `x-stargate-error-code`.',
  notes: [
    'Over HTTP/2 (the front door, gRPC included, and WebTransport over HTTP/2) a request that is too large for Node\'s HTTP/2 layer or breaks its own framing is answered with a frame, as Node sends it before any handler of the router runs (`test/faults/front-door-h2-answers.test.ts` pins each):',
    [
      '- a header list over twice --http2-max-header-list-bytes (the advertised SETTINGS_MAX_HEADER_LIST_SIZE), once the client has acknowledged the router\'s SETTINGS: `RST_STREAM ENHANCE_YOUR_CALM` on that stream; the connection goes on. Between the limit and twice it: `headers_too_large` above (gRPC: RESOURCE_EXHAUSTED). The number of fields is never the limit: as many as fit in the advertised size are read.',
      '- one header field over 64 KiB (nghttp2\'s HPACK decoder): `GOAWAY COMPRESSION_ERROR`, the connection ends (a client still writing may see only the reset).',
      '- a request body that ends (END_STREAM) short of its content-length, or none after a content-length above 0: `RST_STREAM PROTOCOL_ERROR` on that stream (RFC 9113 §8.1.1); the connection goes on.',
      '- DATA beyond a request\'s content-length: `GOAWAY INTERNAL_ERROR` with that stream as the last one, and the connection ends with every stream on it. nghttp2 resets only the stream, but Node\'s binding ends the session on any frame nghttp2 reports as a protocol error (src/node_http2.cc, OnInvalidFrame, NGHTTP2_ERR_PROTO) before the router hears of it; RFC 9113 §5.4.1 allows treating a stream error as a connection error. Other clients\' streams are at stake only behind a Gateway that multiplexes several clients on one connection and forwards such a request without checking content-length itself.',
    ].join('\n'),
  ],
})
