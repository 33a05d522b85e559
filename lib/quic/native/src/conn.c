/*
 * One QUIC connection on ngtcp2: creation (server from an accepted Initial, client dial), the
 * ngtcp2 callbacks, the write loop, timers and close.
 *
 * Rules ngtcp2 sets and this file keeps (ngtcp2 0.12 API, measured on this machine):
 * - never read or write packets from inside a callback: callbacks record events and buffer
 *   bytes, writes happen in conn_write() from the engine turn;
 * - timestamps are nanoseconds (uv_hrtime), settings.initial_ts is set;
 * - the server is created with dcid = the client's SCID, a fresh scid, and
 *   params.original_dcid = the client's first DCID (or the one recovered from a Retry token);
 * - stream bytes given to ngtcp2 stay put until acknowledged (stream.c);
 * - received bytes are credited back (extend_max_*_offset) only once consumed (stream.c).
 *
 * Closing (RFC 9000 §10.2): after sending CONNECTION_CLOSE the connection stays for three PTOs,
 * answering the peer's packets with the same close packet (rate-limited); after receiving one it
 * drains silently for three PTOs. TypeScript hears EV_CLOSED once, when either begins.
 */
#include "quic.h"

#include <stdlib.h>
#include <stdio.h>
#include <errno.h>
#include <gnutls/crypto.h>

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref) {
  qconn *c = ref->user_data;
  return c->conn;
}

static void rand_cb(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx) {
  (void)ctx;
  q_rand(dest, len);
}

static int get_new_cid_cb(ngtcp2_conn *conn, ngtcp2_cid *cid, uint8_t *token, size_t cidlen, void *ud) {
  (void)conn;
  qconn *c = ud;
  if (c->ncids >= Q_MAX_CIDS) return NGTCP2_ERR_CALLBACK_FAILURE;
  cid->datalen = cidlen;
  for (int tries = 0; tries < 4; tries++) {
    q_rand(cid->data, cidlen);
    if (qmap_get(&c->ep->cids, cid->data, cid->datalen) == NULL) break;
  }
  ep_reset_token(c->ep, cid, token);
  if (ep_register_cid(c->ep, cid, c) != 0) return NGTCP2_ERR_CALLBACK_FAILURE;
  c->cids[c->ncids++] = *cid;
  return 0;
}

static int remove_cid_cb(ngtcp2_conn *conn, const ngtcp2_cid *cid, void *ud) {
  (void)conn;
  qconn *c = ud;
  for (int i = 0; i < c->ncids; i++) {
    if (ngtcp2_cid_eq(&c->cids[i], cid)) {
      ep_unregister_cid(c->ep, cid, c);
      c->cids[i] = c->cids[--c->ncids];
      break;
    }
  }
  return 0;
}

static int handshake_completed_cb(ngtcp2_conn *conn, void *ud) {
  (void)conn;
  qconn *c = ud;
  c->established = 1;
  if (c->state == CSTATE_HANDSHAKE) c->state = CSTATE_OPEN;
  return 0;
}

static int recv_stream_data_cb(ngtcp2_conn *conn, uint32_t flags, int64_t stream_id, uint64_t offset,
                               const uint8_t *data, size_t datalen, void *ud, void *sud) {
  (void)conn;
  (void)offset;
  qconn *c = ud;
  qstream *s = sud;
  if (s == NULL) s = conn_find_stream(c, stream_id);
  if (s == NULL) return 0;
  c->rx_bytes += datalen;
  return stream_on_recv(s, flags, data, datalen);
}

static int acked_stream_data_offset_cb(ngtcp2_conn *conn, int64_t stream_id, uint64_t offset, uint64_t datalen,
                                       void *ud, void *sud) {
  (void)conn;
  qconn *c = ud;
  qstream *s = sud;
  if (s == NULL) s = conn_find_stream(c, stream_id);
  if (s != NULL) stream_on_acked(s, offset, datalen);
  return 0;
}

static int stream_open_cb(ngtcp2_conn *conn, int64_t stream_id, void *ud) {
  qconn *c = ud;
  qstream *s = stream_new(c, stream_id);
  if (s == NULL) return NGTCP2_ERR_CALLBACK_FAILURE;
  ngtcp2_conn_set_stream_user_data(conn, stream_id, s);
  if (!ngtcp2_is_bidi_stream(stream_id)) c->peer_uni_bytes += Q_PEER_UNI_STATE;
  if (drain_on_open(s)) return 0;
  if (bridge_on_open(s)) return 0;
  engine_emit(c->eng, EV_STREAM_OPENED, c->id, stream_id, 0, 0, NULL, 0);
  return 0;
}

static int stream_close_cb(ngtcp2_conn *conn, uint32_t flags, int64_t stream_id, uint64_t code, void *ud, void *sud) {
  qconn *c = ud;
  qstream *s = sud;
  if (s == NULL) s = conn_find_stream(c, stream_id);
  /* A STOP_SENDING in this same packet must be passed on before the stream goes. */
  if (c->nstops > 0) frames_apply_stops(c, stream_id);
  /* ngtcp2 0.12 renews the peer's stream credit only when told: one stream ended, one more may
     open (so the limit is on concurrent streams, RFC 9000 §4.6). Not while draining (drain.c).
     (It never closes a stream the peer opened unidirectionally: stream.c retires those.) */
  if (!ngtcp2_conn_is_local_stream(conn, stream_id) && c->drain_scope == DRAIN_NONE) {
    if (ngtcp2_is_bidi_stream(stream_id)) ngtcp2_conn_extend_max_streams_bidi(conn, 1);
    else ngtcp2_conn_extend_max_streams_uni(conn, 1);
  }
  if (s != NULL) stream_on_close(s, code, (flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET) != 0);
  return 0;
}

static int stream_reset_cb(ngtcp2_conn *conn, int64_t stream_id, uint64_t final_size, uint64_t code, void *ud, void *sud) {
  (void)conn;
  (void)final_size;
  qconn *c = ud;
  qstream *s = sud;
  if (s == NULL) s = conn_find_stream(c, stream_id);
  if (s != NULL) stream_on_reset(s, code);
  return 0;
}

static int extend_max_stream_data_cb(ngtcp2_conn *conn, int64_t stream_id, uint64_t max_data, void *ud, void *sud) {
  (void)conn;
  (void)max_data;
  qconn *c = ud;
  qstream *s = sud;
  if (s == NULL) s = conn_find_stream(c, stream_id);
  if (s != NULL) stream_on_extend(s);
  return 0;
}

static void streams_available(qconn *c) {
  engine_emit(c->eng, EV_STREAMS_AVAILABLE, c->id, -1, (double)ngtcp2_conn_get_streams_bidi_left(c->conn),
              (double)ngtcp2_conn_get_streams_uni_left(c->conn), NULL, 0);
}

/* The peer granted more streams of one kind: the bridge's waiting twins go first; TypeScript
   hears of it when one of its opens failed for lack of credit. */
static int streams_extended(qconn *c, int bidi) {
  int *blocked = bidi ? &c->streams_blocked_bidi : &c->streams_blocked_uni;
  bridge_on_credit(c);
  if (*blocked) {
    *blocked = 0;
    if (c->established) streams_available(c);
  }
  return 0;
}

static int extend_bidi_cb(ngtcp2_conn *conn, uint64_t max_streams, void *ud) {
  (void)conn;
  (void)max_streams;
  return streams_extended(ud, 1);
}

static int extend_uni_cb(ngtcp2_conn *conn, uint64_t max_streams, void *ud) {
  (void)conn;
  (void)max_streams;
  return streams_extended(ud, 0);
}

static int recv_stateless_reset_cb(ngtcp2_conn *conn, const ngtcp2_pkt_stateless_reset *sr, void *ud) {
  (void)conn;
  (void)sr;
  qconn *c = ud;
  c->stateless_reset = 1;
  return 0;
}

static int recv_datagram_cb(ngtcp2_conn *conn, uint32_t flags, const uint8_t *data, size_t len, void *ud) {
  (void)conn;
  (void)flags;
  qconn *c = ud;
  if (c->dgram_peer != 0) {
    qconn *p = qmap_get_u64(&c->eng->conns, c->dgram_peer);
    if (p == NULL || p->state != CSTATE_OPEN || !p->datagrams) {
      c->dgram_dropped++;
      return 0;
    }
    if (c->dgram_mode == 2) {
      /* HTTP/3 datagram: a quarter stream id (RFC 9297 §2.1) names the session on this leg. */
      uint64_t q;
      size_t n = q_varint_get(data, len, &q);
      if (n == 0) {
        c->dgram_unmapped++;
        return 0;
      }
      int i = 0;
      while (i < c->dgram_map_len && c->dgram_map_from[i] != q) i++;
      if (i == c->dgram_map_len) {
        c->dgram_unmapped++;
        return 0;
      }
      uint8_t buf[8 + 1500];
      if (len - n > 1500) {
        c->dgram_dropped++;
        return 0;
      }
      size_t h = q_varint_put(buf, c->dgram_map_to[i]);
      memcpy(buf + h, data + n, len - n);
      if (conn_dgram_queue(p, buf, h + len - n) == 0) c->bridged_bytes += len;
      else c->dgram_dropped++;
      return 0;
    }
    if (conn_dgram_queue(p, data, len) == 0) c->bridged_bytes += len;
    else c->dgram_dropped++;
    return 0;
  }
  if (!c->js_datagrams) {
    c->dgram_dropped++;
    return 0;
  }
  uint8_t *copy = malloc(len > 0 ? len : 1);
  if (copy == NULL) return 0;
  memcpy(copy, data, len);
  engine_emit(c->eng, EV_DATAGRAM, c->id, -1, 0, 0, copy, len);
  return 0;
}

/*
 * ngtcp2 0.12 asserts (aborting the process) when it writes a 1-RTT packet on a server whose
 * client sent no quic_transport_parameters: GnuTLS completes the ClientHello without them and
 * installs the keys, but the negotiated version is only set from those parameters. Found by the
 * datagram fuzz (test/integration/quic-engine-fuzz.test.ts). Refuse such a handshake when the
 * 1-RTT keys arrive (RFC 9001 §8.2: the extension is mandatory), before anything is written.
 */
static int recv_tx_key_cb(ngtcp2_conn *conn, ngtcp2_crypto_level level, void *ud) {
  (void)ud;
  if (level == NGTCP2_CRYPTO_LEVEL_APPLICATION && (ngtcp2_conn_get_remote_transport_params(conn) == NULL ||
                                                   ngtcp2_conn_get_negotiated_version(conn) == 0)) {
    return NGTCP2_ERR_CALLBACK_FAILURE;
  }
  return 0;
}

/* The callbacks both roles hand ngtcp2 (one list); each table adds its own: the server
 * answers a client's Initial and refuses 1-RTT keys before the client's transport parameters
 * (recv_tx_key), the client sends the first Initial and may be sent a Retry. */
#define COMMON_CALLBACKS \
    .recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb, \
    .handshake_completed = handshake_completed_cb, \
    .encrypt = ngtcp2_crypto_encrypt_cb, \
    .decrypt = frames_decrypt_cb, \
    .hp_mask = ngtcp2_crypto_hp_mask_cb, \
    .recv_stream_data = recv_stream_data_cb, \
    .acked_stream_data_offset = acked_stream_data_offset_cb, \
    .stream_open = stream_open_cb, \
    .stream_close = stream_close_cb, \
    .recv_stateless_reset = recv_stateless_reset_cb, \
    .extend_max_local_streams_bidi = extend_bidi_cb, \
    .extend_max_local_streams_uni = extend_uni_cb, \
    .rand = rand_cb, \
    .get_new_connection_id = get_new_cid_cb, \
    .remove_connection_id = remove_cid_cb, \
    .update_key = ngtcp2_crypto_update_key_cb, \
    .stream_reset = stream_reset_cb, \
    .extend_max_stream_data = extend_max_stream_data_cb, \
    .delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb, \
    .delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb, \
    .recv_datagram = recv_datagram_cb, \
    .get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb, \
    .version_negotiation = ngtcp2_crypto_version_negotiation_cb

static const ngtcp2_callbacks SERVER_CALLBACKS = {
    COMMON_CALLBACKS,
    .recv_tx_key = recv_tx_key_cb,
    .recv_client_initial = ngtcp2_crypto_recv_client_initial_cb,
};

static const ngtcp2_callbacks CLIENT_CALLBACKS = {
    COMMON_CALLBACKS,
    .client_initial = ngtcp2_crypto_client_initial_cb,
    .recv_retry = ngtcp2_crypto_recv_retry_cb,
};

static void apply_settings(ngtcp2_settings *s, const qtransport *t) {
  ngtcp2_settings_default(s);
  s->initial_ts = q_now();
  s->cc_algo = NGTCP2_CC_ALGO_CUBIC;
  s->max_tx_udp_payload_size = t->max_payload;
  s->no_tx_udp_payload_size_shaping = 1;
  s->handshake_timeout = t->handshake_timeout_ns;
  s->max_window = t->max_window;
  /* No stream window auto-tuning: every stream gets its whole window (params, below) from the
     start. ngtcp2 0.12.1 (Debian bookworm) loses a tuning step when the MAX_STREAM_DATA frame that
     carries it does not fit the packet: the frame is queued and sent later with the grown value,
     but the stream's own limit is not raised with it, and the next frame for the stream announces
     less. The peer then sends up to what it was told and the connection dies with
     FLOW_CONTROL_ERROR (raw-quic-quinn "64 MiB each way": a Stargate's leg closed by the router
     with ngtcp2 error -211, 2 runs in 125; fixed upstream in ngtcp2/ngtcp2#891, "Update
     strm->rx.max_offset before writing a frame to packet"). Without tuning the queued value is the
     one the stream's limit gets at its next frame, so the two agree. The connection window keeps
     its tuning: ngtcp2 raises its own limit before writing MAX_DATA. The memory bound is the
     same, since tuning could grow a stream to this window anyway and the connection window
     bounds all streams together. */
  s->max_stream_window = 0;
  /* Fixed packet size: the configured payload is what every path here carries (SPEC §7 benchmarks
     are at 1350-byte packets); probing larger sizes buys nothing on the pod network. */
  s->no_pmtud = 1;
}

static void apply_params(ngtcp2_transport_params *p, const qtransport *t) {
  ngtcp2_transport_params_default(p);
  p->initial_max_stream_data_bidi_local = t->max_stream_window;
  p->initial_max_stream_data_bidi_remote = t->max_stream_window;
  p->initial_max_stream_data_uni = t->max_stream_window;
  p->initial_max_data = t->initial_max_data;
  p->initial_max_streams_bidi = t->max_streams_bidi;
  p->initial_max_streams_uni = t->max_streams_uni;
  p->max_idle_timeout = t->idle_timeout_ns;
  p->max_udp_payload_size = 1500;
  p->active_connection_id_limit = 4;
  p->max_datagram_frame_size = t->datagrams ? 65535 : 0;
}

/* A connection on ep to remote, registered with the engine but not yet started (conn_start). */
static qconn *conn_alloc(qendpoint *ep, int server, qcred *cr, const qtransport *t,
                         const struct sockaddr_storage *remote, socklen_t remotelen, const char **err) {
  qconn *c = calloc(1, sizeof *c);
  if (c == NULL) {
    *err = "out of memory";
    return NULL;
  }
  memcpy(&c->local, &ep->local, ep->locallen);
  c->locallen = ep->locallen;
  memcpy(&c->remote, remote, remotelen);
  c->remotelen = remotelen;
  c->eng = ep->eng;
  c->ep = ep;
  c->server = server;
  c->state = CSTATE_HANDSHAKE;
  c->conn_ref.get_conn = get_conn;
  c->conn_ref.user_data = c;
  c->cred = cr;
  c->keep_alive_ns = t->keep_alive_ns;
  c->stream_send_limit = t->stream_send_limit;
  c->local_datagrams = t->datagrams;
  c->heap_idx = -1;
  cr->refs++;
  ep->refs++;
  qmap_init(&c->streams);
  qmap_init(&c->bridge_ahead);
  c->next_local[0] = server ? 1 : 0;
  c->next_local[1] = server ? 3 : 2;
  c->peer_max[0] = c->peer_max[1] = -1;
  c->id = engine_new_id(ep->eng);
  qmap_put_u64(&ep->eng->conns, c->id, c);
  ep->eng->live_conns++;
  return c;
}

/* The path ngtcp2 is created with: our address and the peer's. */
static ngtcp2_path conn_path(qconn *c) {
  return (ngtcp2_path){
      {(struct sockaddr *)&c->local, c->locallen},
      {(struct sockaddr *)&c->remote, c->remotelen},
      NULL,
  };
}

/* Frees what conn_alloc and creation set up (a connection that never started). */
static void conn_abort_new(qconn *c) {
  qengine *eng = c->eng;
  for (int i = 0; i < c->ncids; i++) ep_unregister_cid(c->ep, &c->cids[i], c);
  if (c->odcid_registered) ep_unregister_cid(c->ep, &c->odcid, c);
  if (c->rscid_registered) ep_unregister_cid(c->ep, &c->rscid, c);
  if (c->conn != NULL) ngtcp2_conn_del(c->conn);
  if (c->session != NULL) gnutls_deinit(c->session);
  free(c->sni);
  qmap_free(&c->streams);
  qmap_free(&c->bridge_ahead);
  qmap_del_u64(&eng->conns, c->id);
  cred_unref(eng, c->cred);
  ep_unref(c->ep);
  eng->live_conns--;
  free(c);
}

/* Creation's second half once ngtcp2_conn_*_new answered rv: the TLS session (sni and alpn as
   the side needs them), then the SCID the peer addresses us by. -1 (err set): conn_abort_new. */
static int conn_start(qconn *c, int rv, const ngtcp2_cid *scid, const char *sni, const uint8_t *alpn, size_t alpnlen,
                      const char **err) {
  if (rv != 0) {
    c->conn = NULL;
    *err = "the connection could not be created";
    return -1;
  }
  int tls = c->server ? tls_session_server(c, c->cred, alpn, alpnlen) : tls_session_client(c, c->cred, sni, alpn, alpnlen);
  if (tls != 0) {
    *err = "the TLS session could not be set up";
    return -1;
  }
  ngtcp2_conn_set_tls_native_handle(c->conn, c->session);
  if (c->keep_alive_ns > 0) ngtcp2_conn_set_keep_alive_timeout(c->conn, c->keep_alive_ns);
  c->cids[c->ncids++] = *scid;
  ep_register_cid(c->ep, scid, c);
  c->js_datagrams = 1;
  return 0;
}

qconn *conn_new_server(qendpoint *ep, const ngtcp2_pkt_hd *hd, const qpending *p, qcred *cr,
                       const uint8_t *alpn, size_t alpnlen, const qtransport *t, const char **err) {
  qconn *c = conn_alloc(ep, 1, cr, t, &p->remote, p->remotelen, err);
  if (c == NULL) return NULL;
  c->validated = p->validated;

  ngtcp2_cid scid;
  scid.datalen = Q_SCID_LEN;
  for (int tries = 0; tries < 4; tries++) {
    q_rand(scid.data, scid.datalen);
    if (qmap_get(&ep->cids, scid.data, scid.datalen) == NULL) break;
  }
  ngtcp2_settings settings;
  apply_settings(&settings, t);
  if (p->validated) {
    /* The client proved its address with our Retry token: no amplification limit. */
    settings.token = hd->token;
  }
  ngtcp2_transport_params params;
  apply_params(&params, t);
  if (p->validated) {
    params.original_dcid = p->odcid;
    params.retry_scid = hd->dcid;
    params.retry_scid_present = 1;
  } else {
    params.original_dcid = hd->dcid;
  }
  params.stateless_reset_token_present = 1;
  ep_reset_token(ep, &scid, params.stateless_reset_token);

  ngtcp2_path path = conn_path(c);
  int rv = ngtcp2_conn_server_new(&c->conn, &hd->scid, &scid, &path, hd->version, &SERVER_CALLBACKS, &settings,
                                  &params, NULL, c);
  if (conn_start(c, rv, &scid, NULL, alpn, alpnlen, err) != 0) {
    conn_abort_new(c);
    return NULL;
  }
  /* The client addresses us by its chosen DCID until it learns our SCID. */
  c->odcid = hd->dcid;
  c->odcid_registered = ep_register_cid(ep, &c->odcid, c) == 0;
  return c;
}

qconn *conn_new_client(qendpoint *ep, qcred *cr, const char *sni, const uint8_t *alpn, size_t alpnlen,
                       const qtransport *t, const char **err) {
  qconn *c = conn_alloc(ep, 0, cr, t, &ep->remote, ep->remotelen, err);
  if (c == NULL) return NULL;
  ngtcp2_cid dcid, scid;
  dcid.datalen = 18;
  q_rand(dcid.data, dcid.datalen);
  scid.datalen = Q_SCID_LEN;
  q_rand(scid.data, scid.datalen);
  ngtcp2_settings settings;
  apply_settings(&settings, t);
  ngtcp2_transport_params params;
  apply_params(&params, t);
  ngtcp2_path path = conn_path(c);
  int rv = ngtcp2_conn_client_new(&c->conn, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1, &CLIENT_CALLBACKS, &settings,
                                  &params, NULL, c);
  if (conn_start(c, rv, &scid, sni, alpn, alpnlen, err) != 0) {
    conn_abort_new(c);
    return NULL;
  }
  engine_mark_dirty(c->eng, c);
  return c;
}

qstream *conn_find_stream(qconn *c, int64_t id) {
  return qmap_get_u64(&c->streams, (uint64_t)id);
}

/* ---- close ---- */

static void emit_closed(qconn *c, int kind, int app, uint64_t code, const uint8_t *reason, size_t reasonlen, int alert,
                        int liberr) {
  if (c->closed_event_sent) return;
  c->closed_event_sent = 1;
  if (reasonlen > 1024) reasonlen = 1024;
  qclose_info *info = malloc(sizeof *info + reasonlen + 1);
  if (info == NULL) return;
  info->app = app;
  info->established = c->established;
  info->alert = alert;
  info->liberr = liberr;
  info->code = code;
  info->reasonlen = reasonlen;
  if (reasonlen > 0) memcpy(info->reason, reason, reasonlen);
  info->reason[reasonlen] = 0;
  engine_emit(c->eng, EV_CLOSED, c->id, -1, kind, (double)code, info, sizeof *info + reasonlen + 1);
}

/* Streams end with their connection; splice partners on other connections are told. */
static void drop_streams(qconn *c) {
  qstream **all = NULL;
  size_t n = 0;
  if (c->streams.used > 0) {
    all = malloc(c->streams.used * sizeof *all);
    if (all == NULL) return;
    QMAP_EACH(&c->streams, i) all[n++] = c->streams.slots[i].val;
  }
  for (size_t i = 0; i < n; i++) stream_conn_gone(all[i]);
  for (size_t i = 0; i < n; i++) stream_free(all[i]);
  free(all);
  c->sq_head = c->sq_tail = NULL;
}

static void drop_dgrams(qconn *c) {
  qdgram *d = c->dq_head;
  while (d != NULL) {
    qdgram *next = d->next;
    free(d);
    c->eng->live_dgrams--;
    d = next;
  }
  c->dq_head = c->dq_tail = NULL;
  c->dq_len = 0;
}

static void release_half_open(qconn *c) {
  if (!c->half_open_counted) return;
  c->half_open_counted = 0;
  ep_half_open_release(c->ep, c->addr_key);
}

static void enter_closing(qconn *c, int state) {
  c->state = state;
  release_half_open(c);
  drop_streams(c);
  bridge_on_gone(c);
  drop_dgrams(c);
  uint64_t pto = ngtcp2_conn_get_pto(c->conn);
  c->close_deadline = q_now() + 3 * pto;
  conn_arm_timer(c);
}

/* Sends CONNECTION_CLOSE with ccerr and enters the closing period. */
static void send_close(qconn *c, const ngtcp2_connection_close_error *ccerr) {
  uint8_t buf[Q_TX_PKT_SIZE];
  ngtcp2_path_storage ps;
  ngtcp2_path_storage_zero(&ps);
  ngtcp2_pkt_info pi;
  ngtcp2_ssize n = ngtcp2_conn_write_connection_close(c->conn, &ps.path, &pi, buf, ngtcp2_conn_get_max_tx_udp_payload_size(c->conn), ccerr, q_now());
  if (n > 0) {
    c->close_pkt = malloc((size_t)n);
    if (c->close_pkt != NULL) {
      memcpy(c->close_pkt, buf, (size_t)n);
      c->close_pktlen = (size_t)n;
    }
    ep_send_raw(c->ep, buf, (size_t)n, (struct sockaddr *)&c->remote, c->remotelen);
    c->tx_pkts++;
  }
  enter_closing(c, CSTATE_CLOSING);
}

void conn_close(qconn *c, int app, uint64_t code, const char *reason, size_t reasonlen) {
  if (c->state > CSTATE_OPEN) return;
  c->flush_close = 0;
  ngtcp2_connection_close_error ccerr;
  ngtcp2_connection_close_error_default(&ccerr);
  if (app) ngtcp2_connection_close_error_set_application_error(&ccerr, code, (const uint8_t *)reason, reasonlen);
  else ngtcp2_connection_close_error_set_transport_error(&ccerr, code, (const uint8_t *)reason, reasonlen);
  emit_closed(c, CLOSE_LOCAL, app, code, (const uint8_t *)reason, reasonlen, 0, 0);
  send_close(c, &ccerr);
}

/* ---- close once flushed ----
 *
 * A relay whose other leg's peer closed (CONNECTION_CLOSE) owes this leg's peer what it already
 * took from that one: bytes it acknowledged there but has not delivered here, and the FINs and
 * resets that came with them (stream.c stream_conn_gone leaves such streams open, without a
 * reset). So this leg sends on as usual and closes with the other peer's code and reason once
 * each stream is flushed, or at the deadline. Nothing new is read for those streams (their
 * partner is gone: STOP_SENDING), so what is held only shrinks; the idle timeout still ends a
 * connection whose peer went silent.
 */

/* Whether a stream has nothing left to deliver: its bytes acknowledged and its FIN too, or
   ngtcp2 done with it. A stream being reset waits for ngtcp2 to end it (its RESET_STREAM
   acknowledged, its read side ended), so the RESET_STREAM goes out before the close. */
static int stream_flushed(const qstream *s) {
  if (s->ng_closed) return 1;
  if (s->tx_shut) return 0;
  return s->tx.acked >= s->tx.end && (!s->tx_fin || s->tx_fin_acked);
}

static int conn_flushed(const qconn *c) {
  QMAP_EACH(&c->streams, i) {
    if (!stream_flushed(c->streams.slots[i].val)) return 0;
  }
  return 1;
}

int conn_close_flushed(qconn *c, int app, uint64_t code, const char *reason, size_t reasonlen, uint64_t timeout_ns) {
  if (c->state > CSTATE_OPEN) return -1;
  if (c->state == CSTATE_HANDSHAKE) {
    /* Nothing was relayed over it yet. */
    conn_close(c, app, code, reason, reasonlen);
    return 0;
  }
  if (c->flush_close) return 0;
  uint8_t *copy = malloc(reasonlen > 0 ? reasonlen : 1);
  if (copy == NULL) {
    conn_close(c, app, code, reason, reasonlen);
    return 0;
  }
  if (reasonlen > 0) memcpy(copy, reason, reasonlen);
  c->flush_close = 1;
  c->flush_app = app;
  c->flush_code = code;
  c->flush_reason = copy;
  c->flush_reasonlen = reasonlen;
  c->flush_deadline = q_now() + timeout_ns;
  engine_mark_dirty(c->eng, c);
  conn_arm_timer(c);
  return 0;
}

void conn_flush_close_now(qconn *c) {
  if (!c->flush_close) return;
  conn_close(c, c->flush_app, c->flush_code, (const char *)c->flush_reason, c->flush_reasonlen);
}

/* ngtcp2 refused a packet or a write with a fatal error: close with the error it implies. */
static void conn_fail(qconn *c, int rv) {
  if (c->state > CSTATE_OPEN) return;
  if (rv == NGTCP2_ERR_DRAINING) {
    ngtcp2_connection_close_error cc;
    ngtcp2_conn_get_connection_close_error(c->conn, &cc);
    if (c->stateless_reset) {
      emit_closed(c, CLOSE_STATELESS_RESET, 0, 0, NULL, 0, 0, 0);
    } else {
      c->peer_closed = 1;
      emit_closed(c, CLOSE_PEER, cc.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_APPLICATION, cc.error_code, cc.reason,
                  cc.reasonlen, 0, 0);
    }
    enter_closing(c, CSTATE_DRAINING);
    return;
  }
  if (rv == NGTCP2_ERR_DROP_CONN) {
    conn_kill(c, CLOSE_ERROR, 1);
    return;
  }
  if (rv == NGTCP2_ERR_IDLE_CLOSE) {
    conn_kill(c, CLOSE_IDLE, 1);
    return;
  }
  if (rv == NGTCP2_ERR_HANDSHAKE_TIMEOUT) {
    conn_kill(c, CLOSE_HANDSHAKE_TIMEOUT, 1);
    return;
  }
  ngtcp2_connection_close_error ccerr;
  ngtcp2_connection_close_error_default(&ccerr);
  int alert = 0;
  if (rv == NGTCP2_ERR_CRYPTO) {
    alert = ngtcp2_conn_get_tls_alert(c->conn);
    ngtcp2_connection_close_error_set_transport_error_tls_alert(&ccerr, (uint8_t)alert, NULL, 0);
  } else {
    ngtcp2_connection_close_error_set_transport_error_liberr(&ccerr, rv, NULL, 0);
  }
  emit_closed(c, CLOSE_ERROR, 0, ccerr.error_code, NULL, 0, alert, rv);
  send_close(c, &ccerr);
}

void conn_kill(qconn *c, int kind, int emit) {
  if (c->state == CSTATE_DEAD) return;
  if (emit) emit_closed(c, kind, 0, 0, NULL, 0, 0, 0);
  c->state = CSTATE_DEAD;
  release_half_open(c);
  drop_streams(c);
  bridge_on_gone(c);
  drop_dgrams(c);
  for (int i = 0; i < c->ncids; i++) ep_unregister_cid(c->ep, &c->cids[i], c);
  c->ncids = 0;
  if (c->odcid_registered) ep_unregister_cid(c->ep, &c->odcid, c);
  c->odcid_registered = 0;
  if (c->server && c->ep->nconns > 0) c->ep->nconns--;
  engine_unschedule(c->eng, c);
  qmap_del_u64(&c->eng->conns, c->id);
  c->next_dead = c->eng->dead_head;
  c->eng->dead_head = c;
}

void conn_reap(qengine *eng) {
  while (eng->dead_head != NULL) {
    qconn *c = eng->dead_head;
    eng->dead_head = c->next_dead;
    if (c->conn != NULL) ngtcp2_conn_del(c->conn);
    if (c->session != NULL) gnutls_deinit(c->session);
    free(c->sni);
    qmap_free(&c->streams);
    qmap_free(&c->bridge_ahead);
    free(c->close_pkt);
    free(c->flush_reason);
    cred_unref(eng, c->cred);
    ep_unref(c->ep);
    eng->live_conns--;
    free(c);
  }
}

/* ---- I/O ---- */

static void after_progress(qconn *c) {
  if (c->established && !c->handshake_done_event && c->state == CSTATE_OPEN) {
    c->handshake_done_event = 1;
    release_half_open(c);
    const ngtcp2_transport_params *rp = ngtcp2_conn_get_remote_transport_params(c->conn);
    c->datagrams = c->local_datagrams && rp != NULL && rp->max_datagram_frame_size > 0;
    engine_emit(c->eng, EV_ESTABLISHED, c->id, -1, c->datagrams, 0, NULL, 0);
    bridge_on_established(c);
  }
}

void conn_read(qconn *c, const uint8_t *data, size_t len, const struct sockaddr *from, socklen_t fromlen) {
  c->rx_pkts++;
  if (c->state == CSTATE_CLOSING) {
    /* Repeat our CONNECTION_CLOSE, at most for every 4th packet (RFC 9000 §10.2.1). */
    if (c->close_pkt != NULL && (c->close_repeat++ & 3) == 0) ep_send_raw(c->ep, c->close_pkt, c->close_pktlen, from, fromlen);
    return;
  }
  if (c->state != CSTATE_HANDSHAKE && c->state != CSTATE_OPEN) return;
  struct sockaddr_storage remote;
  memcpy(&remote, from, fromlen);
  ngtcp2_path path = {
      {(struct sockaddr *)&c->local, c->locallen},
      {(struct sockaddr *)&remote, fromlen},
      NULL,
  };
  ngtcp2_pkt_info pi = {0};
  frames_current = c;
  int rv = ngtcp2_conn_read_pkt(c->conn, &path, &pi, data, len, q_now());
  frames_current = NULL;
  if (c->nstops > 0) {
    if (rv == 0) frames_apply_stops(c, -1);
    else c->nstops = 0;
  }
  if (rv != 0) {
    conn_fail(c, rv);
    return;
  }
  after_progress(c);
  engine_mark_dirty(c->eng, c);
}

/* Whether a datagram of len bytes fits one packet of this connection. ngtcp2 writes a DATAGRAM
   frame whole or not at all, and for one that can never fit it returns 0 just as when congestion
   control says wait: the datagram would stay at the head of the queue for good, and conn_write,
   which sends queued datagrams before stream data, would never reach the streams again. Peers with
   path-MTU discovery (quinn 0.11: packets of up to 1452 bytes, datagrams of up to 1406) send
   datagrams larger than this engine's fixed packet size as a matter of course, so the bridge
   meets them on a healthy tunnel. Counted for a short header with the longest packet number
   (4 bytes) and a 16-byte AEAD tag, as quinn counts its own limit. */
static int dgram_fits(qconn *c, size_t len) {
  size_t payload = ngtcp2_conn_get_max_tx_udp_payload_size(c->conn);
  const ngtcp2_transport_params *rp = ngtcp2_conn_get_remote_transport_params(c->conn);
  if (rp != NULL && rp->max_udp_payload_size < payload) payload = (size_t)rp->max_udp_payload_size;
  size_t header = 1 + ngtcp2_conn_get_dcid(c->conn)->datalen + 4 + 16;
  size_t frame = 1 + q_varint_len(len) + len;
  return header + frame <= payload;
}

int conn_dgram_queue(qconn *c, const uint8_t *data, size_t len) {
  if (c->state != CSTATE_OPEN || !c->datagrams || c->dq_len >= Q_DGRAM_QUEUE_MAX) return -1;
  if (!dgram_fits(c, len)) return -1;
  qdgram *d = malloc(sizeof *d + len);
  if (d == NULL) return -1;
  d->next = NULL;
  d->len = len;
  memcpy(d->data, data, len);
  if (c->dq_tail != NULL) c->dq_tail->next = d;
  else c->dq_head = d;
  c->dq_tail = d;
  c->dq_len++;
  c->eng->live_dgrams++;
  engine_mark_dirty(c->eng, c);
  return 0;
}

static void pop_dgram(qconn *c) {
  qdgram *d = c->dq_head;
  c->dq_head = d->next;
  if (c->dq_head == NULL) c->dq_tail = NULL;
  c->dq_len--;
  c->eng->live_dgrams--;
  free(d);
}

/* Rotates s to the back of the send queue (fairness between streams), or drops it when done. */
static void requeue(qconn *c, qstream *s) {
  int more = s->tx.sent < s->tx.end || (s->tx_fin && !s->tx_fin_sent);
  stream_dequeue(s);
  if (more && !s->tx_shut && !s->tx_blocked) stream_enqueue(s);
  (void)c;
}

void conn_write(qconn *c) {
  if (c->state != CSTATE_HANDSHAKE && c->state != CSTATE_OPEN) return;
  if (c->flush_close && (conn_flushed(c) || q_now() >= c->flush_deadline)) {
    conn_flush_close_now(c);
    return;
  }
  if (c->ep->tx_blocked) {
    if (!c->want_write) {
      c->want_write = 1;
      c->next_blocked = c->ep->blocked_head;
      c->ep->blocked_head = c;
    }
    return;
  }
  ngtcp2_tstamp ts = q_now();
  size_t payload = ngtcp2_conn_get_max_tx_udp_payload_size(c->conn);
  size_t quantum = ngtcp2_conn_get_send_quantum(c->conn);
  /* ngtcp2 0.12 paces by its own clock (writev returns 0 until the next send time) and keeps
     the send quantum at 64 KiB; a few quanta per turn keep the syscall and loop cost per byte
     down without letting one connection starve the others. */
  size_t max_pkts = 4 * quantum / payload;
  if (max_pkts < 1) max_pkts = 1;
  if (max_pkts > Q_WRITE_MAX_PKTS) max_pkts = Q_WRITE_MAX_PKTS;
  ngtcp2_path_storage ps;
  ngtcp2_path_storage_zero(&ps);
  size_t pkts = 0;
  int more = 0;
  while (pkts < max_pkts) {
    uint8_t *buf;
    size_t cap;
    if (ep_tx_reserve(c->ep, &buf, &cap) != 0) {
      more = 1;
      break;
    }
    if (cap > payload) cap = payload;
    ngtcp2_pkt_info pi;
    ngtcp2_ssize n;
    if (c->dq_head != NULL && c->state == CSTATE_OPEN) {
      if (!dgram_fits(c, c->dq_head->len)) {
        /* Queued when it fitted; the peer's connection ID has grown since. */
        pop_dgram(c);
        c->dgram_dropped++;
        continue;
      }
      int accepted = 0;
      ngtcp2_vec v = {c->dq_head->data, c->dq_head->len};
      n = ngtcp2_conn_writev_datagram(c->conn, &ps.path, &pi, buf, cap, &accepted, NGTCP2_WRITE_DATAGRAM_FLAG_MORE, 0, &v, 1, ts);
      if (n == NGTCP2_ERR_WRITE_MORE) {
        pop_dgram(c);
        continue;
      }
      if (n == NGTCP2_ERR_INVALID_ARGUMENT || n == NGTCP2_ERR_INVALID_STATE) {
        /* Larger than the peer takes, or datagrams not negotiated after all. */
        pop_dgram(c);
        c->dgram_dropped++;
        continue;
      }
      if (n < 0) {
        conn_fail(c, (int)n);
        return;
      }
      if (accepted) pop_dgram(c);
      if (n == 0) break;
    } else {
      qstream *s = c->sq_head;
      while (s != NULL && (s->tx_shut || s->tx_blocked || (s->tx.sent >= s->tx.end && !(s->tx_fin && !s->tx_fin_sent)))) {
        stream_dequeue(s);
        s = c->sq_head;
      }
      if (s != NULL && c->state == CSTATE_OPEN) {
        ngtcp2_vec v[4];
        /* One packet's worth: ngtcp2 takes at most that per call. */
        int vcnt = chain_vecs(&s->tx, v, 4, cap);
        size_t total = 0;
        for (int i = 0; i < vcnt; i++) total += v[i].len;
        int fin = s->tx_fin && s->tx.sent + total == s->tx.end;
        uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE | (fin ? NGTCP2_WRITE_STREAM_FLAG_FIN : 0);
        ngtcp2_ssize ndata = -1;
        n = ngtcp2_conn_writev_stream(c->conn, &ps.path, &pi, buf, cap, &ndata, flags, s->id, v, (size_t)vcnt, ts);
        if (ndata >= 0) {
          s->tx.sent += (uint64_t)ndata;
          c->tx_bytes += (uint64_t)ndata;
          if (fin && (size_t)ndata == total) {
            s->tx_fin_sent = 1;
            s->tx_fin_alone = total == 0;
          }
        }
        if (n == NGTCP2_ERR_WRITE_MORE) {
          requeue(c, s);
          continue;
        }
        if (n == NGTCP2_ERR_STREAM_DATA_BLOCKED) {
          s->tx_blocked = 1;
          stream_dequeue(s);
          continue;
        }
        if (n == NGTCP2_ERR_STREAM_SHUT_WR || n == NGTCP2_ERR_STREAM_NOT_FOUND) {
          s->tx_shut = 1;
          stream_dequeue(s);
          continue;
        }
        if (n < 0) {
          conn_fail(c, (int)n);
          return;
        }
        if (ndata >= 0) requeue(c, s);
        if (n == 0) break;
      } else {
        n = ngtcp2_conn_write_pkt(c->conn, &ps.path, &pi, buf, cap, ts);
        if (n < 0) {
          conn_fail(c, (int)n);
          return;
        }
        if (n == 0) break;
      }
    }
    int run_full = ep_tx_commit(c->ep, (size_t)n, (const struct sockaddr *)ps.path.remote.addr, (socklen_t)ps.path.remote.addrlen);
    c->tx_pkts++;
    pkts++;
    if (run_full) {
      /* A full GSO run (48 packets of 1350 bytes) goes out at once, not after the whole burst
         of up to 4 quanta: the peer decrypts it while the next run is built. The pod leg of a
         bulk relay is window-bound (cwnd ~180 KB), so its rate is cwnd over a round trip that
         included the whole burst's build time (~150 µs of ~430 µs, measured): quinn → router →
         quinn +13 to +18 % in interleaved runs at load ~1, +4 to +8 % at load 2-4, for router
         CPU per GiB +17 %, each run being its own sendmmsg (docs/benchmarks.md, quic/engine).
         Packets built after it carry their build time. */
      engine_flush_tx(c->eng);
      ts = q_now();
    }
  }
  if (pkts == max_pkts) more = 1;
  ngtcp2_conn_update_pkt_tx_time(c->conn, ts);
  after_progress(c);
  if (more) engine_mark_dirty_next(c->eng, c);
  conn_arm_timer(c);
}

void conn_arm_timer(qconn *c) {
  uint64_t deadline;
  if (c->state == CSTATE_CLOSING || c->state == CSTATE_DRAINING) deadline = c->close_deadline;
  else if (c->state == CSTATE_DEAD || c->conn == NULL) return;
  else deadline = ngtcp2_conn_get_expiry(c->conn);
  if (c->flush_close && c->flush_deadline < deadline) deadline = c->flush_deadline;
  engine_schedule(c->eng, c, deadline);
}

void conn_on_timer(qconn *c) {
  uint64_t now = q_now();
  if (c->state == CSTATE_CLOSING || c->state == CSTATE_DRAINING) {
    if (now >= c->close_deadline) conn_kill(c, CLOSE_DESTROYED, 0);
    else conn_arm_timer(c);
    return;
  }
  if (c->state != CSTATE_HANDSHAKE && c->state != CSTATE_OPEN) return;
  if (c->flush_close && now >= c->flush_deadline) {
    conn_flush_close_now(c);
    return;
  }
  int rv = ngtcp2_conn_handle_expiry(c->conn, now);
  if (rv != 0) {
    conn_fail(c, rv);
    return;
  }
  engine_mark_dirty(c->eng, c);
}
