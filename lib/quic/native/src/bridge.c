/*
 * The native stream bridge: once TypeScript has joined two connections with
 * streamBridge(), a stream the peer of either opens gets its partner on the other leg and is
 * spliced in the same engine turn, never crossing into JavaScript.
 *
 * Why (docs/benchmarks.md, tunnel/webtransport-h3): with new streams paired in TypeScript
 * (STREAM_OPENED -> header read, partner open, splice), 1 KiB echoes at 50 in flight gained
 * +17.7 ms through the router on new streams against +1.8 ms on streams already spliced: new
 * streams queued behind the router's event loop.
 *
 *   raw (BRIDGE_RAW)  every peer stream; the twin is opened in stream-ID order so the IDs on
 *                     both legs match (a stream that arrives ahead of lower ones gets the lower
 *                     ones' twins opened first and kept in bridge_ahead for them).
 *   WebTransport      bidi streams starting with 0x41 + this leg's session id and uni streams
 *   (BRIDGE_WT)       of type 0x54 + session id: the header waits in the stream (unread), is
 *                     dropped when spliced and the partner is given 0x41/0x54 + the partner
 *                     leg's session id. Anything else (HTTP/3 control and QPACK streams,
 *                     requests, other sessions, a header cut by FIN or reset) goes to
 *                     TypeScript as STREAM_OPENED with its bytes intact, as without the bridge.
 *
 * A raw bridge is set up before its partner exists (streamBridge with no partner when the Pylon's
 * connection is accepted, then with the pod's while that one still handshakes): the peer's
 * streams wait in the queue, unread, and are paired once the partner is established. So every
 * stream of a raw tunnel is paired here, from the first one on.
 *
 * A stream whose partner cannot be opened (the partner's peer limit) waits in its connection's
 * queue until that peer grants more streams (extend_max_local_streams); each kind (bidi, uni) is
 * paired in the order its streams came, one kind never waits for the other's credit, and a raw
 * stream whose twin was opened ahead goes on at once. The queue is bounded by the stream limit
 * we advertise to our own peer: a waiting stream stays open on its leg, and flow control bounds
 * its bytes. A raw partner that closes or fails (its handshake included) hands what waits for
 * it to TypeScript, which refuses it. Policy stays in TypeScript: it switches the bridge on and
 * off per pair, and can close either leg; the bridge only counts (bridged_streams). Streams are
 * found again by id, never by a pointer kept across connections: a leg that is gone simply
 * finds nothing and the stream goes to TypeScript.
 */
#include "quic.h"

static qconn *partner_of(qconn *c) {
  if (c->sbridge_mode == BRIDGE_OFF) return NULL;
  qconn *p = qmap_get_u64(&c->eng->conns, c->sbridge_peer);
  if (p == NULL || p->state != CSTATE_OPEN || p->conn == NULL || p->sbridge_peer != c->id) return NULL;
  return p;
}

/* A raw bridge whose partner is not named yet or still handshakes: streams wait for it. */
static int partner_pending(qconn *c) {
  if (c->sbridge_mode != BRIDGE_RAW) return 0;
  if (c->sbridge_peer == 0) return 1;
  qconn *p = qmap_get_u64(&c->eng->conns, c->sbridge_peer);
  return p != NULL && p->state == CSTATE_HANDSHAKE && p->sbridge_peer == c->id;
}

/* Copies up to max unread bytes of a receive chain without consuming them. */
static size_t chain_peek(const qchain *ch, uint8_t *dest, size_t max) {
  size_t done = 0;
  uint64_t off = ch->head_off;
  for (const qchunk *k = ch->head; k != NULL && done < max; off += k->len, k = k->next) {
    if (ch->acked >= off + k->len) continue;
    size_t start = (size_t)(ch->acked + done - off);
    size_t n = k->len - start;
    if (n > max - done) n = max - done;
    memcpy(dest + done, k->data + start, n);
    done += n;
  }
  return done;
}

static void bq_push(qstream *s) {
  qconn *c = s->conn;
  s->bstate = BSTATE_WAITING;
  s->bnext = NULL;
  if (c->bq_tail != NULL) c->bq_tail->bnext = s;
  else c->bq_head = s;
  c->bq_tail = s;
}

static qstream *bq_pop(qconn *c) {
  qstream *s = c->bq_head;
  if (s == NULL) return NULL;
  c->bq_head = s->bnext;
  if (c->bq_head == NULL) c->bq_tail = NULL;
  s->bnext = NULL;
  return s;
}

/* A stream freed while it waited leaves the queue (the queue is short: the stream limit). */
void bridge_forget(qstream *s) {
  if (s->bstate != BSTATE_WAITING) return;
  qconn *c = s->conn;
  qstream *prev = NULL;
  for (qstream *q = c->bq_head; q != NULL; prev = q, q = q->bnext) {
    if (q != s) continue;
    if (prev == NULL) c->bq_head = q->bnext;
    else prev->bnext = q->bnext;
    if (c->bq_tail == q) c->bq_tail = prev;
    break;
  }
  s->bnext = NULL;
  s->bstate = BSTATE_NONE;
}

/* The stream is TypeScript's after all: announced as without the bridge, bytes unread. */
static void hand_to_js(qstream *s) {
  qconn *c = s->conn;
  s->bstate = BSTATE_NONE;
  engine_emit(c->eng, EV_STREAM_OPENED, c->id, s->id, 0, 0, NULL, 0);
  if (!s->rx_notified && (s->rx.end > s->rx.acked || s->rx_fin)) {
    s->rx_notified = 1;
    engine_emit(c->eng, EV_STREAM_READABLE, c->id, s->id, (double)(s->rx.end - s->rx.acked), s->rx_fin, NULL, 0);
  }
}

/* Opens the partner (raw: the twin with the same id) on the other leg and splices.
   1 spliced, 0 no stream credit on the other leg now, -1 not the bridge's to do. */
static int try_bridge(qstream *s) {
  qconn *a = s->conn;
  qconn *b = partner_of(a);
  if (b == NULL) return -1;
  int bidi = ngtcp2_is_bidi_stream(s->id);
  int k = bidi ? 0 : 1;
  qstream *twin = NULL;
  if (a->sbridge_mode == BRIDGE_RAW && s->id < b->next_local[k]) {
    /* Its twin was opened ahead (by us), or it is older than the bridge: TypeScript's then. */
    void *v = qmap_del_u64(&a->bridge_ahead, (uint64_t)s->id);
    if (v == NULL) return -1;
    twin = conn_find_stream(b, s->id);
    if (twin == NULL || twin->mode != SMODE_JS || twin->tx.end > 0) return -1;
  } else {
    while (a->sbridge_mode == BRIDGE_RAW && b->next_local[k] < s->id) {
      qstream *skipped;
      int rv = stream_open_local(b, bidi, &skipped);
      if (rv == -1) return 0;
      if (rv < 0 || qmap_put_u64(&a->bridge_ahead, (uint64_t)skipped->id, skipped) != 0) return -1;
    }
    int rv = stream_open_local(b, bidi, &twin);
    if (rv == -1) return 0;
    if (rv < 0) return -1;
  }
  if (a->sbridge_mode == BRIDGE_WT) {
    uint8_t hdr[16];
    size_t n = q_varint_put(hdr, bidi ? 0x41 : 0x54);
    n += q_varint_put(hdr + n, b->sbridge_session);
    if (chain_append(&twin->tx, hdr, n, a->eng) != 0) {
      ngtcp2_conn_shutdown_stream(b->conn, twin->id, 0);
      return -1;
    }
    stream_enqueue(twin);
    uint64_t upto = s->rx.acked + s->bhdr;
    chain_release(&s->rx, upto, a->eng);
    /* A reset stream's bytes are credited by ngtcp2 itself (its final size). */
    if (!s->rx_reset) stream_credit(s, s->bhdr);
    s->bhdr = 0;
  }
  s->bstate = BSTATE_NONE;
  s->auto_bridged = twin->auto_bridged = 1;
  a->bridged_streams++;
  a->eng->c_bridged_streams++;
  /* Last: the splice may free either stream (one whose ngtcp2 state already ended). */
  if (stream_splice(s, twin) != 0) return -1;
  return 1;
}

/* Pairs a's waiting streams as far as the partner's stream credit goes, each kind (bidi, uni)
   in the order they came. Once a kind is blocked, a later stream of it waits unless its twin is
   already open (opened ahead for it when a higher id came first): that one is spliced now, or
   the higher stream, waiting for credit that only ends of the lower ones renew, would wait for
   good. A stream is unlinked while it is tried: the splice may free it. */
static void pair_waiting(qconn *a) {
  qconn *b = partner_of(a);
  if (b == NULL) return;
  int blocked[2] = {0, 0};
  qstream *prev = NULL;
  qstream *s = a->bq_head;
  while (s != NULL) {
    qstream *next = s->bnext;
    int k = ngtcp2_is_bidi_stream(s->id) ? 0 : 1;
    if (blocked[k] && (a->sbridge_mode != BRIDGE_RAW || s->id >= b->next_local[k])) {
      prev = s;
      s = next;
      continue;
    }
    if (prev == NULL) a->bq_head = next;
    else prev->bnext = next;
    if (a->bq_tail == s) a->bq_tail = prev;
    s->bnext = NULL;
    int r = try_bridge(s);
    if (r == 0) {
      /* Back in its place. */
      blocked[k] = 1;
      s->bnext = next;
      if (prev == NULL) a->bq_head = s;
      else prev->bnext = s;
      if (next == NULL) a->bq_tail = s;
      prev = s;
    } else if (r < 0) {
      hand_to_js(s);
    }
    s = next;
  }
}

/* Bridges s now, or queues it behind the streams of its kind already waiting (order kept). */
static void bridge_or_queue(qstream *s) {
  bq_push(s);
  pair_waiting(s->conn);
}

/* A stream our peer opened (stream_open callback): 1 when the bridge takes it over. */
int bridge_on_open(qstream *s) {
  qconn *a = s->conn;
  if (a->sbridge_mode == BRIDGE_OFF) return 0;
  if (partner_of(a) == NULL) {
    if (!partner_pending(a)) return 0;
    bq_push(s);
    return 1;
  }
  if (a->sbridge_mode == BRIDGE_WT) {
    s->bstate = BSTATE_HEADER;
    return 1;
  }
  s->bstate = BSTATE_WAITING;
  bridge_or_queue(s);
  return 1;
}

/* Bytes (or the FIN) arrived on a stream the bridge holds, already appended to its rx chain. */
void bridge_on_data(qstream *s) {
  if (s->bstate != BSTATE_HEADER) return;
  qconn *a = s->conn;
  int bidi = ngtcp2_is_bidi_stream(s->id);
  uint8_t h[16];
  size_t n = chain_peek(&s->rx, h, sizeof h);
  uint64_t type = 0, session = 0;
  size_t l1 = q_varint_get(h, n, &type);
  if (l1 == 0) {
    if (s->rx_fin) hand_to_js(s);
    return;
  }
  if (type != (bidi ? 0x41u : 0x54u)) {
    hand_to_js(s);
    return;
  }
  size_t l2 = q_varint_get(h + l1, n - l1, &session);
  if (l2 == 0) {
    if (s->rx_fin) hand_to_js(s);
    return;
  }
  if (session != a->sbridge_session || partner_of(a) == NULL) {
    hand_to_js(s);
    return;
  }
  /* The session is draining: a new stream of it is refused (drain.c), not paired. */
  if (drain_refuses_wt(s)) return;
  s->bhdr = l1 + l2;
  s->bstate = BSTATE_WAITING;
  bridge_or_queue(s);
}

/* A reset or STOP_SENDING before the header was whole: TypeScript decides, as without the bridge. */
void bridge_on_signal(qstream *s) {
  if (s->bstate == BSTATE_HEADER) hand_to_js(s);
}

/* c's peer granted more streams: the partner leg's waiting streams go on, in order. */
void bridge_on_credit(qconn *c) {
  if (!c->sbridge_blocked) return;
  c->sbridge_blocked = 0;
  qconn *a = partner_of(c);
  if (a != NULL) pair_waiting(a);
}

/* c is established: streams its partner held for it are paired now. */
void bridge_on_established(qconn *c) {
  qconn *a = partner_of(c);
  if (a != NULL && a->bq_head != NULL) pair_waiting(a);
}

/* Hands back what the bridge holds on c (switched off, or the partner is gone). */
static void release_all(qconn *c) {
  qstream *s;
  while ((s = bq_pop(c)) != NULL) hand_to_js(s);
  QMAP_EACH(&c->streams, i) {
    qstream *q = c->streams.slots[i].val;
    if (q->bstate == BSTATE_HEADER) hand_to_js(q);
  }
  qmap_free(&c->bridge_ahead);
  qmap_init(&c->bridge_ahead);
}

/* c is closing or gone (its handshake failed, either peer closed it): the streams its raw
   partner held for it will never be paired, and go to TypeScript, which refuses them. A
   WebTransport bridge keeps its streams until TypeScript switches it off. */
void bridge_on_gone(qconn *c) {
  if (c->sbridge_mode != BRIDGE_RAW || c->sbridge_peer == 0) return;
  qconn *a = qmap_get_u64(&c->eng->conns, c->sbridge_peer);
  if (a == NULL || a->state > CSTATE_OPEN || a->sbridge_peer != c->id || a->sbridge_mode != BRIDGE_RAW) return;
  release_all(a);
}

int bridge_set(qconn *a, qconn *b, int mode, uint64_t session_a, uint64_t session_b) {
  if (a == b || mode < BRIDGE_OFF || mode > BRIDGE_WT) return -1;
  if (b == NULL) {
    /* Raw, the partner to come: a's streams wait for it (or no longer, switched off). */
    if (mode == BRIDGE_OFF && a->sbridge_mode == BRIDGE_RAW && a->sbridge_peer == 0) {
      a->sbridge_mode = BRIDGE_OFF;
      release_all(a);
      return 0;
    }
    if (mode != BRIDGE_RAW || a->sbridge_mode != BRIDGE_OFF) return -1;
    a->sbridge_mode = BRIDGE_RAW;
    a->sbridge_peer = 0;
    return 0;
  }
  if (mode == BRIDGE_OFF) {
    qconn *pair[2] = {a, b};
    for (int i = 0; i < 2; i++) {
      if (pair[i]->sbridge_peer != pair[1 - i]->id) continue;
      pair[i]->sbridge_mode = BRIDGE_OFF;
      pair[i]->sbridge_peer = 0;
      release_all(pair[i]);
    }
    return 0;
  }
  /* a may be waiting for its partner (bridge_set(a, NULL)): b is it. */
  int a_waits = a->sbridge_mode == mode && a->sbridge_peer == 0;
  if ((a->sbridge_mode != BRIDGE_OFF && a->sbridge_peer != b->id && !a_waits) || (b->sbridge_mode != BRIDGE_OFF && b->sbridge_peer != a->id)) return -1;
  a->sbridge_peer = b->id;
  b->sbridge_peer = a->id;
  a->sbridge_mode = b->sbridge_mode = mode;
  a->sbridge_session = session_a;
  b->sbridge_session = session_b;
  if (partner_of(a) != NULL) pair_waiting(a);
  return 0;
}
