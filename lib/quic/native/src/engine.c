/*
 * The engine turn: what runs once per libuv loop iteration (or per batch of received
 * datagrams), and the only place events reach JavaScript.
 *
 *   socket readable ─▶ recvmmsg ─▶ connections read packets (mark dirty) ─┐
 *   timer heap due ─▶ ngtcp2_conn_handle_expiry (mark dirty) ─────────────┤
 *   JavaScript call (write, open, splice, close) ─▶ mark dirty, start idle ┤
 *                                                                         ▼
 *   engine_run: write every dirty connection (its packets join one shared batch, sent with
 *   sendmmsg per socket), then hand the queued events to JavaScript in one call; what
 *   JavaScript did in that call is written in the same turn; finally free connections that
 *   ended, and arm the one timer for the earliest connection deadline.
 *
 * A JavaScript call never runs the engine itself, and no callback of ngtcp2 calls JavaScript:
 * events are records queued here and flushed at the end. An idle handle (unreferenced) is active
 * only while work is queued, so the loop does not block in poll; a check handle runs the turn.
 */
#include "quic.h"

#include <stdlib.h>
#include <time.h>
#include <gnutls/crypto.h>

uint64_t q_now(void) {
  return uv_hrtime();
}

void q_rand(uint8_t *dest, size_t len) {
  if (gnutls_rnd(GNUTLS_RND_NONCE, dest, len) != 0) {
    for (size_t i = 0; i < len; i++) dest[i] = (uint8_t)rand();
  }
}

uint32_t engine_new_id(qengine *eng) {
  for (;;) {
    uint32_t id = ++eng->next_id;
    if (id == 0) continue;
    if (qmap_get_u64(&eng->conns, id) || qmap_get_u64(&eng->pendings, id) || qmap_get_u64(&eng->endpoints, id) ||
        qmap_get_u64(&eng->creds, id)) continue;
    return id;
  }
}

void engine_kick(qengine *eng) {
  if (eng->running || eng->idle_active || eng->shutting_down) return;
  eng->idle_active = 1;
  uv_idle_start(&eng->idle, NULL);
}

void engine_emit(qengine *eng, uint8_t type, uint32_t conn, int64_t stream, double a, double b, void *extra, size_t extralen) {
  if (eng->shutting_down) {
    free(extra);
    return;
  }
  if (eng->nev == eng->cap_ev) {
    size_t cap = eng->cap_ev == 0 ? 256 : eng->cap_ev * 2;
    qevent *ev = realloc(eng->ev, cap * sizeof *ev);
    if (ev == NULL) {
      free(extra);
      return;
    }
    eng->ev = ev;
    eng->cap_ev = cap;
  }
  eng->ev[eng->nev++] = (qevent){
      .type = type, .conn = conn, .stream = stream, .a = a, .b = b, .extra = extra, .extralen = extralen};
  engine_kick(eng);
}

/* Puts a live connection once on a write list (listed: its mark, link: its next pointer there);
   0 when it was already on it or is dead. */
static int dirty_push(qconn **head, qconn *c, int *listed, qconn **link) {
  if (*listed || c->state == CSTATE_DEAD) return 0;
  *listed = 1;
  *link = *head;
  *head = c;
  return 1;
}

void engine_mark_dirty(qengine *eng, qconn *c) {
  if (dirty_push(&eng->dirty_head, c, &c->dirty, &c->next_dirty)) engine_kick(eng);
}

/* For a connection that used its packet budget: it writes again next turn, after others. */
void engine_mark_dirty_next(qengine *eng, qconn *c) {
  dirty_push(&eng->next_dirty_head, c, &c->dirty_next, &c->next_later);
}

/* ---- timer heap ---- */

static void heap_set(qengine *eng, size_t i, qconn *c) {
  eng->heap[i] = c;
  c->heap_idx = (int)i;
}

static void sift_up(qengine *eng, size_t i) {
  qconn *c = eng->heap[i];
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (eng->heap[parent]->deadline <= c->deadline) break;
    heap_set(eng, i, eng->heap[parent]);
    i = parent;
  }
  heap_set(eng, i, c);
}

static void sift_down(qengine *eng, size_t i) {
  qconn *c = eng->heap[i];
  for (;;) {
    size_t l = 2 * i + 1;
    if (l >= eng->nheap) break;
    size_t m = l + 1 < eng->nheap && eng->heap[l + 1]->deadline < eng->heap[l]->deadline ? l + 1 : l;
    if (eng->heap[m]->deadline >= c->deadline) break;
    heap_set(eng, i, eng->heap[m]);
    i = m;
  }
  heap_set(eng, i, c);
}

void engine_unschedule(qengine *eng, qconn *c) {
  if (c->heap_idx < 0) return;
  size_t i = (size_t)c->heap_idx;
  c->heap_idx = -1;
  eng->nheap--;
  if (i == eng->nheap) return;
  qconn *last = eng->heap[eng->nheap];
  heap_set(eng, i, last);
  sift_up(eng, i);
  sift_down(eng, (size_t)last->heap_idx);
}

void engine_schedule(qengine *eng, qconn *c, uint64_t deadline) {
  if (deadline == UINT64_MAX) {
    engine_unschedule(eng, c);
    return;
  }
  if (c->heap_idx >= 0) {
    uint64_t old = c->deadline;
    c->deadline = deadline;
    if (deadline < old) sift_up(eng, (size_t)c->heap_idx);
    else if (deadline > old) sift_down(eng, (size_t)c->heap_idx);
    return;
  }
  if (eng->nheap == eng->capheap) {
    size_t cap = eng->capheap == 0 ? 64 : eng->capheap * 2;
    qconn **h = realloc(eng->heap, cap * sizeof *h);
    if (h == NULL) return;
    eng->heap = h;
    eng->capheap = cap;
  }
  c->deadline = deadline;
  heap_set(eng, eng->nheap++, c);
  sift_up(eng, (size_t)c->heap_idx);
}

static void on_timer(uv_timer_t *t);

static void arm_timer(qengine *eng) {
  if (eng->nheap == 0) {
    if (eng->timer_at != 0) {
      uv_timer_stop(&eng->timer);
      eng->timer_at = 0;
    }
    return;
  }
  uint64_t at = eng->heap[0]->deadline;
  if (at == eng->timer_at) return;
  eng->timer_at = at;
  uv_update_time(eng->loop);
  uint64_t now = q_now();
  uint64_t ms = at <= now ? 0 : (at - now + 999999) / 1000000;
  uv_timer_start(&eng->timer, on_timer, ms, 0);
}

/*
 * The addon's share of the process's CPU: the thread's CPU time inside the engine's
 * libuv callbacks, minus the JavaScript they call. Wall time there is no measure of it (the
 * thread is descheduled inside sendmmsg, so it read over 100 % of the process's CPU), and a
 * CLOCK_THREAD_CPUTIME_ID read is a syscall of ~2 µs on this machine: reading it around every
 * callback would cost ~4 % of the relay's CPU. So 1 callback in BUSY_SAMPLE, drawn at random
 * (a fixed stride could lock onto the alternation of the two legs' sockets), is timed, and
 * counts BUSY_SAMPLE times: an unbiased estimate, within a few per cent over the thousands of
 * callbacks of a bulk transfer, at ~0.3 % of the cost.
 */
#define BUSY_SAMPLE 16

static uint64_t thread_cpu_ns(void) {
  struct timespec t;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return 0;
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* A libuv callback of the engine begins: 0, or (sampled) the thread's CPU time now. */
uint64_t engine_busy_begin(qengine *eng) {
  if (eng->busy_sampling) return 0;
  uint32_t x = eng->busy_rng;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  eng->busy_rng = x;
  if ((x >> 28) % BUSY_SAMPLE != 0) return 0;
  uint64_t now = thread_cpu_ns();
  if (now == 0) return 0;
  eng->busy_sampling = 1;
  eng->busy_js_ns = 0;
  return now;
}

void engine_busy_end(qengine *eng, uint64_t begun) {
  if (begun == 0) return;
  eng->busy_sampling = 0;
  uint64_t used = thread_cpu_ns() - begun;
  if (used > eng->busy_js_ns) eng->busy_ns += BUSY_SAMPLE * (used - eng->busy_js_ns);
}

static void on_timer(uv_timer_t *t) {
  qengine *eng = t->data;
  uint64_t begun = engine_busy_begin(eng);
  eng->timer_at = 0;
  uint64_t now = q_now();
  /* Take the due connections first: handling one may schedule it again. */
  qconn *due = NULL;
  size_t n = 0;
  while (eng->nheap > 0 && eng->heap[0]->deadline <= now + NGTCP2_MILLISECONDS / 2 && n < 4096) {
    qconn *c = eng->heap[0];
    engine_unschedule(eng, c);
    c->next_later2 = due;
    due = c;
    n++;
  }
  while (due != NULL) {
    qconn *c = due;
    due = c->next_later2;
    c->next_later2 = NULL;
    if (c->state != CSTATE_DEAD) conn_on_timer(c);
  }
  engine_run(eng);
  engine_busy_end(eng, begun);
}

/* ---- events to JavaScript ---- */

static void set_num(napi_env env, napi_value o, const char *name, double d) {
  napi_value x;
  napi_create_double(env, d, &x);
  napi_set_named_property(env, o, name, x);
}

static void set_bool(napi_env env, napi_value o, const char *name, int b) {
  napi_value x;
  napi_get_boolean(env, b, &x);
  napi_set_named_property(env, o, name, x);
}

static napi_value extra_value(napi_env env, const qevent *e) {
  napi_value v = NULL, x;
  switch (e->type) {
    case EV_PROPOSED: {
      const qproposal *p = e->extra;
      napi_create_object(env, &v);
      if (p->snilen > 0) napi_create_string_latin1(env, (const char *)p->data, p->snilen, &x);
      else napi_get_null(env, &x);
      napi_set_named_property(env, v, "sni", x);
      napi_value list;
      napi_create_array(env, &list);
      uint32_t k = 0;
      const uint8_t *a = p->data + p->snilen;
      for (size_t at = 0; at < p->alpnlen; at += 1 + a[at]) {
        napi_create_string_latin1(env, (const char *)a + at + 1, a[at], &x);
        napi_set_element(env, list, k++, x);
      }
      napi_set_named_property(env, v, "alpn", list);
      napi_create_string_latin1(env, p->address, strlen(p->address), &x);
      napi_set_named_property(env, v, "address", x);
      set_num(env, v, "port", p->port);
      set_bool(env, v, "validated", p->validated);
      break;
    }
    case EV_CLOSED: {
      const qclose_info *c = e->extra;
      napi_create_object(env, &v);
      void *data;
      napi_create_buffer_copy(env, c->reasonlen, c->reason, &data, &x);
      napi_set_named_property(env, v, "reason", x);
      set_bool(env, v, "app", c->app);
      set_bool(env, v, "established", c->established);
      set_num(env, v, "alert", c->alert);
      set_num(env, v, "liberr", c->liberr);
      break;
    }
    case EV_DATAGRAM: {
      void *data;
      napi_create_buffer_copy(env, e->extralen, e->extra, &data, &v);
      break;
    }
    default:
      napi_get_undefined(env, &v);
  }
  return v;
}

static void flush_events(qengine *eng) {
  napi_env env = eng->env;
  /* Take the batch: what JavaScript causes while handling it goes into a new one. */
  qevent *ev = eng->ev;
  size_t nev = eng->nev;
  eng->ev = NULL;
  eng->nev = 0;
  eng->cap_ev = 0;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value cb, recv;
  napi_get_reference_value(env, eng->callback, &cb);
  napi_get_global(env, &recv);
  for (size_t i = 0; i < nev;) {
    size_t n = nev - i < eng->events_cap ? nev - i : eng->events_cap;
    napi_value objs = NULL;
    uint32_t nobj = 0;
    for (size_t k = 0; k < n; k++) {
      const qevent *e = &ev[i + k];
      double *rec = eng->events_mem + k * 6;
      rec[0] = e->type;
      rec[1] = e->conn;
      rec[2] = (double)e->stream;
      rec[3] = e->a;
      rec[4] = e->b;
      rec[5] = -1;
      if (e->extra != NULL) {
        if (objs == NULL) napi_create_array(env, &objs);
        napi_set_element(env, objs, nobj, extra_value(env, e));
        rec[5] = nobj++;
      }
    }
    napi_value argv[2];
    napi_create_uint32(env, (uint32_t)n, &argv[0]);
    if (objs == NULL) napi_get_undefined(env, &argv[1]);
    else argv[1] = objs;
    napi_value result;
    eng->in_js = 1;
    uint64_t js_begun = eng->busy_sampling ? thread_cpu_ns() : 0;
    napi_status st = napi_make_callback(env, eng->async, recv, cb, 2, argv, &result);
    if (js_begun != 0) eng->busy_js_ns += thread_cpu_ns() - js_begun;
    eng->in_js = 0;
    if (st == napi_pending_exception) {
      napi_value err;
      napi_get_and_clear_last_exception(env, &err);
      napi_fatal_exception(env, err);
    }
    for (size_t k = 0; k < n; k++) free(ev[i + k].extra);
    i += n;
  }
  napi_close_handle_scope(env, scope);
  free(ev);
}

void engine_run(qengine *eng) {
  if (eng->running || eng->shutting_down) return;
  eng->running = 1;
  eng->c_runs++;
  for (int round = 0; round < 16; round++) {
    while (eng->dirty_head != NULL) {
      qconn *list = eng->dirty_head;
      eng->dirty_head = NULL;
      while (list != NULL) {
        qconn *c = list;
        list = c->next_dirty;
        c->next_dirty = NULL;
        c->dirty = 0;
        eng->c_writes++;
        conn_write(c);
      }
    }
    engine_flush_tx(eng);
    if (eng->nev == 0) break;
    flush_events(eng);
  }
  conn_reap(eng);
  /* Connections that used their packet budget go again next turn. */
  while (eng->next_dirty_head != NULL) {
    qconn *c = eng->next_dirty_head;
    eng->next_dirty_head = c->next_later;
    c->next_later = NULL;
    c->dirty_next = 0;
    if (c->state != CSTATE_DEAD) {
      c->dirty = 1;
      c->next_dirty = eng->dirty_head;
      eng->dirty_head = c;
    }
  }
  arm_timer(eng);
  eng->running = 0;
  if (eng->dirty_head != NULL || eng->nev > 0) {
    engine_kick(eng);
  } else if (eng->idle_active) {
    eng->idle_active = 0;
    uv_idle_stop(&eng->idle);
  }
}

static void on_check(uv_check_t *h) {
  qengine *eng = h->data;
  if (eng->dirty_head != NULL || eng->nev > 0 || eng->dead_head != NULL) {
    uint64_t begun = engine_busy_begin(eng);
    engine_run(eng);
    engine_busy_end(eng, begun);
  }
}

int engine_init(qengine *eng, napi_env env) {
  eng->env = env;
  if (napi_get_uv_event_loop(env, &eng->loop) != napi_ok) return -1;
  qmap_init(&eng->creds);
  qmap_init(&eng->endpoints);
  qmap_init(&eng->conns);
  qmap_init(&eng->pendings);
  eng->rxbuf = malloc((size_t)Q_RX_SLOTS * Q_RX_SLOT_SIZE);
  eng->txbuf = malloc(Q_TX_BUF);
  if (eng->rxbuf == NULL || eng->txbuf == NULL) return -1;
  q_rand((uint8_t *)&eng->busy_rng, sizeof eng->busy_rng);
  if (eng->busy_rng == 0) eng->busy_rng = 0x9e3779b9u; /* xorshift must not start at 0 */
  uv_check_init(eng->loop, &eng->check);
  eng->check.data = eng;
  uv_check_start(&eng->check, on_check);
  uv_unref((uv_handle_t *)&eng->check);
  uv_idle_init(eng->loop, &eng->idle);
  eng->idle.data = eng;
  uv_unref((uv_handle_t *)&eng->idle);
  uv_timer_init(eng->loop, &eng->timer);
  eng->timer.data = eng;
  uv_unref((uv_handle_t *)&eng->timer);
  return 0;
}

/* Environment teardown: everything goes, nobody is told (the process is leaving). */
void engine_destroy(qengine *eng) {
  eng->shutting_down = 1;
  size_t n = 0;
  void **items = NULL;
  if (eng->endpoints.used > 0) items = malloc(eng->endpoints.used * sizeof *items);
  if (items != NULL) {
    QMAP_EACH(&eng->endpoints, i) items[n++] = eng->endpoints.slots[i].val;
    for (size_t i = 0; i < n; i++) {
      qendpoint *ep = items[i];
      if (!ep->closed) ep_close(ep);
    }
    free(items);
  }
  n = 0;
  items = NULL;
  if (eng->conns.used > 0) items = malloc(eng->conns.used * sizeof *items);
  if (items != NULL) {
    QMAP_EACH(&eng->conns, i) items[n++] = eng->conns.slots[i].val;
    for (size_t i = 0; i < n; i++) conn_kill(items[i], CLOSE_DESTROYED, 0);
    free(items);
  }
  conn_reap(eng);
  for (size_t i = 0; i < eng->nev; i++) free(eng->ev[i].extra);
  free(eng->ev);
  eng->ev = NULL;
  eng->nev = 0;
  uv_close((uv_handle_t *)&eng->check, NULL);
  uv_close((uv_handle_t *)&eng->idle, NULL);
  uv_close((uv_handle_t *)&eng->timer, NULL);
}
