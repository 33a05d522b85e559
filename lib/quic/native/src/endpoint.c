/*
 * UDP endpoints on Node's own libuv loop: a socket we own (uv_poll), read with recvmmsg and
 * written with sendmmsg (UDP GSO where the kernel takes it), and the stateless front of the
 * server role, which runs before any connection state exists:
 *
 *   datagram ─▶ DCID known? ─yes─▶ that connection
 *      │no
 *      ├─ short header ─▶ stateless reset (rate-limited; after a restart, peers learn at once)
 *      ├─ unknown version, ≥ 1200 bytes ─▶ Version Negotiation
 *      └─ Initial (ngtcp2_accept) ─▶ connection cap ─▶ Retry token valid? ─▶ Retry needed?
 *           (always with --quic-retry; while half-open handshakes exceed the threshold; or when this
 *            source address has too many) ─yes─▶ stateless Retry, no state kept
 *         ─▶ pending: its Initial(s) decrypted and the ClientHello reassembled (initial.c), its
 *            datagrams held in any order until the hello is complete (at most Q_PENDING_MAX_DGRAMS
 *            and Q_PENDING_MAX_BYTES; dropped when no new hello byte came for the pending timeout,
 *            and never held past the handshake timeout; never answered before)
 *         ─▶ EV_PROPOSED {sni, alpn, address}: TypeScript accepts (TLS material, ALPN) or rejects
 *            (CONNECTION_CLOSE in an Initial, no reason phrase, no handshake work done)
 *
 * Everything refused is counted by reason. Half-open handshakes (pending, or accepted and not yet
 * established) are counted per source address; a client that proved its address with a Retry
 * token is not held to the per-address bound (a flood from one address must not lock out a real
 * peer behind it), only to the endpoint's connection cap.
 */
#include "quic.h"

#include <stdlib.h>
#include <errno.h>
#include <unistd.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/udp.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

static void on_poll(uv_poll_t *h, int status, int events);
static void pending_drop(qengine *eng, qpending *p);

void addr_key_of(const struct sockaddr *sa, uint8_t key[16]) {
  memset(key, 0, 16);
  if (sa->sa_family == AF_INET) {
    key[10] = key[11] = 0xff;
    memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
  } else if (sa->sa_family == AF_INET6) {
    memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
  }
}

static int make_socket(int family, int rcvbuf, int sndbuf) {
  int fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  if (sndbuf > 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  if (family == AF_INET6) {
    int off = 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
  }
  /* UDP GRO: a peer's GSO burst (quinn and ngtcp2 send them) arrives as one buffer, split here,
     instead of one syscall and one skb per datagram. Kernels without it ignore the option. */
  int one = 1;
  setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one);
  return fd;
}

static int probe_gso(int fd) {
  int seg = 1200;
  if (setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof seg) != 0) return 0;
  seg = 0;
  setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof seg);
  return 1;
}

static qendpoint *ep_alloc(qengine *eng, int fd) {
  qendpoint *ep = calloc(1, sizeof *ep);
  if (ep == NULL) return NULL;
  ep->eng = eng;
  ep->fd = fd;
  ep->refs = 1;
  ep->gso = probe_gso(fd);
  qmap_init(&ep->cids);
  qmap_init(&ep->pending_by_dcid);
  qmap_init(&ep->half_open_by_addr);
  q_rand(ep->reset_secret, sizeof ep->reset_secret);
  q_rand(ep->retry_secret, sizeof ep->retry_secret);
  ep->reset_tokens = 100;
  ep->reset_ts = q_now();
  if (uv_poll_init_socket(eng->loop, &ep->poll, fd) != 0) {
    free(ep);
    return NULL;
  }
  ep->poll.data = ep;
  ep->poll_events = UV_READABLE;
  uv_poll_start(&ep->poll, UV_READABLE, on_poll);
  ep->id = engine_new_id(eng);
  qmap_put_u64(&eng->endpoints, ep->id, ep);
  eng->live_endpoints++;
  return ep;
}

/* An endpoint on a new UDP socket bound to addr, or connected to it; NULL with err naming the
   step that failed and errnum its errno. */
static qendpoint *ep_open(qengine *eng, const struct sockaddr *addr, socklen_t addrlen, int connected, int rcvbuf,
                          int sndbuf, const char **err, int *errnum) {
  int fd = make_socket(addr->sa_family, rcvbuf, sndbuf);
  if (fd < 0) {
    *errnum = errno;
    *err = "socket";
    return NULL;
  }
  /* A connected socket receives only from its peer and reports ICMP errors (port unreachable:
     the pod is not listening) as ECONNREFUSED, so a refused dial fails at once. */
  if ((connected ? connect(fd, addr, addrlen) : bind(fd, addr, addrlen)) != 0) {
    *errnum = errno;
    *err = connected ? "connect" : "bind";
    close(fd);
    return NULL;
  }
  qendpoint *ep = ep_alloc(eng, fd);
  if (ep == NULL) {
    close(fd);
    *errnum = ENOMEM;
    *err = "out of memory";
    return NULL;
  }
  ep->locallen = sizeof ep->local;
  getsockname(fd, (struct sockaddr *)&ep->local, &ep->locallen);
  return ep;
}

qendpoint *ep_new_listen(qengine *eng, const struct sockaddr *addr, socklen_t addrlen, int rcvbuf, int sndbuf,
                         const char **err, int *errnum) {
  qendpoint *ep = ep_open(eng, addr, addrlen, 0, rcvbuf, sndbuf, err, errnum);
  if (ep == NULL) return NULL;
  ep->listening = 1;
  ep->accepting = 1;
  return ep;
}

qendpoint *ep_new_connected(qengine *eng, const struct sockaddr *remote, socklen_t remotelen, int rcvbuf, int sndbuf,
                            const char **err, int *errnum) {
  qendpoint *ep = ep_open(eng, remote, remotelen, 1, rcvbuf, sndbuf, err, errnum);
  if (ep == NULL) return NULL;
  memcpy(&ep->remote, remote, remotelen);
  ep->remotelen = remotelen;
  ep->connected = 1;
  return ep;
}

static void on_poll_closed(uv_handle_t *h) {
  qendpoint *ep = h->data;
  qengine *eng = ep->eng;
  qmap_free(&ep->cids);
  qmap_free(&ep->pending_by_dcid);
  qmap_free(&ep->half_open_by_addr);
  free(ep->backlog);
  free(ep->backlog_msgs);
  eng->live_endpoints--;
  free(ep);
}

static void on_tick_closed(uv_handle_t *h) {
  qendpoint *ep = h->data;
  uv_close((uv_handle_t *)&ep->poll, on_poll_closed);
}

static void close_socket(qendpoint *ep) {
  if (ep->fd < 0) return;
  /* libuv: a descriptor may be closed right after uv_poll_stop(). */
  uv_poll_stop(&ep->poll);
  close(ep->fd);
  ep->fd = -1;
}

void ep_unref(qendpoint *ep) {
  if (--ep->refs > 0) return;
  qengine *eng = ep->eng;
  qmap_del_u64(&eng->endpoints, ep->id);
  /* Packets still in the shared batch for this endpoint are dropped with it. */
  for (int i = 0; i < eng->ntx; i++) {
    if (eng->txmsg[i].ep == ep) eng->txmsg[i].ep = NULL;
  }
  close_socket(ep);
  if (ep->tick.data == ep) {
    uv_timer_stop(&ep->tick);
    uv_close((uv_handle_t *)&ep->tick, on_tick_closed);
  } else {
    uv_close((uv_handle_t *)&ep->poll, on_poll_closed);
  }
}

/* Stops listening: pending Initials are dropped, connections on it are destroyed. */
void ep_close(qendpoint *ep) {
  if (ep->closed) return;
  ep->closed = 1;
  ep->accepting = 0;
  qengine *eng = ep->eng;
  /* Collect first: killing unregisters from the maps being walked. */
  size_t n = 0;
  void **items = NULL;
  if (ep->pending_by_dcid.used > 0) {
    items = malloc(ep->pending_by_dcid.used * sizeof *items);
    if (items != NULL) {
      QMAP_EACH(&ep->pending_by_dcid, i) items[n++] = ep->pending_by_dcid.slots[i].val;
      for (size_t i = 0; i < n; i++) pending_drop(eng, items[i]);
      free(items);
    }
  }
  n = 0;
  items = NULL;
  if (ep->cids.used > 0) {
    items = malloc(ep->cids.used * sizeof *items);
    if (items != NULL) {
      QMAP_EACH(&ep->cids, i) {
        void *c = ep->cids.slots[i].val;
        int seen = 0;
        for (size_t j = 0; j < n; j++) seen |= items[j] == c;
        if (!seen) items[n++] = c;
      }
      /* A connection waiting to close once flushed closes now, with its close (not silently). */
      for (size_t i = 0; i < n; i++) conn_flush_close_now(items[i]);
      for (size_t i = 0; i < n; i++) conn_kill(items[i], CLOSE_DESTROYED, 1);
      free(items);
    }
  }
  close_socket(ep);
  ep_unref(ep);
}

int ep_register_cid(qendpoint *ep, const ngtcp2_cid *cid, qconn *c) {
  return qmap_put(&ep->cids, cid->data, cid->datalen, c);
}

void ep_unregister_cid(qendpoint *ep, const ngtcp2_cid *cid, qconn *c) {
  if (qmap_get(&ep->cids, cid->data, cid->datalen) == c) qmap_del(&ep->cids, cid->data, cid->datalen);
}

void ep_reset_token(qendpoint *ep, const ngtcp2_cid *cid, uint8_t *token) {
  if (ngtcp2_crypto_generate_stateless_reset_token(token, ep->reset_secret, sizeof ep->reset_secret, cid) != 0) {
    q_rand(token, NGTCP2_STATELESS_RESET_TOKENLEN);
  }
}

static void half_open_add(qendpoint *ep, const uint8_t key[16]) {
  uintptr_t n = (uintptr_t)qmap_get(&ep->half_open_by_addr, key, 16);
  qmap_put(&ep->half_open_by_addr, key, 16, (void *)(n + 1));
  ep->half_open++;
}

void ep_half_open_release(qendpoint *ep, const uint8_t key[16]) {
  uintptr_t n = (uintptr_t)qmap_get(&ep->half_open_by_addr, key, 16);
  if (n <= 1) qmap_del(&ep->half_open_by_addr, key, 16);
  else qmap_put(&ep->half_open_by_addr, key, 16, (void *)(n - 1));
  if (ep->half_open > 0) ep->half_open--;
}

/* ---- I/O counters: each count goes to the endpoint and to the engine's total at once ---- */

static void count_rx(qendpoint *ep, uint64_t bytes) {
  ep->io.rx_dgrams++;
  ep->io.rx_bytes += bytes;
  ep->eng->io.rx_dgrams++;
  ep->eng->io.rx_bytes += bytes;
}

static void count_tx(qendpoint *ep, uint64_t dgrams, uint64_t bytes) {
  ep->io.tx_dgrams += dgrams;
  ep->io.tx_bytes += bytes;
  ep->eng->io.tx_dgrams += dgrams;
  ep->eng->io.tx_bytes += bytes;
}

/* Lost sends: QUIC recovers. */
static void count_tx_dropped(qendpoint *ep, uint64_t sends) {
  ep->io.tx_dropped += sends;
  ep->eng->io.tx_dropped += sends;
}

/* ---- transmit ---- */

void ep_send_raw(qendpoint *ep, const uint8_t *data, size_t len, const struct sockaddr *to, socklen_t tolen) {
  if (ep->fd < 0) return;
  ssize_t rv;
  do {
    rv = ep->connected ? send(ep->fd, data, len, 0) : sendto(ep->fd, data, len, 0, to, tolen);
  } while (rv < 0 && errno == EINTR);
  ep->eng->c_sendmmsg++;
  if (rv < 0) count_tx_dropped(ep, 1);
  else count_tx(ep, 1, len);
}

int ep_tx_reserve(qendpoint *ep, uint8_t **buf, size_t *cap) {
  qengine *eng = ep->eng;
  if (eng->ntx == Q_TX_MAX_PKTS || eng->txlen + Q_TX_PKT_SIZE > Q_TX_BUF) engine_flush_tx(eng);
  if (ep->tx_blocked) return -1;
  *buf = eng->txbuf + eng->txlen;
  *cap = Q_TX_BUF - eng->txlen;
  return 0;
}

/* Whether a GSO run takes one more packet of len bytes: none after a shorter one, none longer
   than its segments, at most 64 KiB and 64 segments. */
static int gso_run_takes(const qtxmsg *m, size_t len) {
  return m->len % m->seg == 0 && len <= m->seg && m->len + len <= 65000 && m->len / m->seg < 64;
}

/* Adds the packet just written at the end of the batch; consecutive packets of one connection
   of equal size (the last may be shorter) become one GSO send (up to 64 KiB). Returns 1 when
   that GSO run is full (ep_tx_commit's caller may send it at once), else 0. */
int ep_tx_commit(qendpoint *ep, size_t len, const struct sockaddr *to, socklen_t tolen) {
  qengine *eng = ep->eng;
  if (ep->connected) {
    to = (const struct sockaddr *)&ep->remote;
    tolen = ep->remotelen;
  }
  if (eng->ntx > 0) {
    qtxmsg *m = &eng->txmsg[eng->ntx - 1];
    if (ep->gso && m->ep == ep && m->tolen == tolen && memcmp(&m->to, to, tolen) == 0 && gso_run_takes(m, len)) {
      m->len += len;
      eng->txlen += len;
      return !gso_run_takes(m, m->seg);
    }
  }
  qtxmsg *m = &eng->txmsg[eng->ntx++];
  m->ep = ep;
  m->off = eng->txlen;
  m->len = len;
  m->seg = len;
  memcpy(&m->to, to, tolen);
  m->tolen = tolen;
  eng->txlen += len;
  return 0;
}

static void on_writable(qendpoint *ep);

/* Sends msgs[0..n) of one endpoint; returns how many were taken, stops at EAGAIN. */
static int send_run(qendpoint *ep, uint8_t *base, qtxmsg *msgs, int n, int *blocked) {
  struct mmsghdr mm[Q_TX_MAX_PKTS];
  struct iovec iov[Q_TX_MAX_PKTS];
  union {
    char buf[CMSG_SPACE(sizeof(uint16_t))];
    struct cmsghdr align;
  } ctl[Q_TX_MAX_PKTS];
  memset(mm, 0, sizeof(struct mmsghdr) * (size_t)n);
  for (int i = 0; i < n; i++) {
    iov[i].iov_base = base + msgs[i].off;
    iov[i].iov_len = msgs[i].len;
    mm[i].msg_hdr.msg_iov = &iov[i];
    mm[i].msg_hdr.msg_iovlen = 1;
    if (!ep->connected) {
      mm[i].msg_hdr.msg_name = &msgs[i].to;
      mm[i].msg_hdr.msg_namelen = msgs[i].tolen;
    }
    if (msgs[i].len > msgs[i].seg) {
      memset(&ctl[i], 0, sizeof ctl[i]);
      mm[i].msg_hdr.msg_control = ctl[i].buf;
      mm[i].msg_hdr.msg_controllen = sizeof ctl[i].buf;
      struct cmsghdr *cm = CMSG_FIRSTHDR(&mm[i].msg_hdr);
      cm->cmsg_level = SOL_UDP;
      cm->cmsg_type = UDP_SEGMENT;
      cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      uint16_t seg = (uint16_t)msgs[i].seg;
      memcpy(CMSG_DATA(cm), &seg, sizeof seg);
    }
  }
  int done = 0;
  *blocked = 0;
  while (done < n) {
    int rv = sendmmsg(ep->fd, mm + done, (unsigned)(n - done), 0);
    ep->eng->c_sendmmsg++;
    if (rv > 0) {
      for (int i = done; i < done + rv; i++) {
        count_tx(ep, (msgs[i].len + msgs[i].seg - 1) / msgs[i].seg, msgs[i].len);
      }
      done += rv;
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) {
      *blocked = 1;
      break;
    }
    if ((errno == EIO || errno == EINVAL) && msgs[done].len > msgs[done].seg) {
      /* The path refused GSO (no checksum offload): send segments one by one from now on. */
      ep->gso = 0;
      for (size_t off = 0; off < msgs[done].len; off += msgs[done].seg) {
        size_t len = msgs[done].len - off < msgs[done].seg ? msgs[done].len - off : msgs[done].seg;
        ep_send_raw(ep, base + msgs[done].off + off, len, (struct sockaddr *)&msgs[done].to, msgs[done].tolen);
      }
      done++;
      continue;
    }
    if (ep->connected && (errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH)) {
      engine_emit(ep->eng, EV_ENDPOINT_ERROR, ep->id, -1, errno, 0, NULL, 0);
    }
    count_tx_dropped(ep, 1);
    done++; /* this one is lost; QUIC recovers */
  }
  return done;
}

/* Keeps unsent packets of a blocked endpoint until its socket drains. */
static void save_backlog(qendpoint *ep, uint8_t *base, qtxmsg *msgs, int n) {
  size_t bytes = 0;
  for (int i = 0; i < n; i++) bytes += msgs[i].len;
  uint8_t *buf = malloc(ep->backloglen + bytes);
  qtxmsg *mm = malloc(sizeof(qtxmsg) * (size_t)(ep->nbacklog + n));
  if (buf == NULL || mm == NULL) {
    free(buf);
    free(mm);
    count_tx_dropped(ep, (uint64_t)n);
    return;
  }
  if (ep->backloglen > 0) memcpy(buf, ep->backlog, ep->backloglen);
  if (ep->nbacklog > 0) memcpy(mm, ep->backlog_msgs, sizeof(qtxmsg) * (size_t)ep->nbacklog);
  size_t off = ep->backloglen;
  for (int i = 0; i < n; i++) {
    memcpy(buf + off, base + msgs[i].off, msgs[i].len);
    mm[ep->nbacklog + i] = msgs[i];
    mm[ep->nbacklog + i].off = off;
    off += msgs[i].len;
  }
  free(ep->backlog);
  free(ep->backlog_msgs);
  ep->backlog = buf;
  ep->backlog_msgs = mm;
  ep->backloglen = off;
  ep->nbacklog += n;
  if (!ep->tx_blocked) {
    ep->tx_blocked = 1;
    ep->poll_events |= UV_WRITABLE;
    uv_poll_start(&ep->poll, ep->poll_events, on_poll);
  }
}

void engine_flush_tx(qengine *eng) {
  int i = 0;
  while (i < eng->ntx) {
    qendpoint *ep = eng->txmsg[i].ep;
    int j = i + 1;
    while (j < eng->ntx && eng->txmsg[j].ep == ep) j++;
    if (ep != NULL && ep->fd >= 0) {
      if (ep->tx_blocked) {
        save_backlog(ep, eng->txbuf, eng->txmsg + i, j - i);
      } else {
        int blocked;
        int done = send_run(ep, eng->txbuf, eng->txmsg + i, j - i, &blocked);
        if (done < j - i) save_backlog(ep, eng->txbuf, eng->txmsg + i + done, j - i - done);
      }
    }
    i = j;
  }
  eng->ntx = 0;
  eng->txlen = 0;
}

static void on_writable(qendpoint *ep) {
  if (ep->nbacklog > 0) {
    int blocked;
    int done = send_run(ep, ep->backlog, ep->backlog_msgs, ep->nbacklog, &blocked);
    if (done < ep->nbacklog) {
      /* Still full: keep the rest (moved to the front). */
      size_t off = ep->backlog_msgs[done].off;
      memmove(ep->backlog, ep->backlog + off, ep->backloglen - off);
      for (int i = done; i < ep->nbacklog; i++) {
        ep->backlog_msgs[i - done] = ep->backlog_msgs[i];
        ep->backlog_msgs[i - done].off -= off;
      }
      ep->nbacklog -= done;
      ep->backloglen -= off;
      return;
    }
    free(ep->backlog);
    free(ep->backlog_msgs);
    ep->backlog = NULL;
    ep->backlog_msgs = NULL;
    ep->backloglen = 0;
    ep->nbacklog = 0;
  }
  ep->tx_blocked = 0;
  ep->poll_events &= ~UV_WRITABLE;
  uv_poll_start(&ep->poll, ep->poll_events, on_poll);
  qconn *c = ep->blocked_head;
  ep->blocked_head = NULL;
  while (c != NULL) {
    qconn *next = c->next_blocked;
    c->want_write = 0;
    c->next_blocked = NULL;
    if (c->state != CSTATE_DEAD) engine_mark_dirty(ep->eng, c);
    c = next;
  }
}

/* ---- pending Initials ---- */

void pending_free(qengine *eng, qpending *p) {
  qendpoint *ep = p->ep;
  if (qmap_get(&ep->pending_by_dcid, p->dcid.data, p->dcid.datalen) == p) qmap_del(&ep->pending_by_dcid, p->dcid.data, p->dcid.datalen);
  qmap_del_u64(&eng->pendings, p->id);
  for (int i = 0; i < p->ndgrams; i++) free(p->dgrams[i]);
  ep->pending_bytes -= p->dgram_bytes;
  initial_release(p);
  if (ep->npending > 0) ep->npending--;
  eng->live_pending--;
  free(p);
}

static void pending_drop(qengine *eng, qpending *p) {
  ep_half_open_release(p->ep, p->addr_key);
  pending_free(eng, p);
}

static void propose(qpending *p) {
  char *sni = NULL;
  uint8_t *alpn = NULL;
  size_t alpnlen = 0;
  qendpoint *ep = p->ep;
  if (initial_client_hello(p, &sni, &alpn, &alpnlen) != 0) {
    free(sni);
    free(alpn);
    ep->c_dropped[Q_DROP_MALFORMED]++;
    pending_drop(ep->eng, p);
    return;
  }
  size_t snilen = sni == NULL ? 0 : strlen(sni);
  qproposal *pr = malloc(sizeof *pr + snilen + alpnlen);
  if (pr == NULL) {
    free(sni);
    free(alpn);
    pending_drop(ep->eng, p);
    return;
  }
  pr->validated = p->validated;
  pr->snilen = snilen;
  pr->alpnlen = alpnlen;
  if (snilen > 0) memcpy(pr->data, sni, snilen);
  if (alpnlen > 0) memcpy(pr->data + snilen, alpn, alpnlen);
  if (p->remote.ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)&p->remote;
    inet_ntop(AF_INET, &a->sin_addr, pr->address, sizeof pr->address);
    pr->port = ntohs(a->sin_port);
  } else {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&p->remote;
    inet_ntop(AF_INET6, &a->sin6_addr, pr->address, sizeof pr->address);
    pr->port = ntohs(a->sin6_port);
  }
  free(sni);
  free(alpn);
  p->proposed = 1;
  ep->c_proposed++;
  engine_emit(ep->eng, EV_PROPOSED, p->id, -1, ep->id, 0, pr, sizeof *pr + snilen + alpnlen);
}

static int pending_keep(qpending *p, const uint8_t *data, size_t len) {
  uint8_t *copy = malloc(len);
  if (copy == NULL) return -1;
  memcpy(copy, data, len);
  p->dgrams[p->ndgrams] = copy;
  p->dgramlen[p->ndgrams++] = len;
  p->dgram_bytes += len;
  p->ep->pending_bytes += len;
  return 0;
}

/* One more datagram of a client's first flight. Kept (bounded in count and bytes) when it brings
   ClientHello bytes not seen yet; a repeat brings nothing ngtcp2 will need and is not kept. */
static void pending_absorb(qpending *p, const uint8_t *data, size_t len) {
  qendpoint *ep = p->ep;
  if (p->ndgrams == Q_PENDING_MAX_DGRAMS || p->dgram_bytes + len > Q_PENDING_MAX_BYTES) {
    ep->c_dropped[Q_DROP_PENDING_LIMIT]++;
    if (p->ndgrams == 0) pending_drop(ep->eng, p);
    return;
  }
  if (p->proposed) {
    /* Waiting for TypeScript: keep it for the connection, if one is made. */
    pending_keep(p, data, len);
    return;
  }
  qabsorbed got;
  int rv = initial_absorb(p, data, len, &got);
  if (rv < 0 || (got.fresh == 0 && p->ndgrams == 0)) {
    /* Not an Initial we can read, or a first one that carries no ClientHello byte. */
    ep->c_dropped[Q_DROP_MALFORMED]++;
    if (p->ndgrams == 0) pending_drop(ep->eng, p);
    return;
  }
  if (got.fresh == 0) return;
  if (pending_keep(p, data, len) != 0) {
    if (p->ndgrams == 0) pending_drop(ep->eng, p);
    return;
  }
  if (got.start) p->first_dgram = p->ndgrams - 1;
  /* Only new bytes keep the flight waiting: a client's retransmissions that bring them do, a
     repeat (or an attacker's) does not. */
  p->progressed = q_now();
  if (rv == 1) propose(p);
}

static void on_tick(uv_timer_t *t);

static void arm_tick(qendpoint *ep) {
  if (ep->tick_active) return;
  if (ep->tick.data != ep) {
    uv_timer_init(ep->eng->loop, &ep->tick);
    ep->tick.data = ep;
    uv_unref((uv_handle_t *)&ep->tick);
  }
  ep->tick_active = 1;
  uv_timer_start(&ep->tick, on_tick, 250, 250);
}

/* Pending Initials whose ClientHello stopped growing, or that TypeScript never decided: each waits
   the pending timeout for its next step (more of its hello, or the decision), and none outlives
   the handshake timeout from its first datagram, however its client paces new bytes. */
static void on_tick(uv_timer_t *t) {
  qendpoint *ep = t->data;
  qengine *eng = ep->eng;
  uint64_t now = q_now();
  if (ep->npending == 0) {
    uv_timer_stop(&ep->tick);
    ep->tick_active = 0;
    return;
  }
  uint64_t begun = engine_busy_begin(eng);
  qpending *expired = NULL;
  QMAP_EACH(&ep->pending_by_dcid, i) {
    qpending *p = ep->pending_by_dcid.slots[i].val;
    if (now - p->progressed >= ep->pending_timeout_ns || now - p->created >= ep->transport.handshake_timeout_ns) {
      p->next_expired = expired;
      expired = p;
    }
  }
  while (expired != NULL) {
    qpending *p = expired;
    expired = p->next_expired;
    if (p->proposed) engine_emit(eng, EV_PENDING_EXPIRED, p->id, -1, ep->id, 0, NULL, 0);
    pending_drop(eng, p);
  }
  engine_run(eng);
  engine_busy_end(eng, begun);
}

static void send_retry(qendpoint *ep, const ngtcp2_pkt_hd *hd, const struct sockaddr *from, socklen_t fromlen) {
  ngtcp2_cid scid;
  scid.datalen = Q_SCID_LEN;
  q_rand(scid.data, scid.datalen);
  uint8_t token[NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN];
  ngtcp2_ssize tokenlen = ngtcp2_crypto_generate_retry_token(token, ep->retry_secret, sizeof ep->retry_secret, hd->version,
                                                             from, fromlen, &scid, &hd->dcid, q_now());
  if (tokenlen < 0) return;
  uint8_t buf[Q_TX_PKT_SIZE];
  ngtcp2_ssize n = ngtcp2_crypto_write_retry(buf, sizeof buf, hd->version, &hd->scid, &scid, &hd->dcid, token, (size_t)tokenlen);
  if (n < 0) return;
  ep_send_raw(ep, buf, (size_t)n, from, fromlen);
  ep->c_stateless[Q_SENT_RETRY]++;
}

/* A transport CONNECTION_CLOSE (0x1c) in an Initial, with no reason phrase: an Initial is
   readable by anyone on the path, so RFC 9000 §10.2.3 has an application's refusal sent this way
   as APPLICATION_ERROR with the reason cleared (the router logs and counts its own reason). */
static void send_close_initial(qendpoint *ep, uint32_t version, const ngtcp2_cid *client_scid, const ngtcp2_cid *client_dcid,
                               uint64_t code, const struct sockaddr *to, socklen_t tolen) {
  uint8_t buf[Q_TX_PKT_SIZE];
  ngtcp2_ssize n = ngtcp2_crypto_write_connection_close(buf, sizeof buf, version, client_scid, client_dcid, code, NULL, 0);
  if (n > 0) ep_send_raw(ep, buf, (size_t)n, to, tolen);
}

static void on_initial(qendpoint *ep, const uint8_t *data, size_t len, const struct sockaddr *from, socklen_t fromlen,
                       const ngtcp2_version_cid *vc) {
  qengine *eng = ep->eng;
  qpending *p = qmap_get(&ep->pending_by_dcid, vc->dcid, vc->dcidlen);
  if (p != NULL) {
    /* The rest of a ClientHello (or a repeat): same client, same address. */
    if (p->remotelen != fromlen || memcmp(&p->remote, from, fromlen) != 0 || p->scid.datalen != vc->scidlen ||
        memcmp(p->scid.data, vc->scid, vc->scidlen) != 0) {
      ep->c_dropped[Q_DROP_UNKNOWN_CONNECTION]++;
      return;
    }
    pending_absorb(p, data, len);
    return;
  }
  if (!ep->accepting) {
    ep->c_dropped[Q_DROP_CLOSING]++;
    return;
  }
  ngtcp2_pkt_hd hd;
  if (ngtcp2_accept(&hd, data, len) != 0) {
    /* Not a client's first Initial (too short, 0-RTT or Handshake for no connection...). */
    ep->c_dropped[Q_DROP_UNKNOWN_CONNECTION]++;
    return;
  }
  if (ep->nconns + ep->npending >= ep->max_connections) {
    ep->c_dropped[Q_DROP_CONNECTION_LIMIT]++;
    return;
  }
  int validated = 0;
  ngtcp2_cid odcid;
  if (hd.token.len > 0 && hd.token.base[0] == NGTCP2_CRYPTO_TOKEN_MAGIC_RETRY) {
    if (ngtcp2_crypto_verify_retry_token(&odcid, hd.token.base, hd.token.len, ep->retry_secret, sizeof ep->retry_secret,
                                         hd.version, from, fromlen, &hd.dcid, 10 * NGTCP2_SECONDS, q_now()) != 0) {
      ep->c_dropped[Q_DROP_INVALID_TOKEN]++;
      /* RFC 9000 §8.1.3: a bad Retry token ends the attempt with INVALID_TOKEN. */
      send_close_initial(ep, hd.version, &hd.scid, &hd.dcid, NGTCP2_INVALID_TOKEN, from, fromlen);
      return;
    }
    validated = 1;
  }
  uint8_t key[16];
  addr_key_of(from, key);
  uintptr_t from_addr = (uintptr_t)qmap_get(&ep->half_open_by_addr, key, 16);
  if (!validated && (ep->retry_always || ep->half_open >= ep->retry_threshold || from_addr >= ep->max_half_open_per_addr)) {
    send_retry(ep, &hd, from, fromlen);
    return;
  }
  if (ep->npending >= ep->pending_max) {
    ep->c_dropped[Q_DROP_PENDING_LIMIT]++;
    return;
  }
  p = calloc(1, sizeof *p);
  if (p == NULL) return;
  p->ep = ep;
  p->first_dgram = -1;
  p->version = hd.version;
  p->dcid = hd.dcid;
  p->scid = hd.scid;
  p->validated = validated;
  if (validated) p->odcid = odcid;
  memcpy(&p->remote, from, fromlen);
  p->remotelen = fromlen;
  memcpy(p->addr_key, key, 16);
  p->created = q_now();
  p->progressed = p->created;
  if (initial_keys(p) != 0 || qmap_put(&ep->pending_by_dcid, p->dcid.data, p->dcid.datalen, p) != 0) {
    free(p);
    return;
  }
  p->id = engine_new_id(eng);
  qmap_put_u64(&eng->pendings, p->id, p);
  eng->live_pending++;
  ep->npending++;
  half_open_add(ep, key);
  arm_tick(ep);
  pending_absorb(p, data, len);
}

static void on_stateless(qendpoint *ep, const uint8_t *data, size_t len, const struct sockaddr *from, socklen_t fromlen,
                         const ngtcp2_version_cid *vc) {
  (void)data;
  /* RFC 9000 §10.3: smaller than the packet that triggered it (no loops between two endpoints
     that both reset), and no more than ~100 a second. */
  if (vc->dcidlen != Q_SCID_LEN || len < 1 + Q_SCID_LEN + 1 + NGTCP2_MIN_STATELESS_RESET_RANDLEN + NGTCP2_STATELESS_RESET_TOKENLEN) {
    ep->c_dropped[Q_DROP_UNKNOWN_CONNECTION]++;
    return;
  }
  uint64_t now = q_now();
  ep->reset_tokens += (double)(now - ep->reset_ts) / 1e7; /* 100 per second */
  if (ep->reset_tokens > 100) ep->reset_tokens = 100;
  ep->reset_ts = now;
  if (ep->reset_tokens < 1) {
    ep->c_dropped[Q_DROP_UNKNOWN_CONNECTION]++;
    return;
  }
  ep->reset_tokens -= 1;
  ngtcp2_cid cid;
  ngtcp2_cid_init(&cid, vc->dcid, vc->dcidlen);
  uint8_t token[NGTCP2_STATELESS_RESET_TOKENLEN];
  ep_reset_token(ep, &cid, token);
  size_t randlen = len - 1 - NGTCP2_STATELESS_RESET_TOKENLEN - 1;
  if (randlen > 40) randlen = 40;
  uint8_t rnd[40];
  q_rand(rnd, randlen);
  uint8_t buf[64];
  ngtcp2_ssize n = ngtcp2_pkt_write_stateless_reset(buf, sizeof buf, token, rnd, randlen);
  if (n <= 0) return;
  ep_send_raw(ep, buf, (size_t)n, from, fromlen);
  ep->c_stateless[Q_SENT_STATELESS_RESET]++;
}

static void dispatch(qendpoint *ep, const uint8_t *data, size_t len, const struct sockaddr *from, socklen_t fromlen) {
  count_rx(ep, len);
  ngtcp2_version_cid vc;
  int rv = ngtcp2_pkt_decode_version_cid(&vc, data, len, Q_SCID_LEN);
  if (rv == NGTCP2_ERR_VERSION_NEGOTIATION) {
    if (!ep->listening || len < 1200) {
      ep->c_dropped[Q_DROP_UNKNOWN_CONNECTION]++;
      return;
    }
    /* RFC 9000 §6.1: answer an unknown version with the versions we speak. */
    uint8_t buf[256];
    uint32_t sv[] = {NGTCP2_PROTO_VER_V1};
    uint8_t r;
    q_rand(&r, 1);
    ngtcp2_ssize n = ngtcp2_pkt_write_version_negotiation(buf, sizeof buf, r, vc.scid, vc.scidlen, vc.dcid, vc.dcidlen, sv, 1);
    if (n > 0) {
      ep_send_raw(ep, buf, (size_t)n, from, fromlen);
      ep->c_stateless[Q_SENT_VERSION_NEGOTIATION]++;
    }
    return;
  }
  if (rv != 0) {
    ep->c_dropped[Q_DROP_MALFORMED]++;
    return;
  }
  qconn *c = qmap_get(&ep->cids, vc.dcid, vc.dcidlen);
  if (c != NULL) {
    conn_read(c, data, len, from, fromlen);
    return;
  }
  if (!ep->listening) {
    /* A client leg's own socket carries one connection. A short-header packet under a
       connection ID it does not know may be the server's stateless reset (its first bytes are
       random, RFC 9000 §10.3): only ngtcp2 can tell, from the token, so it gets the packet
       (and drops it when it is not one). */
    if (ep->connected && !(data[0] & 0x80)) {
      QMAP_EACH(&ep->cids, i) {
        conn_read(ep->cids.slots[i].val, data, len, from, fromlen);
        return;
      }
    }
    ep->c_dropped[Q_DROP_UNKNOWN_CONNECTION]++;
    return;
  }
  if (data[0] & 0x80) on_initial(ep, data, len, from, fromlen, &vc);
  else on_stateless(ep, data, len, from, fromlen, &vc);
}

/* ---- receive ---- */

static void unreachable(qendpoint *ep, int err) {
  /* Every connection on a connected socket shares its fate: the peer is gone. */
  void *items[Q_MAX_CIDS * 4];
  size_t n = 0;
  QMAP_EACH(&ep->cids, i) {
    void *c = ep->cids.slots[i].val;
    int seen = 0;
    for (size_t j = 0; j < n; j++) seen |= items[j] == c;
    if (!seen && n < sizeof items / sizeof items[0]) items[n++] = c;
  }
  for (size_t i = 0; i < n; i++) conn_kill(items[i], CLOSE_UNREACHABLE, 1);
  engine_emit(ep->eng, EV_ENDPOINT_ERROR, ep->id, -1, err, 0, NULL, 0);
}

static void on_readable(qendpoint *ep) {
  qengine *eng = ep->eng;
  struct mmsghdr mm[Q_RX_SLOTS];
  struct iovec iov[Q_RX_SLOTS];
  struct sockaddr_storage from[Q_RX_SLOTS];
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } ctl[Q_RX_SLOTS];
  for (int round = 0; round < 8 && ep->fd >= 0; round++) {
    for (int i = 0; i < Q_RX_SLOTS; i++) {
      iov[i].iov_base = eng->rxbuf + (size_t)i * Q_RX_SLOT_SIZE;
      iov[i].iov_len = Q_RX_SLOT_SIZE;
      memset(&mm[i].msg_hdr, 0, sizeof mm[i].msg_hdr);
      mm[i].msg_hdr.msg_iov = &iov[i];
      mm[i].msg_hdr.msg_iovlen = 1;
      mm[i].msg_hdr.msg_name = &from[i];
      mm[i].msg_hdr.msg_namelen = sizeof from[i];
      mm[i].msg_hdr.msg_control = ctl[i].buf;
      mm[i].msg_hdr.msg_controllen = sizeof ctl[i].buf;
    }
    int n = recvmmsg(ep->fd, mm, Q_RX_SLOTS, MSG_DONTWAIT, NULL);
    eng->c_recvmmsg++;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (ep->connected && (errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH)) unreachable(ep, errno);
      return;
    }
    for (int i = 0; i < n && ep->fd >= 0; i++) {
      if (mm[i].msg_hdr.msg_flags & MSG_TRUNC) {
        ep->c_dropped[Q_DROP_MALFORMED]++;
        continue;
      }
      const struct sockaddr *sa = (const struct sockaddr *)&from[i];
      socklen_t salen = mm[i].msg_hdr.msg_namelen;
      if (ep->connected) {
        sa = (const struct sockaddr *)&ep->remote;
        salen = ep->remotelen;
      }
      size_t len = mm[i].msg_len;
      size_t seg = len;
      for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mm[i].msg_hdr); cm != NULL; cm = CMSG_NXTHDR(&mm[i].msg_hdr, cm)) {
        if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
          int gso;
          memcpy(&gso, CMSG_DATA(cm), sizeof gso);
          if (gso > 0) seg = (size_t)gso;
        }
      }
      const uint8_t *base = iov[i].iov_base;
      for (size_t off = 0; off < len && ep->fd >= 0; off += seg) {
        size_t dlen = len - off < seg ? len - off : seg;
        dispatch(ep, base + off, dlen, sa, salen);
      }
    }
    if (n < Q_RX_SLOTS) return;
    /* A full batch: write what it produced (ACKs) before reading the next one. */
    engine_run(eng);
  }
}

static void on_poll(uv_poll_t *h, int status, int events) {
  qendpoint *ep = h->data;
  qengine *eng = ep->eng;
  uint64_t begun = engine_busy_begin(eng);
  eng->c_polls++;
  ep->refs++;
  if (status < 0) {
    /* A socket error (an ICMP error queued on it): reading reports and clears it. */
    events |= UV_READABLE;
  }
  if ((events & UV_WRITABLE) && ep->fd >= 0) on_writable(ep);
  if ((events & UV_READABLE) && ep->fd >= 0) on_readable(ep);
  engine_run(eng);
  ep_unref(ep);
  engine_busy_end(eng, begun);
}

/* ---- accept / reject ---- */

qconn *pending_accept(qpending *p, qcred *cr, const uint8_t *alpn, size_t alpnlen, const qtransport *t, const char **err) {
  qendpoint *ep = p->ep;
  /* ngtcp2 takes a new connection only from a packet with CRYPTO offset 0 (a first packet
     without it is answered as if it needed a Retry): that datagram goes first, the others after
     it in arrival order, and ngtcp2 reorders their CRYPTO data itself. */
  int first = p->first_dgram >= 0 && p->first_dgram < p->ndgrams ? p->first_dgram : 0;
  ngtcp2_pkt_hd hd;
  if (p->ndgrams == 0 || ngtcp2_accept(&hd, p->dgrams[first], p->dgramlen[first]) != 0) {
    *err = "the Initial packet is no longer acceptable";
    pending_drop(ep->eng, p);
    return NULL;
  }
  qconn *c = conn_new_server(ep, &hd, p, cr, alpn, alpnlen, t, err);
  if (c == NULL) {
    pending_drop(ep->eng, p);
    return NULL;
  }
  /* The half-open count moves from the pending Initial to the connection. */
  c->half_open_counted = 1;
  memcpy(c->addr_key, p->addr_key, 16);
  ep->nconns++;
  ep->c_accepted++;
  int n = 0;
  uint8_t *dgrams[Q_PENDING_MAX_DGRAMS];
  size_t lens[Q_PENDING_MAX_DGRAMS];
  dgrams[n] = p->dgrams[first];
  lens[n++] = p->dgramlen[first];
  for (int i = 0; i < p->ndgrams; i++) {
    if (i == first) continue;
    dgrams[n] = p->dgrams[i];
    lens[n++] = p->dgramlen[i];
  }
  struct sockaddr_storage remote;
  socklen_t remotelen = p->remotelen;
  memcpy(&remote, &p->remote, remotelen);
  p->ndgrams = 0;
  pending_free(ep->eng, p);
  for (int i = 0; i < n; i++) {
    if (c->state <= CSTATE_OPEN) conn_read(c, dgrams[i], lens[i], (struct sockaddr *)&remote, remotelen);
    free(dgrams[i]);
  }
  return c;
}

void pending_reject(qpending *p, uint64_t code) {
  qendpoint *ep = p->ep;
  send_close_initial(ep, p->version, &p->scid, &p->dcid, code, (struct sockaddr *)&p->remote, p->remotelen);
  ep->c_rejected++;
  pending_drop(ep->eng, p);
}
