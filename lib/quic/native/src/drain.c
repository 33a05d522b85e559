/*
 * Draining a connection: no new peer request streams, the open ones run to completion, and
 * TypeScript hears EV_DRAINED once none is left, so it can close the connection (SPEC §11; the
 * replica balancing of §10 uses it per connection).
 *
 *   scope DRAIN_ALL  (raw QUIC tunnels) every bidirectional stream the peer opens from now on
 *                    is refused, in the stream_open callback;
 *   scope DRAIN_WT   (WebTransport over HTTP/3) only new bidirectional WebTransport streams of
 *                    the bridged session are refused, once bridge.c has their header; HTTP/3
 *                    control, QPACK and request streams go to TypeScript as before.
 *
 * Refused means STOP_SENDING and RESET_STREAM, both with the code TypeScript gave, at once:
 * ngtcp2 (0.12.1 conn_recv_stream, read on this machine) calls stream_open before it takes the
 * stream's data, and once its read side is shut it drops that data and credits the connection
 * window itself. The stream never reaches TypeScript and is no work to wait for.
 *
 * Unidirectional streams are relayed, as HTTP/3's GOAWAY refuses only request streams: QUIC
 * takes a stream that arrives whole (data and FIN in its first packet) before anything can be
 * refused, and ngtcp2 then drops the STOP_SENDING, so refusing uni streams would lose some
 * silently while their sender counts them delivered. They carry no answer to wait for and
 * count as work like any open stream.
 *
 * "New" means a peer stream id above the highest one seen when the drain began (per kind): a
 * lower id that arrives late (reordered packets) was opened before, implicitly (RFC 9000
 * §3.2), and is served. While draining, a closed peer stream no longer renews the peer's
 * stream credit (MAX_STREAMS stays where it is: conn.c stream_close_cb, stream.c retire_peer_uni).
 *
 * Work (what the drain waits for): DRAIN_ALL every stream of the connection that is not
 * refused; DRAIN_WT the spliced streams and those waiting in the bridge for the partner's
 * credit. It is counted by walking the connection's streams when one is freed or a peer's
 * unidirectional stream has been read to its end, only while draining (the map is bounded by
 * the stream limits).
 */
#include "quic.h"

static int kind_of(int64_t id) {
  return ngtcp2_is_bidi_stream(id) ? 0 : 1;
}

/* Every byte the peer sent on the stream was taken (or it was reset or stopped). */
static int read_done(const qstream *s) {
  if (s->rx_reset || s->rx_closed) return 1;
  if (s->mode == SMODE_SPLICE) return s->splice_read_done;
  return s->rx_fin && s->rx.acked == s->rx.end;
}

static int is_work(const qconn *c, const qstream *s) {
  if (s->refused) return 0;
  /* ngtcp2 0.12.1 never closes a stream the peer opened unidirectionally; stream.c retires one
     once its read side is finished and read. One whose reading we stopped in the addon (a splice
     partner gone) waits for the peer's RESET_STREAM for that: it is no work meanwhile. */
  if (!ngtcp2_is_bidi_stream(s->id) && !ngtcp2_conn_is_local_stream(c->conn, s->id) && read_done(s)) return 0;
  if (c->drain_scope == DRAIN_ALL) return 1;
  return s->mode == SMODE_SPLICE || s->bstate == BSTATE_WAITING;
}

size_t drain_work(qconn *c) {
  size_t n = 0;
  QMAP_EACH(&c->streams, i) {
    const qstream *s = c->streams.slots[i].val;
    if (is_work(c, s)) n++;
  }
  return n;
}

int drain_begin(qconn *c, int scope, uint64_t code) {
  if (c->state != CSTATE_OPEN || c->conn == NULL) return -1;
  if (c->drain_scope == DRAIN_NONE) {
    if (scope != DRAIN_ALL && scope != DRAIN_WT) return -1;
    c->drain_scope = scope;
    c->drain_code = code;
    c->drain_max[0] = c->peer_max[0];
    c->drain_max[1] = c->peer_max[1];
  }
  /* Every call (the first starts the drain) reports the work open now and re-arms EV_DRAINED
     for when it reaches 0: TypeScript asks again after it spliced a stream it held. */
  size_t work = drain_work(c);
  c->drain_idle_sent = work == 0;
  return (int)(work > 0x7fffffff ? 0x7fffffff : work);
}

static int is_new(const qconn *c, int64_t id) {
  return c->drain_scope != DRAIN_NONE && id > c->drain_max[kind_of(id)];
}

static void refuse(qstream *s) {
  qconn *c = s->conn;
  s->refused = 1;
  s->bstate = BSTATE_NONE;
  c->refused_streams++;
  stream_refuse(s, c->drain_code);
}

int drain_on_open(qstream *s) {
  qconn *c = s->conn;
  int k = kind_of(s->id);
  if (s->id > c->peer_max[k]) c->peer_max[k] = s->id;
  if (c->drain_scope != DRAIN_ALL || k != 0 || !is_new(c, s->id)) return 0;
  refuse(s);
  return 1;
}

int drain_refuses_wt(qstream *s) {
  qconn *c = s->conn;
  if (c->drain_scope != DRAIN_WT || kind_of(s->id) != 0 || !is_new(c, s->id)) return 0;
  refuse(s);
  return 1;
}

void drain_settle(qconn *c) {
  if (c->drain_scope == DRAIN_NONE || c->drain_idle_sent || c->state != CSTATE_OPEN) return;
  if (drain_work(c) > 0) return;
  c->drain_idle_sent = 1;
  engine_emit(c->eng, EV_DRAINED, c->id, -1, 0, 0, NULL, 0);
}
