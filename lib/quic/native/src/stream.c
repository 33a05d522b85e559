/*
 * Streams: received bytes waiting for TypeScript, bytes waiting to be sent (and acknowledged),
 * and the native splice that joins a stream of one connection to a stream of another.
 *
 * Flow control is the only buffer bound, and it is honoured on both legs:
 * - TypeScript mode: a received byte is credited back to the peer (MAX_STREAM_DATA / MAX_DATA)
 *   only when TypeScript has read it, so at most the stream's window is buffered here.
 * - Splice A -> B: bytes received on A are appended to B's send chain; A's window is extended
 *   by a byte only once B's peer has acknowledged it (B's chain frees it). So the bytes held for
 *   one direction never exceed A's window, and a slow reader behind B stops A's sender.
 * Bytes handed to ngtcp2 stay where they are until acknowledged (ngtcp2 keeps pointers to them).
 *
 * Signals cross a splice with their codes (SPEC §7): FIN after the last byte, RESET_STREAM on A's
 * read side becomes RESET_STREAM on B's write side, STOP_SENDING on B's write side becomes
 * STOP_SENDING on A's read side. They are applied at B's (or A's) next write, not inside the
 * ngtcp2 callback that reported them.
 */
#include "quic.h"

#include <stdlib.h>

#define CHUNK_MIN 16384

static size_t chunk_cap(const qchunk *k) {
  return k->cap;
}

void chain_init(qchain *ch, uint64_t off) {
  *ch = (qchain){.head_off = off, .end = off, .sent = off, .acked = off, .cur_off = off};
}

static qchunk *chunk_new(size_t need, qengine *eng) {
  size_t cap = need < CHUNK_MIN ? CHUNK_MIN : need;
  qchunk *k = malloc(sizeof(qchunk) + cap);
  if (k == NULL) return NULL;
  k->next = NULL;
  k->len = 0;
  k->cap = cap;
  eng->live_chunks_bytes += (int64_t)cap;
  return k;
}

static uint8_t *chunk_data(qchunk *k) {
  return k->data;
}

static void chunk_free(qchunk *k, qengine *eng) {
  eng->live_chunks_bytes -= (int64_t)chunk_cap(k);
  free(k);
}

int chain_append(qchain *ch, const uint8_t *data, size_t len, qengine *eng) {
  while (len > 0) {
    qchunk *t = ch->tail;
    if (t == NULL || t->len == chunk_cap(t)) {
      qchunk *k = chunk_new(len, eng);
      if (k == NULL) return -1;
      if (t == NULL) ch->head = k;
      else t->next = k;
      ch->tail = k;
      t = k;
    }
    size_t room = chunk_cap(t) - t->len;
    size_t n = len < room ? len : room;
    memcpy(chunk_data(t) + t->len, data, n);
    t->len += n;
    ch->end += n;
    data += n;
    len -= n;
  }
  return 0;
}

void chain_free(qchain *ch, qengine *eng) {
  qchunk *k = ch->head;
  while (k != NULL) {
    qchunk *next = k->next;
    chunk_free(k, eng);
    k = next;
  }
  ch->head = ch->tail = NULL;
  ch->cur = NULL;
  ch->head_off = ch->end;
  if (ch->sent < ch->end) ch->sent = ch->end;
  ch->acked = ch->end;
}

/* Frees chunks wholly below `upto` (bytes acknowledged, or read). */
void chain_release(qchain *ch, uint64_t upto, qengine *eng) {
  if (upto > ch->end) upto = ch->end;
  if (upto <= ch->acked) return;
  ch->acked = upto;
  while (ch->head != NULL && ch->head_off + ch->head->len <= ch->acked) {
    qchunk *k = ch->head;
    if (k == ch->cur) ch->cur = NULL;
    ch->head = k->next;
    ch->head_off += k->len;
    if (ch->head == NULL) ch->tail = NULL;
    chunk_free(k, eng);
  }
  if (ch->head == NULL) ch->head_off = ch->acked;
}

/* Copies up to max bytes from the read position (acked) and consumes them. */
size_t chain_copy_out(qchain *ch, uint8_t *dest, size_t max, qengine *eng) {
  size_t done = 0;
  uint64_t pos = ch->acked;
  qchunk *k = ch->head;
  uint64_t off = ch->head_off;
  while (k != NULL && done < max) {
    if (pos < off + k->len) {
      size_t start = (size_t)(pos - off);
      size_t n = k->len - start;
      if (n > max - done) n = max - done;
      memcpy(dest + done, chunk_data(k) + start, n);
      done += n;
      pos += n;
    }
    off += k->len;
    k = k->next;
  }
  chain_release(ch, pos, eng);
  return done;
}

/* Vectors over the unsent bytes [sent, end), at most maxbytes. A cursor keeps the chunk that
   holds `sent`, so a long queue (up to a whole window of 16 KiB chunks) is not walked from its
   head for every packet. */
int chain_vecs(qchain *ch, ngtcp2_vec *v, int maxv, size_t maxbytes) {
  qchunk *k = ch->cur;
  uint64_t off = ch->cur_off;
  if (k == NULL || off > ch->sent) {
    k = ch->head;
    off = ch->head_off;
  }
  while (k != NULL && off + k->len <= ch->sent) {
    off += k->len;
    k = k->next;
  }
  ch->cur = k;
  ch->cur_off = off;
  int n = 0;
  uint64_t pos = ch->sent;
  size_t total = 0;
  for (; k != NULL && n < maxv && total < maxbytes; off += k->len, k = k->next) {
    size_t start = (size_t)(pos - off);
    size_t len = k->len - start;
    if (len > maxbytes - total) len = maxbytes - total;
    v[n].base = chunk_data(k) + start;
    v[n].len = len;
    n++;
    total += len;
    pos += len;
  }
  return n;
}

/* Moves the unread bytes of `from` (a receive chain) to the end of `to` (a send chain). */
size_t chain_move(qchain *from, qchain *to, qengine *eng) {
  size_t moved = 0;
  uint64_t pos = from->acked;
  uint64_t off = from->head_off;
  for (qchunk *k = from->head; k != NULL; off += k->len, k = k->next) {
    if (pos >= off + k->len) continue;
    size_t start = (size_t)(pos - off);
    if (chain_append(to, chunk_data(k) + start, k->len - start, eng) != 0) break;
    moved += k->len - start;
    pos = off + k->len;
  }
  chain_release(from, pos, eng);
  chain_free(from, eng);
  return moved;
}

/* ---- streams ---- */

qstream *stream_new(qconn *c, int64_t id) {
  qstream *s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  s->id = id;
  s->conn = c;
  chain_init(&s->rx, 0);
  chain_init(&s->tx, 0);
  s->tx_limit = c->stream_send_limit;
  if (qmap_put_u64(&c->streams, (uint64_t)id, s) != 0) {
    free(s);
    return NULL;
  }
  c->eng->live_streams++;
  return s;
}

void stream_enqueue(qstream *s) {
  if (s->queued) return;
  qconn *c = s->conn;
  s->queued = 1;
  s->snext = NULL;
  s->sprev = c->sq_tail;
  if (c->sq_tail != NULL) c->sq_tail->snext = s;
  else c->sq_head = s;
  c->sq_tail = s;
  engine_mark_dirty(c->eng, c);
}

void stream_dequeue(qstream *s) {
  if (!s->queued) return;
  qconn *c = s->conn;
  if (s->sprev != NULL) s->sprev->snext = s->snext;
  else c->sq_head = s->snext;
  if (s->snext != NULL) s->snext->sprev = s->sprev;
  else c->sq_tail = s->sprev;
  s->snext = s->sprev = NULL;
  s->queued = 0;
}

static int conn_alive(qconn *c) {
  return c != NULL && c->state <= CSTATE_OPEN && c->conn != NULL;
}

/* Gives the peer `n` more bytes of credit on s (stream and connection windows). */
static void credit(qstream *s, uint64_t n) {
  qconn *c = s->conn;
  if (n == 0 || !conn_alive(c)) return;
  if (!s->ng_closed && !s->rx_closed) ngtcp2_conn_extend_max_stream_offset(c->conn, s->id, n);
  ngtcp2_conn_extend_max_offset(c->conn, n);
  engine_mark_dirty(c->eng, c);
}

void stream_credit(qstream *s, uint64_t n) {
  credit(s, n);
}

/* Opens a stream of ours on c: 0 (*out set), -1 the peer's limit is reached (flagged, so its
   next grant is reported), -2 failure. */
int stream_open_local(qconn *c, int bidi, qstream **out) {
  if (c->state != CSTATE_OPEN || c->conn == NULL) return -2;
  int64_t id;
  int rv = bidi ? ngtcp2_conn_open_bidi_stream(c->conn, &id, NULL) : ngtcp2_conn_open_uni_stream(c->conn, &id, NULL);
  if (rv == NGTCP2_ERR_STREAM_ID_BLOCKED) {
    if (bidi) c->streams_blocked_bidi = 1;
    else c->streams_blocked_uni = 1;
    c->sbridge_blocked = 1;
    return -1;
  }
  if (rv != 0) return -2;
  c->next_local[bidi ? 0 : 1] = id + 4;
  qstream *s = stream_new(c, id);
  if (s == NULL) {
    ngtcp2_conn_shutdown_stream(c->conn, id, 0);
    return -2;
  }
  ngtcp2_conn_set_stream_user_data(c->conn, id, s);
  *out = s;
  return 0;
}

/* A spliced stream freed before its partner's peer acknowledged all of its bytes (its FIN came
   in while they still sat in the partner's send chain) would never get their connection credit
   back: the partner's acks credit only a live partner. Every such stream leaked its in-flight
   bytes from the connection window until ngtcp2 no longer found enough to announce (it sends
   MAX_DATA only once the increment exceeds half the window) and the peer stalled for good, with
   nothing buffered anywhere. The stream itself is finished, so only the connection is owed. */
static void credit_orphaned(qstream *s) {
  qconn *c = s->conn;
  if (s->spliced_in <= s->spliced_credit) return;
  uint64_t n = s->spliced_in - s->spliced_credit;
  s->spliced_credit = s->spliced_in;
  if (!conn_alive(c)) return;
  ngtcp2_conn_extend_max_offset(c->conn, n);
  engine_mark_dirty(c->eng, c);
}

static void report_splice_done(qstream *s) {
  if (s->splice_reported) return;
  s->splice_reported = 1;
  /* The bridge's own splices are TypeScript's business only as counts (connStats). */
  if (s->auto_bridged) return;
  qconn *c = s->conn;
  /* Reported on the stream's own connection; TypeScript matches it to the splice it made. */
  engine_emit(c->eng, EV_SPLICE_DONE, c->id, s->id, (double)s->spliced_in, (double)s->spliced_credit, NULL, 0);
}

void stream_free(qstream *s) {
  qconn *c = s->conn;
  stream_dequeue(s);
  bridge_forget(s);
  if (s->peer != NULL) {
    qstream *p = s->peer;
    if (s->mode == SMODE_SPLICE) credit_orphaned(s);
    p->peer = NULL;
    /* Our side of the splice is gone before the other: report it from the survivor when it ends. */
    s->peer = NULL;
  }
  if (s->mode == SMODE_SPLICE) report_splice_done(s);
  chain_free(&s->rx, c->eng);
  chain_free(&s->tx, c->eng);
  qmap_del_u64(&c->streams, (uint64_t)s->id);
  c->eng->live_streams--;
  free(s);
  if (c->drain_scope != DRAIN_NONE) drain_settle(c);
}

/* A stream whose ngtcp2 state is gone is freed once TypeScript has nothing left to read from it:
   no unread byte, and a FIN that arrived has been read too (ngtcp2 closes a stream as soon as its
   last byte and FIN are in, often in the turn that also reports them, so a FIN in a packet of its
   own would otherwise be lost between the READABLE event and TypeScript's read). */
void stream_maybe_free(qstream *s) {
  if (!s->ng_closed) return;
  if (s->mode == SMODE_JS && !s->refused && (s->rx.acked < s->rx.end || (s->rx_fin && !s->rx_fin_read && !s->rx_closed && !s->rx_reset))) return;
  qconn *c = s->conn;
  int64_t id = s->id;
  int js = s->mode == SMODE_JS && s->bstate == BSTATE_NONE && !s->refused;
  stream_free(s);
  if (js) engine_emit(c->eng, EV_STREAM_CLOSED, c->id, id, 0, 0, NULL, 0);
}

/* Queues a RESET_STREAM on the write side (applied at the connection's next write). */
static void queue_reset(qstream *s, uint64_t code) {
  if (s->tx_shut) return;
  s->tx_shut = 1;
  s->tx_want_writable = 0;
  qconn *c = s->conn;
  if (conn_alive(c) && !s->ng_closed) {
    ngtcp2_conn_shutdown_stream_write(c->conn, s->id, code);
    engine_mark_dirty(c->eng, c);
  }
}

static void queue_stop(qstream *s, uint64_t code) {
  if (s->rx_closed) return;
  s->rx_closed = 1;
  qconn *c = s->conn;
  if (conn_alive(c) && !s->ng_closed) {
    ngtcp2_conn_shutdown_stream_read(c->conn, s->id, code);
    engine_mark_dirty(c->eng, c);
  }
}

/* ngtcp2 0.12.1 never closes a stream the peer opened unidirectionally: its close waits for a
   FIN of ours to be acknowledged, which a receive-only stream never sends (fixed in ngtcp2 0.13,
   its PR 664). So it never renewed the peer's credit for one (conn.c stream_close_cb), and a peer
   that opened more over a connection's life than the limit waited for good. Once the stream's read
   side is finished (every byte and the FIN delivered, a reset received, or stopped by
   TypeScript) it is retired here as ngtcp2 would close it: one more such stream may open (not while
   draining), and the stream is freed once nothing is left to read. ngtcp2 keeps its own state of
   the stream until the connection ends, so credit is renewed only while that state stays within
   Q_PEER_UNI_BUDGET; past it the peer keeps the streams it may open. 1 when retired (callers
   must not touch s afterwards), 0 when s is no such stream. */
static int retire_peer_uni(qstream *s) {
  qconn *c = s->conn;
  if (s->ng_closed || !conn_alive(c) || ngtcp2_is_bidi_stream(s->id) || ngtcp2_conn_is_local_stream(c->conn, s->id)) return 0;
  s->ng_closed = 1;
  ngtcp2_conn_set_stream_user_data(c->conn, s->id, NULL);
  c->peer_uni_retired++;
  if (c->drain_scope == DRAIN_NONE && c->peer_uni_bytes <= Q_PEER_UNI_BUDGET) {
    ngtcp2_conn_extend_max_streams_uni(c->conn, 1);
    engine_mark_dirty(c->eng, c);
  }
  stream_dequeue(s);
  /* One the bridge holds is freed when spliced (stream_splice) or read in TypeScript. */
  if (s->bstate == BSTATE_NONE) stream_maybe_free(s);
  return 1;
}

int stream_on_recv(qstream *s, uint32_t flags, const uint8_t *data, size_t len) {
  qengine *eng = s->conn->eng;
  int fin = (flags & NGTCP2_STREAM_DATA_FLAG_FIN) != 0;
  s->rx_off += len;
  if (s->mode == SMODE_SPLICE) {
    qstream *p = s->peer;
    if (p == NULL || p->tx_shut) {
      /* Nobody to pass it to: credit it at once so the sender is not stalled for nothing. */
      credit(s, len);
      if (fin) retire_peer_uni(s);
      return 0;
    }
    if (len > 0 && chain_append(&p->tx, data, len, eng) != 0) return NGTCP2_ERR_CALLBACK_FAILURE;
    s->spliced_in += len;
    s->conn->spliced_bytes += len;
    if (fin) {
      p->tx_fin = 1;
      s->splice_read_done = 1;
      if (s->conn->drain_scope != DRAIN_NONE) drain_settle(s->conn);
    }
    if (len > 0 || fin) stream_enqueue(p);
    if (fin) retire_peer_uni(s);
    return 0;
  }
  if (s->rx_closed || s->rx_reset || s->refused) {
    credit(s, len);
    return 0;
  }
  if (len > 0 && chain_append(&s->rx, data, len, eng) != 0) return NGTCP2_ERR_CALLBACK_FAILURE;
  if (fin) s->rx_fin = 1;
  if (s->bstate != BSTATE_NONE) {
    /* Held by the bridge (bridge.c): not TypeScript's unless the bridge hands it over. */
    bridge_on_data(s);
    if (fin) retire_peer_uni(s);
    return 0;
  }
  if (!s->rx_notified && (len > 0 || fin)) {
    s->rx_notified = 1;
    engine_emit(eng, EV_STREAM_READABLE, s->conn->id, s->id, (double)(s->rx.end - s->rx.acked), fin, NULL, 0);
  }
  if (fin) retire_peer_uni(s);
  return 0;
}

void stream_on_acked(qstream *s, uint64_t offset, uint64_t len) {
  qconn *c = s->conn;
  uint64_t upto = offset + len;
  /* ngtcp2 reports an acknowledged frame by how far the contiguous acknowledged offset moved; it
     reports one that moved nothing only when the frame carried the FIN. The frame holding the
     last byte carries the FIN unless that went alone, after every byte had been sent. (A lost
     last frame and lone FIN that ngtcp2 merges for retransmission are seen only by the stream's
     close.) */
  if (s->tx_fin_sent && (len == 0 || (!s->tx_fin_alone && upto >= s->tx.end))) s->tx_fin_acked = 1;
  if (upto <= s->tx.acked) return;
  uint64_t before = s->tx.acked;
  chain_release(&s->tx, upto, c->eng);
  /* Bytes that came from the splice partner free credit on the partner's read side. */
  if (s->peer != NULL && s->peer->mode == SMODE_SPLICE && s->mode == SMODE_SPLICE) {
    uint64_t base = s->splice_base;
    uint64_t from = before > base ? before : base;
    if (s->tx.acked > from) {
      uint64_t n = s->tx.acked - from;
      s->peer->spliced_credit += n;
      credit(s->peer, n);
    }
  }
  if (s->tx_want_writable && s->tx.end - s->tx.acked <= s->tx_limit / 2) {
    s->tx_want_writable = 0;
    engine_emit(c->eng, EV_STREAM_WRITABLE, c->id, s->id, 0, 0, NULL, 0);
  }
}

void stream_on_reset(qstream *s, uint64_t code) {
  s->rx_reset = 1;
  s->rx_reset_code = code;
  if (s->conn->drain_scope != DRAIN_NONE) drain_settle(s->conn);
  if (s->mode == SMODE_SPLICE) {
    s->splice_read_done = 1;
    if (s->peer != NULL) queue_reset(s->peer, code);
    retire_peer_uni(s);
    return;
  }
  /* Bytes not yet read are abandoned with the stream (RFC 9000 §3.2: "reset recvd"). */
  if (s->refused) {
    chain_free(&s->rx, s->conn->eng);
    return;
  }
  bridge_on_signal(s);
  chain_free(&s->rx, s->conn->eng);
  /* One waiting for a partner passes the reset on when spliced (stream_splice). */
  if (s->bstate == BSTATE_NONE) engine_emit(s->conn->eng, EV_STREAM_RESET, s->conn->id, s->id, (double)code, 0, NULL, 0);
  retire_peer_uni(s);
}

void stream_on_stop(qstream *s, uint64_t code) {
  /* ngtcp2 answers STOP_SENDING with RESET_STREAM itself (same code). */
  s->tx_shut = 1;
  s->tx_want_writable = 0;
  stream_dequeue(s);
  if (s->mode == SMODE_SPLICE) {
    if (s->peer != NULL) queue_stop(s->peer, code);
    return;
  }
  if (s->refused) return;
  bridge_on_signal(s);
  if (s->bstate != BSTATE_NONE) return;
  engine_emit(s->conn->eng, EV_STREAM_STOP, s->conn->id, s->id, (double)code, 0, NULL, 0);
}

void stream_on_close(qstream *s, uint64_t code, int has_code) {
  (void)code;
  (void)has_code;
  s->ng_closed = 1;
  stream_dequeue(s);
  stream_maybe_free(s);
}

void stream_on_extend(qstream *s) {
  if (s->tx_blocked) {
    s->tx_blocked = 0;
    if (s->tx.sent < s->tx.end || (s->tx_fin && !s->tx_fin_sent)) stream_enqueue(s);
  }
}

/* ---- TypeScript mode ---- */

ssize_t stream_js_read(qstream *s, uint8_t *dest, size_t max) {
  size_t n = chain_copy_out(&s->rx, dest, max, s->conn->eng);
  if (n > 0) credit(s, n);
  if (s->rx.acked == s->rx.end) s->rx_notified = 0;
  return (ssize_t)n;
}

ssize_t stream_js_write(qstream *s, const uint8_t *data, size_t len, int fin) {
  if (s->tx_shut || s->tx_fin || s->ng_closed || !conn_alive(s->conn)) return -1;
  size_t queued = (size_t)(s->tx.end - s->tx.acked);
  size_t room = queued >= s->tx_limit ? 0 : s->tx_limit - queued;
  size_t n = len < room ? len : room;
  if (fin && n < len) {
    /* data + FIN is all or nothing, so end() never leaves a caller guessing what was taken. It is
       taken whole when nothing is queued (data larger than the send limit still goes out, over
       the limit by that one buffer, which TypeScript already holds), else after WRITABLE. */
    if (queued > 0) {
      s->tx_want_writable = 1;
      return 0;
    }
    n = len;
  }
  if (n > 0 && chain_append(&s->tx, data, n, s->conn->eng) != 0) return -1;
  if (n < len) s->tx_want_writable = 1;
  else if (fin) s->tx_fin = 1;
  if (n > 0 || s->tx_fin) stream_enqueue(s);
  return (ssize_t)n;
}

void stream_reset(qstream *s, uint64_t code) {
  queue_reset(s, code);
  stream_dequeue(s);
}

/* A peer stream the connection takes no more of (drain.c), from inside an ngtcp2 callback:
   STOP_SENDING and, on a bidi stream, RESET_STREAM with code. Bytes already taken into its
   chain (a WebTransport header) are credited back; ngtcp2 drops and credits what follows. It is
   freed when ngtcp2 closes it (our RESET_STREAM acknowledged). */
void stream_refuse(qstream *s, uint64_t code) {
  uint64_t unread = s->rx.end - s->rx.acked;
  if (unread > 0 && !s->rx_reset) credit(s, unread);
  chain_free(&s->rx, s->conn->eng);
  s->rx_notified = 0;
  queue_stop(s, code);
  if (ngtcp2_is_bidi_stream(s->id)) queue_reset(s, code);
  stream_dequeue(s);
}

void stream_stop_sending(qstream *s, uint64_t code) {
  qconn *c = s->conn;
  queue_stop(s, code);
  chain_free(&s->rx, c->eng);
  s->rx_notified = 0;
  /* A peer whose FIN was in need not answer with RESET_STREAM: a receive-only stream is done now. */
  if (!retire_peer_uni(s)) stream_maybe_free(s);
  if (c->drain_scope != DRAIN_NONE) drain_settle(c);
}

/* ---- splice ---- */

int stream_splice(qstream *a, qstream *b) {
  if (a->mode != SMODE_JS || b->mode != SMODE_JS || a->conn == b->conn) return -1;
  a->mode = SMODE_SPLICE;
  b->mode = SMODE_SPLICE;
  a->peer = b;
  b->peer = a;
  a->rx_notified = b->rx_notified = 0;
  a->tx_want_writable = b->tx_want_writable = 0;
  /* Whatever was written on each side so far (a rewritten header, say) is the side's own; what
     follows in its send chain comes from the partner and credits the partner when acknowledged. */
  a->splice_base = a->tx.end;
  b->splice_base = b->tx.end;
  qstream *pair[2][2] = {{a, b}, {b, a}};
  for (int i = 0; i < 2; i++) {
    qstream *src = pair[i][0], *dst = pair[i][1];
    if (src->rx_reset) {
      src->splice_read_done = 1;
      queue_reset(dst, src->rx_reset_code);
      continue;
    }
    size_t moved = chain_move(&src->rx, &dst->tx, src->conn->eng);
    src->spliced_in += moved;
    src->conn->spliced_bytes += moved;
    if (src->rx_fin) {
      dst->tx_fin = 1;
      src->splice_read_done = 1;
    }
    if (moved > 0 || dst->tx_fin) stream_enqueue(dst);
    if (dst->tx_shut) queue_stop(src, 0);
  }
  /* Streams whose ngtcp2 state already ended while in TypeScript mode have nothing more to give. */
  if (a->ng_closed) stream_maybe_free(a);
  if (b->ng_closed) stream_maybe_free(b);
  return 0;
}

/* s's connection is ending: the partner leg must not wait for bytes that will never come.
   When the peer closed it, what the peer sent is all there is, and the partner delivers it,
   ending with its own connection's close (conn_close_flushed): neither a reset (its peer may
   discard what it has not read) nor STOP_SENDING (some stacks tear the whole stream down on it)
   reaches a stream still being delivered; what its peer sends meanwhile is credited and dropped
   (stream_on_recv). A stream being reset anyway is stopped too, so that ngtcp2 can end it. */
void stream_conn_gone(qstream *s) {
  qstream *p = s->peer;
  if (p == NULL) return;
  int deliver = s->conn->peer_closed;
  if (!s->splice_read_done && !deliver) queue_reset(p, 0);
  if (!p->splice_read_done && (!deliver || p->tx_shut)) queue_stop(p, 0);
}
