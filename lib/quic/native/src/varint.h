/*
 * QUIC variable-length integers (RFC 9000 §16), the one implementation the addon uses: frames
 * walked in decrypted packets (frames.c), Initial packets and their ClientHello (initial.c),
 * HTTP/3 datagram quarter stream ids (conn.c) and WebTransport stream headers (bridge.c).
 *
 * The two leading bits give the length (1, 2, 4 or 8 bytes), the rest is the value, big-endian.
 * A reader never reads past `len`; a writer needs room for q_varint_len(v) bytes (at most 8).
 * Values above 2^62 - 1 cannot be encoded; q_varint_put writes the low 62 bits.
 */
#ifndef STARGATE_QUIC_VARINT_H
#define STARGATE_QUIC_VARINT_H

#include <stdint.h>
#include <stddef.h>

/* Reads one varint from the start of b: its length in bytes, or 0 when b holds less than it. */
static inline size_t q_varint_get(const uint8_t *b, size_t len, uint64_t *v) {
  if (len == 0) return 0;
  size_t n = (size_t)1 << (b[0] >> 6);
  if (n > len) return 0;
  uint64_t x = b[0] & 0x3f;
  for (size_t i = 1; i < n; i++) x = (x << 8) | b[i];
  *v = x;
  return n;
}

/* Reads one varint at *at and moves *at past it: 0, or -1 (*at unchanged) when b ends first. */
static inline int q_varint_read(const uint8_t *b, size_t len, size_t *at, uint64_t *v) {
  if (*at >= len) return -1;
  size_t n = q_varint_get(b + *at, len - *at, v);
  if (n == 0) return -1;
  *at += n;
  return 0;
}

/* The bytes v takes encoded. */
static inline size_t q_varint_len(uint64_t v) {
  return v < 64 ? 1 : v < 16384 ? 2 : v < 1073741824 ? 4 : 8;
}

/* Writes v at b: the bytes written (q_varint_len(v)). */
static inline size_t q_varint_put(uint8_t *b, uint64_t v) {
  static const uint8_t prefix[9] = {0, 0x00, 0x40, 0, 0x80, 0, 0, 0, 0xc0};
  size_t n = q_varint_len(v);
  for (size_t i = n; i-- > 0; v >>= 8) b[i] = (uint8_t)v;
  b[0] = (uint8_t)((b[0] & 0x3f) | prefix[n]);
  return n;
}

#endif
