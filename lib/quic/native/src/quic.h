/*
 * Internal declarations of the QUIC engine addon (ngtcp2 0.12 + GnuTLS). The addon's surface,
 * as TypeScript sees it, is documented in addon.c; lib/quic/native.ts types it.
 *
 * Ownership and lifetime, in one place:
 * - Every object TypeScript can name (credentials, endpoint, pending Initial, connection) has a
 *   32-bit id; TypeScript passes ids, the addon looks them up. A stale id finds nothing (no
 *   use-after-free through JavaScript).
 * - Connections are freed only at the end of an engine turn (engine_run), never inside an ngtcp2
 *   callback or a JavaScript call: conn_kill() unlinks and queues, conn_reap() frees.
 * - Streams belong to their connection; a stream whose ngtcp2 state is gone (stream_close) but
 *   whose received bytes TypeScript has not read yet stays until they are read or the
 *   connection ends.
 * - Bytes handed to ngtcp2 for sending stay in the stream's send chain (never moved) until
 *   acknowledged: ngtcp2 keeps pointers to them.
 */
#ifndef STARGATE_QUIC_H
#define STARGATE_QUIC_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include <node_api.h>
#include <uv.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <gnutls/gnutls.h>

#include "map.h"
#include "varint.h"

#define Q_SCID_LEN 16
#define Q_RX_SLOTS 32
#define Q_RX_SLOT_SIZE 65536 /* UDP GRO delivers up to 64 KiB of coalesced datagrams at once */
#define Q_TX_MAX_PKTS 64
#define Q_TX_PKT_SIZE 1500
#define Q_MAX_CIDS 8
/* A first flight held until its ClientHello is complete and routed: at most this many datagrams
   and bytes of them, for at most the endpoint's pending timeout after the last datagram that
   brought new hello bytes, and never past its handshake timeout from the first. Six 1,200-byte
   datagrams carry a hello of ~6.8 KB (a post-quantum one takes two); the byte bound lets larger
   datagrams carry up to Q_HELLO_MAX.
   The pending timeout's default outlasts two retransmissions of a client that has no RTT sample
   yet (RFC 9002 §6.2.2: its first PTO is ~1 s, then doubled, so it resends at 1 s and 3 s), oldest
   datagram first: quinn 0.11 resends two datagrams per PTO, ngtcp2 one, so the bytes of a datagram
   lost from a flight of up to four (quinn) or two (ngtcp2) come again within 3 s, when the 1 s
   retransmission brought only repeats. A repeat extends nothing, and no flight is held past the
   handshake timeout, however its client paces new bytes. */
#define Q_PENDING_TIMEOUT_MS 4000
#define Q_PENDING_MAX_DGRAMS 6
#define Q_PENDING_MAX_BYTES 20480
#define Q_HELLO_MAX 16384
#define Q_HELLO_CHUNK 1024 /* the reassembly buffer grows in these steps, to the highest offset seen */
#define Q_DGRAM_QUEUE_MAX 128
#define Q_DGRAM_MAP_MAX 64
/* What ngtcp2 0.12.1 keeps until the connection ends of each stream the peer opened
   unidirectionally (stream.c retire_peer_uni): its stream object and map entry (176 + up to 64
   bytes by its source; 250-340 bytes more process heap per stream measured against streams it
   frees, 16,000 of each), and when data came out of order a reassembly buffer with two index
   blocks (256 + 2 x 8 KiB by its source). Credit for more such streams is renewed while a
   connection's estimate stays within the budget: 13,107 streams read in order, or 236 that all
   came out of order. */
#define Q_PEER_UNI_STATE 320
#define Q_PEER_UNI_REORDERED 17408
#define Q_PEER_UNI_BUDGET (4 * 1024 * 1024)

typedef struct qengine qengine;
typedef struct qendpoint qendpoint;
typedef struct qconn qconn;
typedef struct qstream qstream;
typedef struct qcred qcred;
typedef struct qpending qpending;

/* ---- endpoint counters by reason (one table each) ----
 * Why an endpoint dropped a received datagram before it reached a connection, and the packets it
 * answered with no connection state. The enum indexes qendpoint.c_dropped / c_stateless; the
 * string is the key endpointStats() reports the count under, and is the label value of
 * quic_datagrams_dropped_total / quic_stateless_packets_total: lib/quic/native.ts lists the same
 * strings (ENDPOINT_DROP_REASONS, STATELESS_PACKET_TYPES) and the metrics take the counts as
 * they come. */
#define Q_DROP_REASONS(X) \
  X(Q_DROP_MALFORMED, "malformed")                   /* not QUIC, truncated, or an Initial that does not parse */ \
  X(Q_DROP_UNKNOWN_CONNECTION, "unknown_connection") /* for no connection, and no stateless reset owed */ \
  X(Q_DROP_CONNECTION_LIMIT, "connection_limit")     /* an Initial beyond max_connections */ \
  X(Q_DROP_INVALID_TOKEN, "invalid_token")           /* an Initial with a bad Retry token */ \
  X(Q_DROP_PENDING_LIMIT, "pending_limit")           /* beyond the bound on Initials waiting for routing */ \
  X(Q_DROP_CLOSING, "closing")                       /* an Initial once the endpoint stopped accepting */
#define Q_STATELESS_PACKETS(X) \
  X(Q_SENT_RETRY, "retry") \
  X(Q_SENT_STATELESS_RESET, "stateless_reset") \
  X(Q_SENT_VERSION_NEGOTIATION, "version_negotiation")
#define Q_ENUM_ENTRY(id, name) id,
enum qdrop_reason { Q_DROP_REASONS(Q_ENUM_ENTRY) Q_NDROP_REASONS };
enum qstateless_packet { Q_STATELESS_PACKETS(Q_ENUM_ENTRY) Q_NSTATELESS_PACKETS };

/* Datagram I/O of one endpoint, or of the engine in total; addon.c reports both the same way. */
typedef struct qio {
  uint64_t rx_dgrams, rx_bytes, tx_dgrams, tx_bytes;
  uint64_t tx_dropped;      /* sends the socket refused or that found no room to wait (a GSO batch counts once) */
} qio;

/* ---- events (addon.c flushes them to JavaScript once per turn) ---- */

enum qevent_type {
  EV_PROPOSED = 1,        /* conn = pending id, a = endpoint id; obj {sni, alpn, address, port, validated} */
  EV_ESTABLISHED = 2,     /* conn; obj {alpn, sni, datagrams} */
  EV_CLOSED = 3,          /* conn, a = kind, b = code; obj {reason, app, established, alert, liberr} */
  EV_STREAM_OPENED = 4,   /* conn, stream: opened by the peer */
  EV_STREAM_READABLE = 5, /* conn, stream, a = bytes buffered, b = fin received */
  EV_STREAM_WRITABLE = 6, /* conn, stream */
  EV_STREAM_RESET = 7,    /* conn, stream, a = code: the peer reset its sending side */
  EV_STREAM_STOP = 8,     /* conn, stream, a = code: the peer sent STOP_SENDING */
  EV_STREAM_CLOSED = 9,   /* conn, stream: the addon forgot the stream */
  EV_STREAMS_AVAILABLE = 10, /* conn, a = bidi left, b = uni left */
  EV_DATAGRAM = 11,       /* conn; obj Buffer */
  EV_SPLICE_DONE = 12,    /* conn, stream (the A side), a = bytes A->B, b = bytes B->A */
  EV_ENDPOINT_ERROR = 13, /* conn = endpoint id, a = errno */
  EV_PENDING_EXPIRED = 14, /* conn = pending id: TypeScript never decided */
  EV_DRAINED = 15         /* conn: a draining connection has no stream of work left (drain.c) */
};

/* EV_CLOSED kinds */
enum qclose_kind {
  CLOSE_PEER = 1,              /* the peer sent CONNECTION_CLOSE */
  CLOSE_LOCAL = 2,             /* TypeScript closed it */
  CLOSE_ERROR = 3,             /* the engine closed it on a protocol or TLS error */
  CLOSE_IDLE = 4,              /* idle timeout */
  CLOSE_HANDSHAKE_TIMEOUT = 5, /* handshake not complete in time */
  CLOSE_STATELESS_RESET = 6,   /* the peer reset it statelessly */
  CLOSE_UNREACHABLE = 7,       /* ICMP error on the connected socket */
  CLOSE_DESTROYED = 8          /* destroyed without a close (endpoint closed, engine shut down) */
};

typedef struct qevent {
  uint8_t type;
  uint32_t conn;
  int64_t stream;
  double a, b;
  napi_ref unused;
  void *extra;      /* heap data for EV_PROPOSED/ESTABLISHED/CLOSED/DATAGRAM (freed at flush) */
  size_t extralen;
} qevent;

/* ---- credentials (tls.c) ---- */

struct qcred {
  uint32_t id;
  int refs;          /* 1 for TypeScript's handle + 1 per connection using it */
  int released;      /* TypeScript let go of its handle */
  int server;
  int verify;        /* client: verify the server against the trust; server: require a client certificate */
  gnutls_certificate_credentials_t cred;
};

/* ---- byte chains (stream.c) ---- */

typedef struct qchunk {
  struct qchunk *next;
  size_t len;
  size_t cap;
  uint8_t data[];
} qchunk;

/* A FIFO of bytes: [acked .. sent .. end). Chunks are freed as `acked` passes them. */
typedef struct qchain {
  qchunk *head, *tail;
  uint64_t head_off;  /* stream offset of head->data[0] */
  uint64_t end;       /* stream offset after the last byte queued */
  uint64_t sent;      /* offset up to which ngtcp2 has taken the bytes (send side) */
  uint64_t acked;     /* offset up to which bytes are freed (send) or consumed (recv) */
  qchunk *cur;        /* send side: the chunk holding `sent` (NULL: start from head) */
  uint64_t cur_off;   /* stream offset of cur->data[0] */
} qchain;

/* ---- streams ---- */

enum { SMODE_JS = 0, SMODE_SPLICE = 1 };

struct qstream {
  int64_t id;
  qconn *conn;
  int mode;
  /* read side */
  qchain rx;               /* bytes received, not yet read (JS mode) */
  int rx_fin;              /* FIN received (every byte up to rx.end delivered) */
  int rx_reset;            /* RESET_STREAM received */
  uint64_t rx_reset_code;
  int rx_notified;         /* EV_STREAM_READABLE sent and not yet answered by a read to empty */
  int rx_closed;           /* we sent STOP_SENDING / the read side is finished */
  int rx_fin_read;         /* TypeScript mode: a read returned the FIN */
  uint64_t rx_off;         /* bytes ngtcp2 delivered so far (its in-order read offset) */
  int rx_reordered;        /* peer uni stream: data came out of order (ngtcp2 holds a reassembly buffer) */
  /* write side */
  qchain tx;
  int tx_fin;              /* FIN queued */
  int tx_fin_sent;
  int tx_fin_alone;        /* the FIN went in a frame of its own (all bytes were sent before it) */
  int tx_fin_acked;        /* the frame carrying the FIN was acknowledged */
  int tx_shut;             /* reset or stopped: nothing more may be sent */
  int tx_blocked;          /* flow-control blocked (waiting for extend_max_stream_data) */
  int tx_want_writable;    /* a write was cut short: EV_STREAM_WRITABLE when room returns */
  size_t tx_limit;         /* unacked bytes accepted from TypeScript at most */
  /* sendable list */
  qstream *snext, *sprev;
  int queued;
  /* splice */
  qstream *peer;           /* the other leg's stream */
  uint64_t spliced_in;     /* bytes this stream received and moved into peer->tx */
  uint64_t spliced_credit; /* of those, acknowledged on the partner's leg and credited back to us */
  uint64_t splice_base;    /* tx offset from which our send chain holds the partner's bytes */
  int splice_read_done;    /* our read side finished (FIN/reset passed on) */
  int splice_reported;
  int ng_closed;           /* ngtcp2 called stream_close */
  int stop_seen;           /* the peer's STOP_SENDING was applied */
  /* native bridge (bridge.c): a peer stream the addon pairs itself, unknown to TypeScript */
  int bstate;              /* BSTATE_*: 0 TypeScript's (or spliced), 1 header awaited, 2 waiting for credit */
  size_t bhdr;             /* WebTransport: header bytes to drop when spliced (the partner gets its own) */
  qstream *bnext;          /* the connection's queue of streams waiting for the partner leg's credit */
  int auto_bridged;        /* spliced by the bridge: SPLICE_DONE is not reported */
  /* drain (drain.c): a peer stream opened while the connection drains */
  int refused;             /* refused: never TypeScript's, not work to wait for */
};

/* ---- connections (conn.c) ---- */

enum { CSTATE_HANDSHAKE = 0, CSTATE_OPEN = 1, CSTATE_CLOSING = 2, CSTATE_DRAINING = 3, CSTATE_DEAD = 4 };

typedef struct qdgram {
  struct qdgram *next;
  size_t len;
  uint8_t data[];
} qdgram;

struct qconn {
  uint32_t id;
  qengine *eng;
  qendpoint *ep;
  int server;
  int state;
  int established;
  int half_open_counted;   /* counted in the endpoint's half-open totals */
  int validated;           /* address validated by a Retry token */
  uint8_t addr_key[16];
  ngtcp2_conn *conn;
  gnutls_session_t session;
  ngtcp2_crypto_conn_ref conn_ref;
  qcred *cred;
  char *sni;               /* client: kept for the session (GnuTLS keeps the pointer for verification) */
  struct sockaddr_storage local, remote;
  socklen_t locallen, remotelen;
  ngtcp2_cid cids[Q_MAX_CIDS];
  int ncids;
  ngtcp2_cid odcid;        /* the client's original DCID (server), registered until the handshake ends */
  int odcid_registered;
  ngtcp2_cid rscid;        /* the Retry SCID the client first addressed (server with Retry) */
  int rscid_registered;
  qmap streams;            /* stream id -> qstream */
  qstream *sq_head, *sq_tail; /* streams with something to send */
  qdgram *dq_head, *dq_tail;  /* datagrams to send */
  size_t dq_len;
  uint64_t dgram_dropped;
  /* datagram bridge */
  uint32_t dgram_peer;     /* conn id receiving our datagrams natively (0: to JavaScript) */
  int dgram_mode;          /* 1 raw, 2 HTTP/3 quarter stream id mapping */
  uint64_t dgram_map_from[Q_DGRAM_MAP_MAX], dgram_map_to[Q_DGRAM_MAP_MAX];
  int dgram_map_len;
  uint64_t dgram_unmapped;
  uint64_t dgram_bridged;
  uint64_t spliced_bytes;  /* stream bytes received here and passed to a splice partner */
  uint64_t bridged_bytes;  /* datagram bytes received here and passed to the bridge partner */
  int datagrams;           /* both sides negotiated datagrams */
  int js_datagrams;        /* deliver received datagrams to JavaScript */
  /* timers: one engine-wide heap (engine.c) */
  int heap_idx;            /* position in the engine's timer heap, -1 when not scheduled */
  uint64_t deadline;
  uint64_t close_deadline; /* closing/draining: free at this time */
  uint8_t *close_pkt;      /* our CONNECTION_CLOSE packet, repeated on incoming packets */
  size_t close_pktlen;
  uint32_t close_repeat;
  int dirty;               /* in the engine's dirty list */
  int want_write;          /* waiting for the endpoint socket to become writable */
  int stateless_reset;     /* recv_stateless_reset fired */
  int handshake_done_event;
  int streams_blocked_bidi, streams_blocked_uni; /* an open failed for lack of credit */
  /* STOP_SENDING frames seen in packets being read (frames.c), applied once ngtcp2 is done */
  struct { int64_t id; uint64_t code; } stops[8];
  int nstops;
  int closed_event_sent;
  int peer_closed;         /* the peer's CONNECTION_CLOSE ended it */
  /* close once flushed (conn_close_flushed): the CONNECTION_CLOSE to send, and by when at the latest */
  int flush_close;
  int flush_app;
  uint64_t flush_code;
  uint8_t *flush_reason;
  size_t flush_reasonlen;
  uint64_t flush_deadline;
  uint64_t keep_alive_ns;
  size_t stream_send_limit;
  int local_datagrams;     /* we offered datagrams */
  qconn *next_dirty;
  int dirty_next;
  qconn *next_later, *next_later2;
  qconn *next_dead;
  qconn *next_blocked;
  /* native stream bridge (bridge.c) */
  uint32_t sbridge_peer;   /* conn id whose streams pair with ours (0: none) */
  int sbridge_mode;        /* BRIDGE_OFF, BRIDGE_RAW, BRIDGE_WT */
  uint64_t sbridge_session; /* WebTransport: the session id on this leg */
  int sbridge_blocked;     /* a partner open on this connection failed for lack of credit */
  int64_t next_local[2];   /* the next stream id we open: [bidi, uni] */
  qstream *bq_head, *bq_tail; /* our peer's streams waiting for the partner leg's stream credit */
  qmap bridge_ahead;       /* raw: our peer's stream id -> twin opened ahead on the partner (reordering) */
  uint64_t bridged_streams; /* streams our peer opened that the bridge spliced */
  /* drain (drain.c) */
  int drain_scope;         /* DRAIN_NONE, DRAIN_ALL, DRAIN_WT */
  uint64_t drain_code;     /* the application code refusals carry */
  int64_t peer_max[2];     /* highest stream id the peer opened so far: [bidi, uni] (-1: none) */
  int64_t drain_max[2];    /* peer_max when the drain began: ids up to these are served */
  uint64_t refused_streams; /* peer streams refused while draining */
  /* streams the peer opened unidirectionally, whose state ngtcp2 keeps to the end (stream.c) */
  uint64_t peer_uni_bytes;  /* estimated bytes of it (Q_PEER_UNI_*) */
  uint64_t peer_uni_retired; /* retired so far */
  int drain_idle_sent;     /* EV_DRAINED emitted (or nothing was open when the drain began) */
  /* stats */
  uint64_t rx_bytes, tx_bytes, rx_pkts, tx_pkts;
};

/* ---- endpoints (endpoint.c) ---- */

typedef struct qtransport {
  uint64_t idle_timeout_ns;
  uint64_t handshake_timeout_ns;
  uint64_t keep_alive_ns;
  uint64_t initial_max_data;
  uint64_t max_window;
  uint64_t max_stream_window;
  uint64_t max_streams_bidi;
  uint64_t max_streams_uni;
  size_t max_payload;
  int datagrams;
  size_t stream_send_limit; /* unacked bytes a TypeScript writer may queue per stream */
} qtransport;

struct qendpoint {
  uint32_t id;
  qengine *eng;
  int fd;
  int connected;           /* a client leg's own connected socket */
  int closed;
  int gso;                 /* UDP_SEGMENT works */
  uv_poll_t poll;
  int poll_events;
  struct sockaddr_storage local, remote;
  socklen_t locallen, remotelen;
  /* server role */
  int listening;
  int accepting;
  qtransport transport;
  uint8_t reset_secret[32];
  uint8_t retry_secret[32];
  int retry_always;
  uint32_t retry_threshold;      /* half-open handshakes above which Retry is required */
  uint32_t max_connections;      /* connections + pending at most */
  uint32_t max_half_open_per_addr;
  uint32_t pending_max;          /* Initials waiting for TypeScript's decision at most */
  uint64_t pending_timeout_ns;   /* a pending Initial's wait for more of its hello, or for a decision */
  qmap cids;                     /* CID -> qconn */
  qmap pending_by_dcid;          /* client DCID -> qpending */
  qmap half_open_by_addr;        /* address -> (uintptr_t) count */
  uint32_t nconns;
  uint32_t npending;
  uint32_t half_open;
  uint64_t pending_bytes;        /* datagram and reassembly bytes the pending Initials hold */
  /* stateless reset rate limit */
  double reset_tokens;
  uint64_t reset_ts;
  /* packets the kernel would not take yet (EAGAIN): sent first when the socket drains */
  uint8_t *backlog;
  size_t backloglen;
  struct qtxmsg *backlog_msgs;
  int nbacklog;
  int tx_blocked;
  qconn *blocked_head;      /* connections waiting for the socket to drain */
  int refs;                 /* connections on it + 1 while open */
  uv_timer_t tick;          /* pending expiry */
  int tick_active;
  /* counters */
  qio io;                        /* also added to the engine's total (endpoint.c count_rx/count_tx) */
  uint64_t c_dropped[Q_NDROP_REASONS];
  uint64_t c_stateless[Q_NSTATELESS_PACKETS];
  uint64_t c_proposed, c_rejected, c_accepted;
};

/* An Initial (or several, when the ClientHello spans them) waiting for TypeScript's verdict. */
struct qpending {
  uint32_t id;
  qendpoint *ep;
  uint32_t version;
  ngtcp2_cid dcid, scid;
  ngtcp2_cid odcid;         /* original DCID recovered from a Retry token */
  int validated;
  struct sockaddr_storage remote;
  socklen_t remotelen;
  uint8_t addr_key[16];
  uint8_t *dgrams[Q_PENDING_MAX_DGRAMS];
  size_t dgramlen[Q_PENDING_MAX_DGRAMS];
  int ndgrams;
  size_t dgram_bytes;       /* sum of dgramlen */
  int first_dgram;          /* index of the datagram carrying CRYPTO offset 0 (ngtcp2 must read it first), -1 */
  /* Initial keys derived from dcid */
  uint8_t key[16], iv[12], hp[16];
  /* CRYPTO reassembly */
  uint8_t *hello;           /* hello_cap bytes, grown to the highest offset seen (≤ Q_HELLO_MAX) */
  uint8_t *have;            /* hello_cap / 8 bitmap of the bytes that arrived */
  size_t hello_cap;
  size_t hello_len;         /* total ClientHello length (header included) once known, else 0 */
  int proposed;
  uint64_t created;         /* its first datagram: the handshake timeout counts from here */
  uint64_t progressed;      /* its last datagram that brought new hello bytes (the last, once proposed) */
  qpending *next_expired;
};

/* One sendmsg: a run of packets to one destination, several when UDP GSO splits them (seg). */
typedef struct qtxmsg {
  qendpoint *ep;
  size_t off, len, seg;
  struct sockaddr_storage to;
  socklen_t tolen;
} qtxmsg;

/* Shared transmit buffer: room for a few GSO runs of up to 64 KiB each before a flush. */
#define Q_TX_BUF (512 * 1024)
/* Packets one connection writes per turn at most (fairness between connections). */
#define Q_WRITE_MAX_PKTS 192

/* Extra data of EV_PROPOSED and EV_CLOSED (heap, freed when flushed). */
typedef struct qproposal {
  int validated;
  uint16_t port;
  char address[46];
  size_t snilen;   /* 0: no SNI */
  size_t alpnlen;  /* ALPN list in wire format, after the SNI bytes */
  uint8_t data[];
} qproposal;

typedef struct qclose_info {
  int app;
  int established;
  int alert;       /* TLS alert we sent (0: none) */
  int liberr;      /* ngtcp2 error that made us close (0: none) */
  uint64_t code;
  size_t reasonlen;
  char reason[];
} qclose_info;

/* ---- the engine (engine.c) ---- */

struct qengine {
  napi_env env;
  uv_loop_t *loop;
  napi_ref callback;
  napi_async_context async;
  napi_ref events_ab;       /* Float64Array's ArrayBuffer shared with JavaScript */
  double *events_mem;
  size_t events_cap;        /* records */
  uv_check_t check;
  uv_idle_t idle;
  int idle_active;
  int running;              /* inside engine_run */
  int in_js;                /* inside the JavaScript callback */
  qmap creds, endpoints, conns, pendings;
  uint32_t next_id;
  qevent *ev;
  size_t nev, cap_ev;
  qconn *dirty_head, *next_dirty_head;
  qconn *dead_head;
  /* shared receive buffers and transmit batch (one thread: one recvmmsg/sendmmsg at a time) */
  uint8_t *rxbuf;
  uint8_t *txbuf;
  size_t txlen;
  qtxmsg txmsg[Q_TX_MAX_PKTS];
  int ntx;
  /* timer heap of connections */
  qconn **heap;
  size_t nheap, capheap;
  uv_timer_t timer;
  uint64_t timer_at;
  /* counters */
  uint64_t c_sendmmsg, c_recvmmsg, c_runs, c_writes, c_polls;
  qio io;                   /* all endpoints', closed ones included */
  /* Busy CPU: the thread's CPU nanoseconds inside the engine's libuv callbacks, JavaScript
     excluded, kernel time of the engine's own syscalls included (engine.c: an estimate from a
     random sample of the callbacks, as a thread-CPU clock read is a ~2 µs syscall here). */
  uint64_t busy_ns;
  uint64_t busy_js_ns;      /* thread CPU inside JavaScript during the sampled callback */
  uint32_t busy_rng;        /* xorshift32 state choosing the sampled callbacks */
  int busy_sampling;        /* inside a sampled callback */
  int shutting_down;
  /* live object counts (leak checks) */
  int64_t live_conns, live_streams, live_pending, live_chunks_bytes, live_dgrams, live_endpoints, live_creds;
  uint64_t c_bridged_streams; /* streams the native bridge paired (bridge.c) */
};

/* engine.c */
int engine_init(qengine *eng, napi_env env);
void engine_destroy(qengine *eng);
uint32_t engine_new_id(qengine *eng);
void engine_emit(qengine *eng, uint8_t type, uint32_t conn, int64_t stream, double a, double b, void *extra, size_t extralen);
void engine_mark_dirty(qengine *eng, qconn *c);
void engine_mark_dirty_next(qengine *eng, qconn *c);
void engine_schedule(qengine *eng, qconn *c, uint64_t deadline);
void engine_unschedule(qengine *eng, qconn *c);
void engine_flush_tx(qengine *eng);
void engine_kick(qengine *eng);
void engine_run(qengine *eng);
uint64_t engine_busy_begin(qengine *eng);
void engine_busy_end(qengine *eng, uint64_t begun);
uint64_t q_now(void);
void q_rand(uint8_t *dest, size_t len);

/* tls.c */
qcred *cred_new_server(qengine *eng, const char *cert, size_t certlen, const char *key, size_t keylen,
                       const char *ca, size_t calen, const char **err);
qcred *cred_new_client(qengine *eng, const char *ca, size_t calen, int verify,
                       const char *cert, size_t certlen, const char *key, size_t keylen, const char **err);
void cred_unref(qengine *eng, qcred *cr);
int tls_session_server(qconn *c, qcred *cr, const uint8_t *alpn, size_t alpnlen);
int tls_session_client(qconn *c, qcred *cr, const char *sni, const uint8_t *alpn, size_t alpnlen);

/* initial.c */
int initial_keys(qpending *p);
/* What one datagram brought to its ClientHello. */
typedef struct qabsorbed {
  size_t fresh;             /* CRYPTO bytes not seen before (0: a repeat, nothing to keep) */
  int start;                /* it carries CRYPTO offset 0 */
} qabsorbed;
/* Returns 1 when the ClientHello is complete, 0 when more is needed, -1 when the datagram is not usable. */
int initial_absorb(qpending *p, const uint8_t *dgram, size_t len, qabsorbed *got);
void initial_release(qpending *p);
/* SNI (NUL-terminated, lower-cased, malloc'd or NULL) and ALPN (wire format, malloc'd) of a complete hello. */
int initial_client_hello(qpending *p, char **sni, uint8_t **alpn, size_t *alpnlen);

/* endpoint.c */
qendpoint *ep_new_listen(qengine *eng, const struct sockaddr *addr, socklen_t addrlen, int rcvbuf, int sndbuf, const char **err, int *errnum);
qendpoint *ep_new_connected(qengine *eng, const struct sockaddr *remote, socklen_t remotelen, int rcvbuf, int sndbuf, const char **err, int *errnum);
void ep_close(qendpoint *ep);
void ep_unref(qendpoint *ep);
int ep_tx_reserve(qendpoint *ep, uint8_t **buf, size_t *cap);
int ep_tx_commit(qendpoint *ep, size_t len, const struct sockaddr *to, socklen_t tolen);
int ep_register_cid(qendpoint *ep, const ngtcp2_cid *cid, qconn *c);
void ep_unregister_cid(qendpoint *ep, const ngtcp2_cid *cid, qconn *c);
void ep_half_open_release(qendpoint *ep, const uint8_t addr_key[16]);
void ep_send_raw(qendpoint *ep, const uint8_t *data, size_t len, const struct sockaddr *to, socklen_t tolen);
void ep_reset_token(qendpoint *ep, const ngtcp2_cid *cid, uint8_t *token);
void pending_free(qengine *eng, qpending *p);
qconn *pending_accept(qpending *p, qcred *cr, const uint8_t *alpn, size_t alpnlen, const qtransport *t, const char **err);
void pending_reject(qpending *p, uint64_t code);
void addr_key_of(const struct sockaddr *sa, uint8_t key[16]);

/* conn.c */
qconn *conn_new_server(qendpoint *ep, const ngtcp2_pkt_hd *hd, const qpending *p, qcred *cr,
                       const uint8_t *alpn, size_t alpnlen, const qtransport *t, const char **err);
qconn *conn_new_client(qendpoint *ep, qcred *cr, const char *sni, const uint8_t *alpn, size_t alpnlen,
                       const qtransport *t, const char **err);
void conn_read(qconn *c, const uint8_t *data, size_t len, const struct sockaddr *from, socklen_t fromlen);
void conn_write(qconn *c);
void conn_close(qconn *c, int app, uint64_t code, const char *reason, size_t reasonlen);
/* Closes like conn_close once every stream's bytes, FIN and reset have reached the peer, or
   after timeout_ns at the latest; -1 when not open. conn_flush_close_now sends that close at
   once (the endpoint is closing). */
int conn_close_flushed(qconn *c, int app, uint64_t code, const char *reason, size_t reasonlen, uint64_t timeout_ns);
void conn_flush_close_now(qconn *c);
void conn_kill(qconn *c, int kind, int emit);
void conn_reap(qengine *eng);
void conn_arm_timer(qconn *c);
void conn_on_timer(qconn *c);
int conn_dgram_queue(qconn *c, const uint8_t *data, size_t len);
qstream *conn_find_stream(qconn *c, int64_t id);

/* frames.c */
extern qconn *frames_current;
int frames_decrypt_cb(uint8_t *dest, const ngtcp2_crypto_aead *aead, const ngtcp2_crypto_aead_ctx *aead_ctx,
                      const uint8_t *ciphertext, size_t ciphertextlen, const uint8_t *nonce, size_t noncelen,
                      const uint8_t *aad, size_t aadlen);
void frames_apply_stops(qconn *c, int64_t only);

/* stream.c */
qstream *stream_new(qconn *c, int64_t id);
void stream_free(qstream *s);
void stream_enqueue(qstream *s);
void stream_dequeue(qstream *s);
void chain_init(qchain *ch, uint64_t off);
int chain_append(qchain *ch, const uint8_t *data, size_t len, qengine *eng);
void chain_free(qchain *ch, qengine *eng);
void chain_release(qchain *ch, uint64_t upto, qengine *eng);
size_t chain_copy_out(qchain *ch, uint8_t *dest, size_t max, qengine *eng);
int chain_vecs(qchain *ch, ngtcp2_vec *v, int maxv, size_t maxbytes);
size_t chain_move(qchain *from, qchain *to, qengine *eng);
int stream_on_recv(qstream *s, uint32_t flags, const uint8_t *data, size_t len);
void stream_on_acked(qstream *s, uint64_t offset, uint64_t len);
void stream_on_reset(qstream *s, uint64_t code);
void stream_on_stop(qstream *s, uint64_t code);
void stream_on_close(qstream *s, uint64_t code, int has_code);
void stream_on_extend(qstream *s);
ssize_t stream_js_read(qstream *s, uint8_t *dest, size_t max);
ssize_t stream_js_write(qstream *s, const uint8_t *data, size_t len, int fin);
void stream_reset(qstream *s, uint64_t code);
void stream_stop_sending(qstream *s, uint64_t code);
int stream_splice(qstream *a, qstream *b);
void stream_conn_gone(qstream *s);
void stream_maybe_free(qstream *s);
void stream_credit(qstream *s, uint64_t n);
int stream_open_local(qconn *c, int bidi, qstream **out);
void stream_refuse(qstream *s, uint64_t code);

/* bridge.c */
enum { BRIDGE_OFF = 0, BRIDGE_RAW = 1, BRIDGE_WT = 2 };
enum { BSTATE_NONE = 0, BSTATE_HEADER = 1, BSTATE_WAITING = 2 };
int bridge_set(qconn *a, qconn *b, int mode, uint64_t session_a, uint64_t session_b);
int bridge_on_open(qstream *s);
void bridge_on_data(qstream *s);
void bridge_on_signal(qstream *s);
void bridge_on_credit(qconn *c);
void bridge_on_established(qconn *c);
void bridge_on_gone(qconn *c);
void bridge_forget(qstream *s);

/* drain.c */
enum { DRAIN_NONE = 0, DRAIN_ALL = 1, DRAIN_WT = 2 };
/* Starts draining (the first call; a later one keeps the scope and code): the streams of work
   open now, -1 when the connection is not open or the scope is unknown. Each call re-arms
   EV_DRAINED for when that count reaches 0. */
int drain_begin(qconn *c, int scope, uint64_t code);
size_t drain_work(qconn *c);
/* A stream the peer opened (stream_open callback): 1 when it was refused. */
int drain_on_open(qstream *s);
/* A WebTransport stream of the bridged session whose header is in: 1 when it was refused. */
int drain_refuses_wt(qstream *s);
/* A stream of c was freed or read to its end: EV_DRAINED once no work is left. */
void drain_settle(qconn *c);

#endif
