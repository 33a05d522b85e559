/*
 * stargate QUIC engine: a plain N-API addon (one build loads in every Node >= 18) over Debian's
 * ngtcp2 0.12 and GnuTLS 3.7. It moves bytes; TypeScript decides (routing by SNI, which TLS
 * material, ALPN, limits, close reasons, metrics, logs). lib/quic/native.ts types this surface.
 *
 * Handles are numbers: credentials, endpoint, pending Initial and connection ids; streams are
 * (connection id, stream id). A stale id finds nothing and the call reports that.
 *
 * init(onEvents) -> Float64Array
 *   onEvents(count, objects) is called once per engine turn with `count` records of 6 numbers
 *   in the returned array: [type, conn, stream, a, b, objectIndex]; objectIndex >= 0 points into
 *   `objects`. Types (quic.h enum qevent_type):
 *     1 PROPOSED        conn = pending id, a = endpoint; object {sni, alpn[], address, port, validated}
 *     2 ESTABLISHED     a = 1 when both sides negotiated datagrams
 *     3 CLOSED          a = kind (1 peer, 2 local, 3 error, 4 idle, 5 handshake timeout,
 *                       6 stateless reset, 7 unreachable, 8 destroyed), b = code;
 *                       object {reason: Buffer, app, established, alert, liberr}
 *     4 STREAM_OPENED   a stream opened by the peer (TypeScript mode)
 *     5 STREAM_READABLE a = bytes buffered, b = 1 when FIN received; read until nothing is left
 *                       and it fires again on new data
 *     6 STREAM_WRITABLE a write that was cut short may go on
 *     7 STREAM_RESET    a = code: the peer reset its sending side (unread bytes dropped)
 *     8 STREAM_STOP     a = code: the peer sent STOP_SENDING (we answered with RESET_STREAM)
 *     9 STREAM_CLOSED   the stream is finished and forgotten (in TypeScript mode: only after its
 *                       bytes and its FIN, if one came, were read, or after a reset or streamStop)
 *    10 STREAMS_AVAILABLE a = bidi, b = uni streams we may open now (after an open failed)
 *    11 DATAGRAM        object Buffer
 *    12 SPLICE_DONE     a = bytes this (spliced) stream received and passed on, b = of those acked
 *                       (not for the streams streamBridge splices itself)
 *    13 ENDPOINT_ERROR  conn = endpoint id, a = errno
 *    14 PENDING_EXPIRED conn = pending id: no decision in time, dropped
 *    15 DRAINED         a draining connection (connDrain) has no stream of work left
 *
 * credServer(certPem, keyPem, clientCaPem | null) -> id      (client CA: client certificates required)
 * credClient(caPem | null, verify, certPem | null, keyPem | null) -> id
 * credRelease(id)               TypeScript's reference; freed when its last connection ends
 * listen(host, port, options) -> [endpoint, address, port]
 *   options: {recvBuffer, sendBuffer, maxConnections, maxHalfOpenPerAddress, retryThreshold,
 *             retry, pendingTimeoutMs, resetSecret: Buffer(32) | null, transport}
 * endpointConfigure(endpoint, options)      same options, changed for later Initials
 * endpointStats(endpoint) -> {connections, pending, halfOpen, I/O, dropped: {reason: n},
 *                              stateless: {type: n}, proposed, rejected, accepted, gso,
 *                              pendingBytes}
 *   pendingBytes: what the pending Initials hold (their datagrams, their ClientHello reassembly)
 *   I/O: rxDatagrams, rxBytes, txDatagrams, txBytes, txDropped (sends lost). dropped (received
 *   datagrams that reached no connection) and stateless (packets answered without connection
 *   state) are keyed by quic.h's Q_DROP_REASONS and Q_STATELESS_PACKETS strings
 * endpointClose(endpoint)                   closes the socket; connections on it are destroyed
 * accept(pending, cred, alpn: Buffer | null, transport | null) -> conn
 *   alpn: the protocols (wire format) the server accepts, chosen by TypeScript (empty: none)
 * reject(pending, code)                     transport CONNECTION_CLOSE(code) in an Initial, no reason
 *                                           phrase (RFC 9000 §10.2.3), no state kept
 * connect(address, port, cred, sni | null, alpn: Buffer | null, transport, options) -> conn
 *   options: {recvBuffer, sendBuffer}; the connection gets its own connected UDP socket
 * close(conn, app, code, reason)            CONNECTION_CLOSE, then the closing period
 * closeFlushed(conn, app, code, reason, timeoutMs)   the same close once every stream's bytes,
 *                                           FIN and reset have reached the peer, or after
 *                                           timeoutMs at the latest (conn.c); CLOSED (local)
 *                                           when it goes out. At once when still handshaking;
 *                                           an endpoint closing sends it at once too
 * destroy(conn)                             forget it now, tell nobody
 * connDrain(conn, scope, code) -> streams of work open now (-1: not open)
 *   no new peer streams from now on (drain.c): scope 1 every stream the peer opens, 2 the
 *   WebTransport streams of the bridged session; each is refused with STOP_SENDING (and
 *   RESET_STREAM when bidirectional) carrying code, and the peer's stream credit is no longer
 *   renewed. Open streams go on; DRAINED follows when the last one is gone (not when this
 *   returns 0). A later call keeps the scope and code, reports, and re-arms DRAINED
 * connInfo(conn) -> {alpn, sni, datagrams, established, remoteAddress, remotePort, localPort}
 * connStats(conn) -> {rttUs, cwnd, bytesInFlight, txBytes, rxBytes, txPackets, rxPackets, splicedBytes, bridgedBytes,
 *                    datagramsDropped, openStreams, bridgedStreams, refusedStreams, peerMaxBidiStream}
 * peerCertificates(conn) -> Buffer[]        DER, leaf first
 * streamOpen(conn, bidi) -> stream id, or -1 when the peer's limit is reached (STREAMS_AVAILABLE follows)
 * streamRead(conn, stream, max) -> Buffer (bytes consumed; credit returned to the peer), or
 *   0 nothing now, 1 FIN (all read), 2 reset, 3 no such stream
 * streamWrite(conn, stream, data, fin) -> bytes taken (the rest waits for STREAM_WRITABLE), -1 closed
 *   with fin: all of data and the FIN, or nothing (0, STREAM_WRITABLE follows); data is taken
 *   whole when nothing is queued, even beyond the send limit
 * streamReset(conn, stream, code)           RESET_STREAM on our sending side
 * streamStop(conn, stream, code)            STOP_SENDING on our receiving side
 * splice(connA, streamA, connB, streamB) -> boolean
 *   the addon takes over both directions (bytes buffered but unread included), honouring flow
 *   control on both legs, carrying FIN / RESET_STREAM / STOP_SENDING with their codes;
 *   SPLICE_DONE for each stream when it ends
 * streamBridge(connA, connB, mode, sessionA, sessionB) -> boolean
 *   mode 1 raw: every stream either peer opens from now on gets its twin (same stream id: twins
 *   are opened in id order) on the other leg and is spliced in the same engine turn, without
 *   STREAM_OPENED; mode 2 WebTransport over HTTP/3: only bidi streams starting 0x41 + that
 *   leg's session id (sessionA on connA) and uni streams of type 0x54 + session id; the header
 *   is replaced by the other leg's. Every other stream (H3 control, QPACK, requests, other
 *   sessions) comes as STREAM_OPENED, bytes unread, as before. Streams over the other peer's
 *   limit wait natively, in order per kind, for its next grant. Raw mode with connB 0: the
 *   partner is named later (a second call) and may still handshake then; connA's streams wait
 *   for it, unread, and are paired once it is established; a raw partner that closes or fails
 *   hands them to TypeScript as STREAM_OPENED. Mode 0 switches it off (connB 0: a bridge still
 *   waiting for its partner): streams the bridge held come to TypeScript as STREAM_OPENED.
 *   false: a connection is unknown or already bridged elsewhere. Counted per connection in
 *   connStats().bridgedStreams (bridge.c)
 * datagramSend(conn, data) -> boolean       queued (false: not negotiated, too many queued)
 * datagramBridge(connA, connB, mode)        0 off, 1 raw both ways, 2 HTTP/3 (quarter stream
 *                                           ids mapped, unknown ones dropped and counted)
 * datagramMap(conn, fromQuarterId, toQuarterId)   for mode 2, datagrams arriving on conn
 * counters() -> object                      live objects, syscalls and I/O (as endpointStats, all
 *   endpoints) for leak checks, benchmarks and metrics;
 *   busyNs (thread CPU time in the engine's libuv callbacks, JavaScript excluded: an estimate
 *   from a random 1 in 16 of them, engine.c),
 *   bridgedStreams (streams streamBridge paired, all connections)
 * heapStats() -> {inUse, free}              the process's malloc heap (glibc mallinfo2): bytes
 *                                           allocated, bytes in free chunks (resident or not)
 * heapTrim() -> boolean                     malloc_trim(0): free pages back to the kernel; true
 *                                           when any went back
 */
#include "quic.h"

#include <malloc.h>

#include <stdlib.h>
#include <stdio.h>
#include <errno.h>
#include <arpa/inet.h>
#include <gnutls/x509.h>

#define EVENTS_CAP 4096

static qengine *engine_of(napi_env env) {
  void *data = NULL;
  napi_get_instance_data(env, &data);
  return data;
}

static napi_value undefined(napi_env env) {
  napi_value v;
  napi_get_undefined(env, &v);
  return v;
}

static napi_value num(napi_env env, double d) {
  napi_value v;
  napi_create_double(env, d, &v);
  return v;
}

static napi_value boolean(napi_env env, int b) {
  napi_value v;
  napi_get_boolean(env, b, &v);
  return v;
}

static napi_value object(napi_env env) {
  napi_value v;
  napi_create_object(env, &v);
  return v;
}

static napi_value throw_error(napi_env env, const char *msg) {
  napi_throw_error(env, NULL, msg);
  return NULL;
}

static int is_nullish(napi_env env, napi_value v) {
  napi_valuetype t;
  if (v == NULL || napi_typeof(env, v, &t) != napi_ok) return 1;
  return t == napi_null || t == napi_undefined;
}

static double get_num(napi_env env, napi_value v, double dflt) {
  double d;
  if (is_nullish(env, v) || napi_get_value_double(env, v, &d) != napi_ok) return dflt;
  return d;
}

static int get_bool(napi_env env, napi_value v, int dflt) {
  bool b;
  if (is_nullish(env, v) || napi_get_value_bool(env, v, &b) != napi_ok) return dflt;
  return b;
}

static napi_value prop(napi_env env, napi_value obj, const char *name) {
  napi_value v = NULL;
  if (is_nullish(env, obj)) return NULL;
  bool has = false;
  if (napi_has_named_property(env, obj, name, &has) != napi_ok || !has) return NULL;
  napi_get_named_property(env, obj, name, &v);
  return v;
}

/* A string argument as a malloc'd NUL-terminated copy (NULL for null/undefined). */
static char *get_string(napi_env env, napi_value v, size_t *len) {
  if (is_nullish(env, v)) return NULL;
  size_t n;
  if (napi_get_value_string_utf8(env, v, NULL, 0, &n) != napi_ok) return NULL;
  char *s = malloc(n + 1);
  if (s == NULL) return NULL;
  napi_get_value_string_utf8(env, v, s, n + 1, &n);
  if (len != NULL) *len = n;
  return s;
}

static int get_bytes(napi_env env, napi_value v, uint8_t **data, size_t *len);

/* A reason argument: a string (UTF-8) or bytes, as a malloc'd copy. */
static char *get_reason(napi_env env, napi_value v, size_t *len) {
  uint8_t *d;
  size_t n;
  bool is = false;
  if (!is_nullish(env, v) && napi_is_buffer(env, v, &is) == napi_ok && is && get_bytes(env, v, &d, &n) == 0) {
    char *s = malloc(n + 1);
    if (s == NULL) return NULL;
    memcpy(s, d, n);
    s[n] = 0;
    *len = n;
    return s;
  }
  return get_string(env, v, len);
}

/* Bytes of a Buffer / TypedArray argument (not copied). */
static int get_bytes(napi_env env, napi_value v, uint8_t **data, size_t *len) {
  *data = NULL;
  *len = 0;
  if (is_nullish(env, v)) return 0;
  bool is;
  if (napi_is_buffer(env, v, &is) == napi_ok && is) {
    void *d;
    if (napi_get_buffer_info(env, v, &d, len) != napi_ok) return -1;
    *data = d;
    return 0;
  }
  if (napi_is_typedarray(env, v, &is) == napi_ok && is) {
    napi_typedarray_type type;
    size_t n;
    void *d;
    napi_value ab;
    size_t off;
    if (napi_get_typedarray_info(env, v, &type, &n, &d, &ab, &off) != napi_ok) return -1;
    *data = d;
    *len = n;
    return 0;
  }
  return -1;
}


static qconn *conn_arg(napi_env env, qengine *eng, napi_value v) {
  uint32_t id = (uint32_t)get_num(env, v, 0);
  qconn *c = qmap_get_u64(&eng->conns, id);
  return c;
}

/* A stream named by two arguments: its connection id, then its stream id. */
static qstream *stream_args(napi_env env, qengine *eng, napi_value *argv) {
  qconn *c = conn_arg(env, eng, argv[0]);
  if (c == NULL) return NULL;
  int64_t id = (int64_t)get_num(env, argv[1], -1);
  return conn_find_stream(c, id);
}

static int parse_addr(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len) {
  memset(ss, 0, sizeof *ss);
  struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
  if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)port);
    *len = sizeof *a4;
    return 0;
  }
  if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)port);
    *len = sizeof *a6;
    return 0;
  }
  return -1;
}

/* An IP literal and a port from two JavaScript arguments (listen, connect); -1 when not an IP. */
static int get_addr(napi_env env, napi_value host_arg, napi_value port_arg, struct sockaddr_storage *ss, socklen_t *len) {
  char *host = get_string(env, host_arg, NULL);
  int port = (int)get_num(env, port_arg, 0);
  int rv = host == NULL ? -1 : parse_addr(host, port, ss, len);
  free(host);
  return rv;
}

static napi_value addr_values(napi_env env, const struct sockaddr_storage *ss, napi_value *port) {
  char buf[INET6_ADDRSTRLEN] = "";
  int p = 0;
  if (ss->ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    p = ntohs(a->sin_port);
  } else if (ss->ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
    p = ntohs(a->sin6_port);
  }
  napi_value v;
  napi_create_string_latin1(env, buf, strlen(buf), &v);
  *port = num(env, p);
  return v;
}

#define MS(x) ((uint64_t)(x) * NGTCP2_MILLISECONDS)

static void transport_defaults(qtransport *t) {
  t->idle_timeout_ns = MS(30000);
  t->handshake_timeout_ns = MS(10000);
  t->keep_alive_ns = 0;
  t->initial_max_data = 2 * 1024 * 1024;
  t->max_window = 16 * 1024 * 1024;
  t->max_stream_window = 8 * 1024 * 1024;
  t->max_streams_bidi = 1000;
  t->max_streams_uni = 100;
  t->max_payload = 1350;
  t->datagrams = 1;
  t->stream_send_limit = 256 * 1024;
}

static void parse_transport(napi_env env, napi_value o, qtransport *t) {
  if (is_nullish(env, o)) return;
  napi_value v;
  if ((v = prop(env, o, "idleTimeoutMs")) != NULL) t->idle_timeout_ns = MS(get_num(env, v, 30000));
  if ((v = prop(env, o, "handshakeTimeoutMs")) != NULL) t->handshake_timeout_ns = MS(get_num(env, v, 10000));
  if ((v = prop(env, o, "keepAliveMs")) != NULL) t->keep_alive_ns = MS(get_num(env, v, 0));
  if ((v = prop(env, o, "initialMaxData")) != NULL) t->initial_max_data = (uint64_t)get_num(env, v, (double)t->initial_max_data);
  if ((v = prop(env, o, "maxWindow")) != NULL) t->max_window = (uint64_t)get_num(env, v, (double)t->max_window);
  if ((v = prop(env, o, "maxStreamWindow")) != NULL) t->max_stream_window = (uint64_t)get_num(env, v, (double)t->max_stream_window);
  if ((v = prop(env, o, "maxStreamsBidi")) != NULL) t->max_streams_bidi = (uint64_t)get_num(env, v, (double)t->max_streams_bidi);
  if ((v = prop(env, o, "maxStreamsUni")) != NULL) t->max_streams_uni = (uint64_t)get_num(env, v, (double)t->max_streams_uni);
  if ((v = prop(env, o, "maxPayload")) != NULL) t->max_payload = (size_t)get_num(env, v, (double)t->max_payload);
  if ((v = prop(env, o, "datagrams")) != NULL) t->datagrams = get_bool(env, v, 1);
  if ((v = prop(env, o, "streamSendLimit")) != NULL) t->stream_send_limit = (size_t)get_num(env, v, (double)t->stream_send_limit);
  if (t->max_payload < 1200) t->max_payload = 1200;
  if (t->max_payload > 1452) t->max_payload = 1452;
  if (t->stream_send_limit < 4096) t->stream_send_limit = 4096;
  if (t->max_window < t->initial_max_data) t->max_window = t->initial_max_data;
  if (t->handshake_timeout_ns == 0) t->handshake_timeout_ns = UINT64_MAX;
}

static void configure_endpoint(napi_env env, qendpoint *ep, napi_value o) {
  napi_value v;
  if ((v = prop(env, o, "maxConnections")) != NULL) ep->max_connections = (uint32_t)get_num(env, v, 10000);
  if ((v = prop(env, o, "maxHalfOpenPerAddress")) != NULL) ep->max_half_open_per_addr = (uint32_t)get_num(env, v, 64);
  if ((v = prop(env, o, "retryThreshold")) != NULL) ep->retry_threshold = (uint32_t)get_num(env, v, 500);
  if ((v = prop(env, o, "retry")) != NULL) ep->retry_always = get_bool(env, v, 0);
  if ((v = prop(env, o, "pendingTimeoutMs")) != NULL) ep->pending_timeout_ns = MS(get_num(env, v, Q_PENDING_TIMEOUT_MS));
  if ((v = prop(env, o, "accepting")) != NULL) ep->accepting = get_bool(env, v, 1);
  if ((v = prop(env, o, "resetSecret")) != NULL) {
    uint8_t *d;
    size_t n;
    if (get_bytes(env, v, &d, &n) == 0 && n >= 16) {
      memset(ep->reset_secret, 0, sizeof ep->reset_secret);
      memcpy(ep->reset_secret, d, n < sizeof ep->reset_secret ? n : sizeof ep->reset_secret);
    }
  }
  if ((v = prop(env, o, "transport")) != NULL) parse_transport(env, v, &ep->transport);
  ep->pending_max = ep->max_connections;
}

/* ---- functions ---- */

static napi_value js_init(napi_env env, qengine *eng, napi_value *argv) {
  if (eng->callback != NULL) napi_delete_reference(env, eng->callback);
  napi_create_reference(env, argv[0], 1, &eng->callback);
  if (eng->events_ab == NULL) {
    napi_value ab, name;
    void *mem;
    napi_create_arraybuffer(env, EVENTS_CAP * 6 * sizeof(double), &mem, &ab);
    eng->events_mem = mem;
    eng->events_cap = EVENTS_CAP;
    napi_create_reference(env, ab, 1, &eng->events_ab);
    napi_value resource;
    napi_create_object(env, &resource);
    napi_create_string_utf8(env, "stargate:quic", NAPI_AUTO_LENGTH, &name);
    napi_async_init(env, resource, name, &eng->async);
  }
  napi_value ab, arr;
  napi_get_reference_value(env, eng->events_ab, &ab);
  napi_create_typedarray(env, napi_float64_array, EVENTS_CAP * 6, ab, 0, &arr);
  return arr;
}

/* The PEM copies a credential was built from: the key's bytes are wiped before they are freed. */
static void free_pems(char *cert, char *key, size_t keylen, char *ca) {
  if (key != NULL) gnutls_memset(key, 0, keylen);
  free(cert);
  free(key);
  free(ca);
}

/* A new credential's id for JavaScript, or the reason it could not be built, thrown. */
static napi_value cred_id(napi_env env, const qcred *cr, const char *err) {
  if (cr == NULL) return throw_error(env, err);
  return num(env, cr->id);
}

static napi_value js_cred_server(napi_env env, qengine *eng, napi_value *argv) {
  size_t certlen = 0, keylen = 0, calen = 0;
  char *cert = get_string(env, argv[0], &certlen);
  char *key = get_string(env, argv[1], &keylen);
  char *ca = get_string(env, argv[2], &calen);
  const char *err = "certificate and key are required";
  qcred *cr = cert != NULL && key != NULL ? cred_new_server(eng, cert, certlen, key, keylen, ca, calen, &err) : NULL;
  free_pems(cert, key, keylen, ca);
  return cred_id(env, cr, err);
}

static napi_value js_cred_client(napi_env env, qengine *eng, napi_value *argv) {
  size_t calen = 0, certlen = 0, keylen = 0;
  char *ca = get_string(env, argv[0], &calen);
  int verify = get_bool(env, argv[1], 1);
  char *cert = get_string(env, argv[2], &certlen);
  char *key = get_string(env, argv[3], &keylen);
  const char *err = NULL;
  qcred *cr = cred_new_client(eng, ca, calen, verify, cert, certlen, key, keylen, &err);
  free_pems(cert, key, keylen, ca);
  return cred_id(env, cr, err);
}

static napi_value js_cred_release(napi_env env, qengine *eng, napi_value *argv) {
  qcred *cr = qmap_get_u64(&eng->creds, (uint32_t)get_num(env, argv[0], 0));
  if (cr != NULL && !cr->released) {
    cr->released = 1;
    cred_unref(eng, cr);
  }
  return undefined(env);
}

static napi_value js_listen(napi_env env, qengine *eng, napi_value *argv) {
  struct sockaddr_storage ss;
  socklen_t sslen;
  if (get_addr(env, argv[0], argv[1], &ss, &sslen) != 0) return throw_error(env, "listen needs an IP address");
  const char *err = NULL;
  int errnum = 0;
  int rcv = (int)get_num(env, prop(env, argv[2], "recvBuffer"), 4 << 20);
  int snd = (int)get_num(env, prop(env, argv[2], "sendBuffer"), 4 << 20);
  qendpoint *ep = ep_new_listen(eng, (struct sockaddr *)&ss, sslen, rcv, snd, &err, &errnum);
  if (ep == NULL) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s failed: %s", err, strerror(errnum));
    napi_value e, code, m;
    napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &m);
    napi_create_error(env, NULL, m, &e);
    napi_create_string_utf8(env, errnum == EADDRINUSE ? "EADDRINUSE" : errnum == EACCES ? "EACCES" : errnum == EADDRNOTAVAIL ? "EADDRNOTAVAIL" : "EQUIC", NAPI_AUTO_LENGTH, &code);
    napi_set_named_property(env, e, "code", code);
    napi_throw(env, e);
    return NULL;
  }
  transport_defaults(&ep->transport);
  ep->max_connections = 10000;
  ep->max_half_open_per_addr = 64;
  ep->retry_threshold = 500;
  ep->pending_timeout_ns = MS(Q_PENDING_TIMEOUT_MS);
  configure_endpoint(env, ep, argv[2]);
  napi_value out, p, a;
  napi_create_array(env, &out);
  napi_set_element(env, out, 0, num(env, ep->id));
  a = addr_values(env, &ep->local, &p);
  napi_set_element(env, out, 1, a);
  napi_set_element(env, out, 2, p);
  return out;
}

static qendpoint *endpoint_arg(napi_env env, qengine *eng, napi_value v) {
  return qmap_get_u64(&eng->endpoints, (uint32_t)get_num(env, v, 0));
}

static napi_value js_endpoint_configure(napi_env env, qengine *eng, napi_value *argv) {
  qendpoint *ep = endpoint_arg(env, eng, argv[0]);
  if (ep != NULL && !ep->closed) configure_endpoint(env, ep, argv[1]);
  return undefined(env);
}

#define SET(name, value) napi_set_named_property(env, o, name, num(env, (double)(value)))

#define Q_NAME_ENTRY(id, name) name,
static const char *const DROP_REASON_NAMES[Q_NDROP_REASONS] = {Q_DROP_REASONS(Q_NAME_ENTRY)};
static const char *const STATELESS_PACKET_NAMES[Q_NSTATELESS_PACKETS] = {Q_STATELESS_PACKETS(Q_NAME_ENTRY)};

/* An endpoint's datagram I/O, or the engine's total: the same names in endpointStats and counters. */
static void set_io(napi_env env, napi_value o, const qio *io) {
  SET("rxDatagrams", io->rx_dgrams);
  SET("rxBytes", io->rx_bytes);
  SET("txDatagrams", io->tx_dgrams);
  SET("txBytes", io->tx_bytes);
  SET("txDropped", io->tx_dropped);
}

/* {names[i]: counts[i]}: a counter array indexed by one of quic.h's reason tables. */
static napi_value counts_by_name(napi_env env, const char *const *names, const uint64_t *counts, int n) {
  napi_value o = object(env);
  for (int i = 0; i < n; i++) SET(names[i], counts[i]);
  return o;
}

static napi_value js_endpoint_stats(napi_env env, qengine *eng, napi_value *argv) {
  qendpoint *ep = endpoint_arg(env, eng, argv[0]);
  if (ep == NULL) return undefined(env);
  napi_value o = object(env);
  SET("connections", ep->nconns);
  SET("pending", ep->npending);
  SET("halfOpen", ep->half_open);
  SET("pendingBytes", ep->pending_bytes);
  set_io(env, o, &ep->io);
  napi_set_named_property(env, o, "dropped", counts_by_name(env, DROP_REASON_NAMES, ep->c_dropped, Q_NDROP_REASONS));
  napi_set_named_property(env, o, "stateless", counts_by_name(env, STATELESS_PACKET_NAMES, ep->c_stateless, Q_NSTATELESS_PACKETS));
  SET("proposed", ep->c_proposed);
  SET("rejected", ep->c_rejected);
  SET("accepted", ep->c_accepted);
  SET("gso", ep->gso);
  return o;
}

static napi_value js_endpoint_close(napi_env env, qengine *eng, napi_value *argv) {
  qendpoint *ep = endpoint_arg(env, eng, argv[0]);
  if (ep != NULL && !ep->closed) {
    ep_close(ep);
    engine_kick(eng);
  }
  return undefined(env);
}

static napi_value js_accept(napi_env env, qengine *eng, napi_value *argv) {
  qpending *p = qmap_get_u64(&eng->pendings, (uint32_t)get_num(env, argv[0], 0));
  if (p == NULL) return num(env, 0);
  qcred *cr = qmap_get_u64(&eng->creds, (uint32_t)get_num(env, argv[1], 0));
  if (cr == NULL || !cr->server || cr->released) return throw_error(env, "accept needs live server credentials");
  uint8_t *alpn;
  size_t alpnlen;
  if (get_bytes(env, argv[2], &alpn, &alpnlen) != 0) return throw_error(env, "alpn must be a Buffer in wire format");
  qtransport t = p->ep->transport;
  parse_transport(env, argv[3], &t);
  const char *err = NULL;
  qconn *c = pending_accept(p, cr, alpn, alpnlen, &t, &err);
  engine_kick(eng);
  if (c == NULL) return throw_error(env, err != NULL ? err : "accept failed");
  return num(env, c->id);
}

static napi_value js_reject(napi_env env, qengine *eng, napi_value *argv) {
  qpending *p = qmap_get_u64(&eng->pendings, (uint32_t)get_num(env, argv[0], 0));
  if (p == NULL) return undefined(env);
  pending_reject(p, (uint64_t)get_num(env, argv[1], 0));
  return undefined(env);
}

static napi_value js_connect(napi_env env, qengine *eng, napi_value *argv) {
  struct sockaddr_storage ss;
  socklen_t sslen;
  if (get_addr(env, argv[0], argv[1], &ss, &sslen) != 0) return throw_error(env, "connect needs an IP address");
  qcred *cr = qmap_get_u64(&eng->creds, (uint32_t)get_num(env, argv[2], 0));
  if (cr == NULL || cr->server || cr->released) return throw_error(env, "connect needs live client credentials");
  char *sni = get_string(env, argv[3], NULL);
  uint8_t *alpn;
  size_t alpnlen;
  if (get_bytes(env, argv[4], &alpn, &alpnlen) != 0) {
    free(sni);
    return throw_error(env, "alpn must be a Buffer in wire format");
  }
  int rcv = (int)get_num(env, prop(env, argv[6], "recvBuffer"), 256 << 10);
  int snd = (int)get_num(env, prop(env, argv[6], "sendBuffer"), 256 << 10);
  const char *err = NULL;
  int errnum = 0;
  qendpoint *ep = ep_new_connected(eng, (struct sockaddr *)&ss, sslen, rcv, snd, &err, &errnum);
  if (ep == NULL) {
    free(sni);
    char msg[160];
    snprintf(msg, sizeof msg, "%s failed: %s", err, strerror(errnum));
    return throw_error(env, msg);
  }
  transport_defaults(&ep->transport);
  parse_transport(env, argv[5], &ep->transport);
  qconn *c = conn_new_client(ep, cr, sni, alpn, alpnlen, &ep->transport, &err);
  free(sni);
  if (c == NULL) {
    ep_close(ep);
    return throw_error(env, err);
  }
  /* The endpoint lives as long as its one connection. */
  ep->closed = 1;
  ep_unref(ep);
  engine_kick(eng);
  return num(env, c->id);
}

/* close(conn, app, code, reason) and closeFlushed(conn, app, code, reason, timeoutMs). */
static napi_value close_with(napi_env env, qengine *eng, napi_value *argv, int flushed) {
  qconn *c = conn_arg(env, eng, argv[0]);
  if (c == NULL) return undefined(env);
  int app = get_bool(env, argv[1], 1);
  uint64_t code = (uint64_t)get_num(env, argv[2], 0);
  size_t len = 0;
  char *reason = get_reason(env, argv[3], &len);
  if (reason == NULL) len = 0;
  if (flushed) {
    double ms = get_num(env, argv[4], 0);
    if (!(ms > 0)) ms = 0;
    if (ms > 86400000) ms = 86400000;
    conn_close_flushed(c, app, code, reason, len, (uint64_t)(ms * 1e6));
  } else if (c->state <= CSTATE_OPEN) {
    conn_close(c, app, code, reason, len);
  }
  free(reason);
  engine_kick(eng);
  return undefined(env);
}

static napi_value js_close(napi_env env, qengine *eng, napi_value *argv) {
  return close_with(env, eng, argv, 0);
}

static napi_value js_close_flushed(napi_env env, qengine *eng, napi_value *argv) {
  return close_with(env, eng, argv, 1);
}

static napi_value js_destroy(napi_env env, qengine *eng, napi_value *argv) {
  qconn *c = conn_arg(env, eng, argv[0]);
  if (c != NULL) {
    conn_kill(c, CLOSE_DESTROYED, 1);
    engine_kick(eng);
  }
  return undefined(env);
}

static napi_value js_conn_drain(napi_env env, qengine *eng, napi_value *argv) {
  qconn *c = conn_arg(env, eng, argv[0]);
  if (c == NULL) return num(env, -1);
  int work = drain_begin(c, (int)get_num(env, argv[1], 0), (uint64_t)get_num(env, argv[2], 0));
  engine_kick(eng);
  return num(env, work);
}

static napi_value js_conn_info(napi_env env, qengine *eng, napi_value *argv) {
  qconn *c = conn_arg(env, eng, argv[0]);
  if (c == NULL) return undefined(env);
  napi_value o = object(env), v, p;
  gnutls_datum_t alpn = {NULL, 0};
  if (c->session != NULL && gnutls_alpn_get_selected_protocol(c->session, &alpn) == 0 && alpn.size > 0) {
    napi_create_string_latin1(env, (const char *)alpn.data, alpn.size, &v);
  } else {
    napi_get_null(env, &v);
  }
  napi_set_named_property(env, o, "alpn", v);
  char name[256];
  size_t namelen = sizeof name;
  unsigned type;
  if (c->session != NULL && gnutls_server_name_get(c->session, name, &namelen, &type, 0) == 0 && type == GNUTLS_NAME_DNS) {
    napi_create_string_latin1(env, name, strnlen(name, namelen), &v);
  } else {
    napi_get_null(env, &v);
  }
  napi_set_named_property(env, o, "sni", v);
  napi_set_named_property(env, o, "datagrams", boolean(env, c->datagrams));
  napi_set_named_property(env, o, "established", boolean(env, c->established));
  v = addr_values(env, &c->remote, &p);
  napi_set_named_property(env, o, "remoteAddress", v);
  napi_set_named_property(env, o, "remotePort", p);
  addr_values(env, &c->local, &p);
  napi_set_named_property(env, o, "localPort", p);
  return o;
}

static napi_value js_conn_stats(napi_env env, qengine *eng, napi_value *argv) {
  qconn *c = conn_arg(env, eng, argv[0]);
  if (c == NULL || c->conn == NULL) return undefined(env);
  ngtcp2_conn_stat st;
  ngtcp2_conn_get_conn_stat(c->conn, &st);
  napi_value o = object(env);
  SET("rttUs", st.smoothed_rtt / 1000);
  SET("cwnd", st.cwnd);
  SET("bytesInFlight", st.bytes_in_flight);
  SET("txBytes", c->tx_bytes);
  SET("rxBytes", c->rx_bytes);
  SET("txPackets", c->tx_pkts);
  SET("rxPackets", c->rx_pkts);
  SET("splicedBytes", c->spliced_bytes);
  SET("bridgedBytes", c->bridged_bytes);
  SET("datagramsDropped", c->dgram_dropped + c->dgram_unmapped);
  SET("openStreams", c->streams.used);
  SET("bridgedStreams", c->bridged_streams);
  SET("refusedStreams", c->refused_streams);
  SET("peerMaxBidiStream", (double)c->peer_max[0]);
  return o;
}

static napi_value js_peer_certificates(napi_env env, qengine *eng, napi_value *argv) {
  qconn *c = conn_arg(env, eng, argv[0]);
  napi_value arr;
  napi_create_array(env, &arr);
  if (c == NULL || c->session == NULL) return arr;
  unsigned n = 0;
  const gnutls_datum_t *certs = gnutls_certificate_get_peers(c->session, &n);
  for (unsigned i = 0; certs != NULL && i < n; i++) {
    napi_value b;
    void *d;
    napi_create_buffer_copy(env, certs[i].size, certs[i].data, &d, &b);
    napi_set_element(env, arr, i, b);
  }
  return arr;
}

static napi_value js_stream_open(napi_env env, qengine *eng, napi_value *argv) {
  qconn *c = conn_arg(env, eng, argv[0]);
  if (c == NULL || c->state != CSTATE_OPEN) return num(env, -2);
  qstream *s = NULL;
  int rv = stream_open_local(c, get_bool(env, argv[1], 1), &s);
  return num(env, rv == 0 ? (double)s->id : (double)rv);
}

static napi_value js_streams_left(napi_env env, qengine *eng, napi_value *argv) {
  qconn *c = conn_arg(env, eng, argv[0]);
  if (c == NULL || c->state != CSTATE_OPEN) return num(env, 0);
  int bidi = get_bool(env, argv[1], 1);
  return num(env, (double)(bidi ? ngtcp2_conn_get_streams_bidi_left(c->conn) : ngtcp2_conn_get_streams_uni_left(c->conn)));
}

static napi_value js_stream_read(napi_env env, qengine *eng, napi_value *argv) {
  qstream *s = stream_args(env, eng, argv);
  if (s == NULL || s->mode != SMODE_JS) return num(env, 3);
  size_t avail = (size_t)(s->rx.end - s->rx.acked);
  if (avail == 0) {
    if (s->rx_reset) return num(env, 2);
    if (s->rx_fin) {
      s->rx_notified = 0;
      s->rx_fin_read = 1;
      qconn *owner = s->conn;
      stream_maybe_free(s);
      if (owner->drain_scope != DRAIN_NONE) drain_settle(owner);
      return num(env, 1);
    }
    s->rx_notified = 0;
    return num(env, 0);
  }
  size_t max = (size_t)get_num(env, argv[2], 65536);
  if (max == 0) max = 65536;
  if (max > avail) max = avail;
  napi_value buf;
  void *data;
  if (napi_create_buffer(env, max, &data, &buf) != napi_ok) return NULL;
  stream_js_read(s, data, max);
  engine_kick(eng);
  return buf;
}

static napi_value js_stream_write(napi_env env, qengine *eng, napi_value *argv) {
  qstream *s = stream_args(env, eng, argv);
  if (s == NULL || s->mode != SMODE_JS) return num(env, -1);
  uint8_t *data;
  size_t len;
  if (get_bytes(env, argv[2], &data, &len) != 0) return throw_error(env, "data must be a Buffer");
  int fin = get_bool(env, argv[3], 0);
  ssize_t n = stream_js_write(s, data, len, fin);
  return num(env, (double)n);
}

static napi_value js_stream_reset(napi_env env, qengine *eng, napi_value *argv) {
  qstream *s = stream_args(env, eng, argv);
  if (s != NULL) stream_reset(s, (uint64_t)get_num(env, argv[2], 0));
  return undefined(env);
}

static napi_value js_stream_stop(napi_env env, qengine *eng, napi_value *argv) {
  qstream *s = stream_args(env, eng, argv);
  if (s != NULL) stream_stop_sending(s, (uint64_t)get_num(env, argv[2], 0));
  return undefined(env);
}

static napi_value js_splice(napi_env env, qengine *eng, napi_value *argv) {
  qstream *a = stream_args(env, eng, argv);
  qstream *b = stream_args(env, eng, argv + 2);
  if (a == NULL || b == NULL) return boolean(env, 0);
  int ok = stream_splice(a, b) == 0;
  engine_kick(eng);
  return boolean(env, ok);
}

static napi_value js_stream_bridge(napi_env env, qengine *eng, napi_value *argv) {
  qconn *a = conn_arg(env, eng, argv[0]);
  /* Partner 0: a raw bridge whose partner comes later. */
  int later = get_num(env, argv[1], 0) == 0;
  qconn *b = later ? NULL : conn_arg(env, eng, argv[1]);
  if (a == NULL || (b == NULL && !later)) return boolean(env, 0);
  int ok = bridge_set(a, b, (int)get_num(env, argv[2], 0), (uint64_t)get_num(env, argv[3], 0), (uint64_t)get_num(env, argv[4], 0)) == 0;
  engine_kick(eng);
  return boolean(env, ok);
}

static napi_value js_datagram_send(napi_env env, qengine *eng, napi_value *argv) {
  qconn *c = conn_arg(env, eng, argv[0]);
  uint8_t *data;
  size_t len;
  if (c == NULL || get_bytes(env, argv[1], &data, &len) != 0) return boolean(env, 0);
  return boolean(env, conn_dgram_queue(c, data, len) == 0);
}

static napi_value js_datagram_bridge(napi_env env, qengine *eng, napi_value *argv) {
  qconn *a = conn_arg(env, eng, argv[0]);
  qconn *b = conn_arg(env, eng, argv[1]);
  int mode = (int)get_num(env, argv[2], 1);
  if (a == NULL || b == NULL || a == b) return boolean(env, 0);
  a->dgram_peer = mode == 0 ? 0 : b->id;
  b->dgram_peer = mode == 0 ? 0 : a->id;
  a->dgram_mode = b->dgram_mode = mode;
  return boolean(env, 1);
}

static napi_value js_datagram_map(napi_env env, qengine *eng, napi_value *argv) {
  qconn *c = conn_arg(env, eng, argv[0]);
  if (c == NULL) return boolean(env, 0);
  uint64_t from = (uint64_t)get_num(env, argv[1], 0);
  double to = get_num(env, argv[2], -1);
  for (int i = 0; i < c->dgram_map_len; i++) {
    if (c->dgram_map_from[i] == from) {
      if (to < 0) {
        c->dgram_map_from[i] = c->dgram_map_from[c->dgram_map_len - 1];
        c->dgram_map_to[i] = c->dgram_map_to[--c->dgram_map_len];
      } else {
        c->dgram_map_to[i] = (uint64_t)to;
      }
      return boolean(env, 1);
    }
  }
  if (to < 0 || c->dgram_map_len == Q_DGRAM_MAP_MAX) return boolean(env, 0);
  c->dgram_map_from[c->dgram_map_len] = from;
  c->dgram_map_to[c->dgram_map_len++] = (uint64_t)to;
  return boolean(env, 1);
}

static napi_value js_counters(napi_env env, qengine *eng, napi_value *argv) {
  (void)argv;
  napi_value o = object(env);
  SET("connections", eng->live_conns);
  SET("streams", eng->live_streams);
  SET("pending", eng->live_pending);
  SET("bufferedBytes", eng->live_chunks_bytes);
  SET("datagramsQueued", eng->live_dgrams);
  SET("endpoints", eng->live_endpoints);
  SET("credentials", eng->live_creds);
  SET("sendCalls", eng->c_sendmmsg);
  SET("recvCalls", eng->c_recvmmsg);
  set_io(env, o, &eng->io);
  SET("turns", eng->c_runs);
  SET("writes", eng->c_writes);
  SET("polls", eng->c_polls);
  SET("timers", eng->nheap);
  SET("busyNs", (double)eng->busy_ns);
  SET("bridgedStreams", (double)eng->c_bridged_streams);
  return o;
}

/* The process's malloc heap (glibc), apart from counters(): mallinfo2 walks every free chunk,
   milliseconds on a fragmented heap, which a metrics scrape should not pay. */
static napi_value js_heap_stats(napi_env env, qengine *eng, napi_value *argv) {
  (void)eng;
  (void)argv;
  struct mallinfo2 mi = mallinfo2();
  napi_value o = object(env);
  SET("inUse", (double)(mi.uordblks + mi.hblkhd));
  SET("free", (double)mi.fordblks);
  return o;
}

/* glibc returns freed memory to the kernel only from the top of its heap, which whatever is
   still allocated pins: after a wave of connections closes, RSS stays at the wave's peak. */
static napi_value js_heap_trim(napi_env env, qengine *eng, napi_value *argv) {
  (void)eng;
  (void)argv;
  return boolean(env, malloc_trim(0));
}

static void cleanup(void *arg) {
  engine_destroy(arg);
}

static void finalize_instance(napi_env env, void *data, void *hint) {
  (void)env;
  (void)data;
  (void)hint;
  /* engine_destroy already ran from the cleanup hook; libuv handles may still be closing, so
     the engine's memory is left to the process exit. */
}

/* Every method receives its engine and its arguments (N-API passes undefined for the ones left out). */
typedef napi_value (*qmethod_fn)(napi_env env, qengine *eng, napi_value *argv);

typedef struct {
  const char *name;
  qmethod_fn fn;
} qmethod;

#define ARGS_MAX 7 /* connect's */

static const qmethod METHODS[] = {
    {"init", js_init},
    {"credServer", js_cred_server},
    {"credClient", js_cred_client},
    {"credRelease", js_cred_release},
    {"listen", js_listen},
    {"endpointConfigure", js_endpoint_configure},
    {"endpointStats", js_endpoint_stats},
    {"endpointClose", js_endpoint_close},
    {"accept", js_accept},
    {"reject", js_reject},
    {"connect", js_connect},
    {"close", js_close},
    {"closeFlushed", js_close_flushed},
    {"destroy", js_destroy},
    {"connDrain", js_conn_drain},
    {"connInfo", js_conn_info},
    {"connStats", js_conn_stats},
    {"peerCertificates", js_peer_certificates},
    {"streamOpen", js_stream_open},
    {"streamsLeft", js_streams_left},
    {"streamRead", js_stream_read},
    {"streamWrite", js_stream_write},
    {"streamReset", js_stream_reset},
    {"streamStop", js_stream_stop},
    {"splice", js_splice},
    {"streamBridge", js_stream_bridge},
    {"datagramSend", js_datagram_send},
    {"datagramBridge", js_datagram_bridge},
    {"datagramMap", js_datagram_map},
    {"counters", js_counters},
    {"heapStats", js_heap_stats},
    {"heapTrim", js_heap_trim},
};

#define NMETHODS (sizeof METHODS / sizeof METHODS[0])

/* The one N-API callback: unpacks the arguments and calls the method its descriptor names. */
static napi_value call_method(napi_env env, napi_callback_info info) {
  napi_value argv[ARGS_MAX] = {NULL};
  size_t argc = ARGS_MAX;
  void *data = NULL;
  napi_get_cb_info(env, info, &argc, argv, NULL, &data);
  const qmethod *m = data;
  return m->fn(env, engine_of(env), argv);
}

NAPI_MODULE_INIT() {
  qengine *eng = calloc(1, sizeof *eng);
  if (eng == NULL || engine_init(eng, env) != 0) {
    napi_throw_error(env, NULL, "the QUIC engine could not start");
    return NULL;
  }
  napi_set_instance_data(env, eng, finalize_instance, NULL);
  napi_add_env_cleanup_hook(env, cleanup, eng);
  napi_property_descriptor fns[NMETHODS];
  for (size_t i = 0; i < NMETHODS; i++) {
    /* A plain method of the exports object (no getter, setter or value). */
    fns[i] = (napi_property_descriptor){METHODS[i].name, NULL, call_method, NULL, NULL, NULL, napi_default, (void *)&METHODS[i]};
  }
  napi_define_properties(env, exports, NMETHODS, fns);
  return exports;
}
