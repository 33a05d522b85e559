/**
 * Field tables shared by the HTTP/1.1, HTTP/2 and HTTP/3 code (one table each, so
 * the forwarder, the WebTransport CONNECT relay and the HTTP/3 validator cannot drift apart).
 */

/**
 * Connection-specific fields: they describe one connection, so a proxy never forwards them,
 * and HTTP/2 and HTTP/3 call a message carrying one malformed (RFC 9113 §8.2.2, RFC 9114
 * §4.2). `te` is left to the caller: both allow it with the value "trailers".
 */
export const CONNECTION_SPECIFIC_FIELDS: readonly string[] = ['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade']

/** Fields HPACK and QPACK must never index (RFC 7541 §7.1.3, RFC 9204 §7.1.3): credentials. */
export const SENSITIVE_FIELDS: ReadonlySet<string> = new Set(['authorization', 'proxy-authorization', 'cookie', 'set-cookie', 'x-stargate-auth-token'])
