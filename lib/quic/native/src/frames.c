/*
 * STOP_SENDING from the peer, read from decrypted packets (and out-of-order data on the peer's
 * unidirectional streams, for the bound on what ngtcp2 keeps of them: peer_uni_data).
 *
 * ngtcp2 0.12 answers a received STOP_SENDING with RESET_STREAM by itself but tells the
 * application nothing (its stream_stop_sending callback fires for STOP_SENDING we send), so the
 * code a splice must pass on (SPEC §7) would be lost. The decrypt callback is wrapped: after
 * ngtcp2_crypto_decrypt succeeds, the plaintext frames are walked (RFC 9000 §19 layouts, skipped
 * by their lengths) and each STOP_SENDING is recorded on the connection being read; the records
 * are applied after ngtcp2 has processed the packet (or at the stream's close, if that comes
 * first in the same packet). A duplicate packet records the same frame again: applying it is
 * idempotent. Unknown frame types end the walk; ngtcp2 closes the connection on them anyway.
 */
#include "quic.h"

qconn *frames_current = NULL;

static int skip(size_t len, size_t *at, uint64_t n) {
  if (n > len - *at) return -1;
  *at += (size_t)n;
  return 0;
}

static void record(qconn *c, uint64_t id, uint64_t code) {
  for (int i = 0; i < c->nstops; i++) {
    if (c->stops[i].id == (int64_t)id) return;
  }
  if (c->nstops == (int)(sizeof c->stops / sizeof c->stops[0])) return;
  c->stops[c->nstops].id = (int64_t)id;
  c->stops[c->nstops].code = code;
  c->nstops++;
}

/* STREAM data at off on stream id: on a stream the peer opened unidirectionally, data beyond
   what ngtcp2 has delivered makes it buffer out of order, in a reassembly buffer it keeps with
   the stream to the connection's end (stream.c retire_peer_uni); counted once per stream. A
   new stream's first frame counts when it starts past 0 (counted again should a second such
   frame come in the same packet: an overestimate, never an underestimate). */
static void peer_uni_data(qconn *c, uint64_t id, uint64_t off, uint64_t n) {
  if (n == 0 || off == 0 || ngtcp2_is_bidi_stream((int64_t)id) || ngtcp2_conn_is_local_stream(c->conn, (int64_t)id)) return;
  qstream *s = conn_find_stream(c, (int64_t)id);
  if (s == NULL) {
    if ((int64_t)id > c->peer_max[1]) c->peer_uni_bytes += Q_PEER_UNI_REORDERED;
    return;
  }
  if (s->rx_reordered || off <= s->rx_off) return;
  s->rx_reordered = 1;
  c->peer_uni_bytes += Q_PEER_UNI_REORDERED;
}

static void scan(qconn *c, const uint8_t *p, size_t len) {
  size_t at = 0;
  uint64_t type, v, n, id;
  while (at < len) {
    if (q_varint_read(p, len, &at, &type) != 0) return;
    switch (type) {
      case 0x00: case 0x01: case 0x1e:
        break;
      case 0x02: case 0x03: {
        uint64_t ranges;
        if (q_varint_read(p, len, &at, &v) || q_varint_read(p, len, &at, &v) || q_varint_read(p, len, &at, &ranges) || q_varint_read(p, len, &at, &v)) return;
        for (uint64_t i = 0; i < 2 * ranges; i++) {
          if (q_varint_read(p, len, &at, &v) != 0) return;
        }
        if (type == 0x03) {
          for (int i = 0; i < 3; i++) {
            if (q_varint_read(p, len, &at, &v) != 0) return;
          }
        }
        break;
      }
      case 0x04:
        if (q_varint_read(p, len, &at, &v) || q_varint_read(p, len, &at, &v) || q_varint_read(p, len, &at, &v)) return;
        break;
      case 0x05:
        if (q_varint_read(p, len, &at, &id) || q_varint_read(p, len, &at, &v)) return;
        record(c, id, v);
        break;
      case 0x06:
        if (q_varint_read(p, len, &at, &v) || q_varint_read(p, len, &at, &n) || skip(len, &at, n)) return;
        break;
      case 0x07:
        if (q_varint_read(p, len, &at, &n) || skip(len, &at, n)) return;
        break;
      case 0x10: case 0x12: case 0x13: case 0x14: case 0x16: case 0x17: case 0x19:
        if (q_varint_read(p, len, &at, &v)) return;
        break;
      case 0x11: case 0x15:
        if (q_varint_read(p, len, &at, &v) || q_varint_read(p, len, &at, &v)) return;
        break;
      case 0x18:
        if (q_varint_read(p, len, &at, &v) || q_varint_read(p, len, &at, &v) || at >= len) return;
        n = p[at++];
        if (skip(len, &at, n + NGTCP2_STATELESS_RESET_TOKENLEN)) return;
        break;
      case 0x1a: case 0x1b:
        if (skip(len, &at, 8)) return;
        break;
      case 0x1c:
        if (q_varint_read(p, len, &at, &v) || q_varint_read(p, len, &at, &v) || q_varint_read(p, len, &at, &n) || skip(len, &at, n)) return;
        break;
      case 0x1d:
        if (q_varint_read(p, len, &at, &v) || q_varint_read(p, len, &at, &n) || skip(len, &at, n)) return;
        break;
      case 0x30:
        return; /* DATAGRAM without length: the rest of the packet */
      case 0x31:
        if (q_varint_read(p, len, &at, &n) || skip(len, &at, n)) return;
        break;
      default:
        if (type >= 0x08 && type <= 0x0f) {
          uint64_t off = 0;
          if (q_varint_read(p, len, &at, &id)) return;
          if ((type & 0x04) && q_varint_read(p, len, &at, &off)) return;
          if (!(type & 0x02)) {
            /* No length: the data runs to the end of the packet. */
            peer_uni_data(c, id, off, len - at);
            return;
          }
          if (q_varint_read(p, len, &at, &n) || skip(len, &at, n)) return;
          peer_uni_data(c, id, off, n);
          break;
        }
        return;
    }
  }
}

int frames_decrypt_cb(uint8_t *dest, const ngtcp2_crypto_aead *aead, const ngtcp2_crypto_aead_ctx *aead_ctx,
                      const uint8_t *ciphertext, size_t ciphertextlen, const uint8_t *nonce, size_t noncelen,
                      const uint8_t *aad, size_t aadlen) {
  int rv = ngtcp2_crypto_decrypt_cb(dest, aead, aead_ctx, ciphertext, ciphertextlen, nonce, noncelen, aad, aadlen);
  if (rv == 0 && frames_current != NULL && ciphertextlen >= aead->max_overhead) {
    scan(frames_current, dest, ciphertextlen - aead->max_overhead);
  }
  return rv;
}

/* Applies recorded STOP_SENDING frames (all, or only stream `only` when >= 0). */
void frames_apply_stops(qconn *c, int64_t only) {
  int keep = 0;
  for (int i = 0; i < c->nstops; i++) {
    if (only >= 0 && c->stops[i].id != only) {
      c->stops[keep++] = c->stops[i];
      continue;
    }
    qstream *s = conn_find_stream(c, c->stops[i].id);
    if (s != NULL && !s->stop_seen) {
      s->stop_seen = 1;
      stream_on_stop(s, c->stops[i].code);
    }
  }
  c->nstops = keep;
}
