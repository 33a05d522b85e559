/*
 * The ClientHello of a client's Initial packets, read before any connection state exists, so
 * that TypeScript can route (or refuse) by SNI and choose the ALPN and TLS material first
 * ("reject a missing or unknown SNI from the Initial, before any handshake work").
 *
 * Initial packets are protected with keys anyone can derive from the client's Destination
 * Connection ID (RFC 9001 §5.2):
 *   initial_secret = HKDF-Extract(0x38762cf7…, client DCID)
 *   client_secret  = HKDF-Expand-Label(initial_secret, "client in", "", 32)
 *   key / iv / hp  = HKDF-Expand-Label(client_secret, "quic key" / "quic iv" / "quic hp", "", 16 / 12 / 16)
 * Header protection is AES-128-ECB of a 16-byte sample (RFC 9001 §5.4.3), the payload
 * AES-128-GCM (§5.3).
 *
 * A ClientHello may span several Initial packets (Chromium's does: post-quantum key shares make
 * it ~2,500 bytes) and its CRYPTO frames may come in any order, split at any offset (Chromium
 * scrambles them on purpose), so the bytes are placed by offset into a buffer (grown to the
 * highest offset seen, at most Q_HELLO_MAX) with a bitmap of what arrived; the hello is complete
 * when every byte of its declared length is in. Each datagram reports what it brought (new
 * bytes, offset 0): endpoint.c keeps only datagrams that brought something and hands ngtcp2 the
 * one with offset 0 first, whatever order they came in.
 */
#include "quic.h"

#include <stdlib.h>
#include <ctype.h>
#include <gnutls/crypto.h>

static const uint8_t INITIAL_SALT_V1[20] = {0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17,
                                            0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a};

static int expand_label(uint8_t *out, size_t outlen, const uint8_t *secret, size_t secretlen, const char *label) {
  uint8_t info[64];
  size_t labellen = strlen(label);
  size_t n = 0;
  info[n++] = (uint8_t)(outlen >> 8);
  info[n++] = (uint8_t)outlen;
  info[n++] = (uint8_t)(6 + labellen);
  memcpy(info + n, "tls13 ", 6);
  n += 6;
  memcpy(info + n, label, labellen);
  n += labellen;
  info[n++] = 0;
  gnutls_datum_t key = {(unsigned char *)secret, (unsigned int)secretlen};
  gnutls_datum_t inf = {info, (unsigned int)n};
  return gnutls_hkdf_expand(GNUTLS_MAC_SHA256, &key, &inf, out, outlen) == 0 ? 0 : -1;
}

int initial_keys(qpending *p) {
  uint8_t initial[32], client[32];
  gnutls_datum_t ikm = {p->dcid.data, (unsigned int)p->dcid.datalen};
  gnutls_datum_t salt = {(unsigned char *)INITIAL_SALT_V1, sizeof INITIAL_SALT_V1};
  if (gnutls_hkdf_extract(GNUTLS_MAC_SHA256, &ikm, &salt, initial) != 0) return -1;
  if (expand_label(client, 32, initial, 32, "client in") != 0) return -1;
  if (expand_label(p->key, 16, client, 32, "quic key") != 0) return -1;
  if (expand_label(p->iv, 12, client, 32, "quic iv") != 0) return -1;
  if (expand_label(p->hp, 16, client, 32, "quic hp") != 0) return -1;
  return 0;
}

/* AES-128-ECB of one block, as AES-128-CBC with a zero IV (GnuTLS has no ECB mode). */
static int hp_mask(const uint8_t hp[16], const uint8_t *sample, uint8_t mask[16]) {
  gnutls_cipher_hd_t h;
  uint8_t zero[16] = {0};
  gnutls_datum_t key = {(unsigned char *)hp, 16};
  gnutls_datum_t iv = {zero, 16};
  if (gnutls_cipher_init(&h, GNUTLS_CIPHER_AES_128_CBC, &key, &iv) != 0) return -1;
  int rv = gnutls_cipher_encrypt2(h, sample, 16, mask, 16);
  gnutls_cipher_deinit(h);
  return rv == 0 ? 0 : -1;
}

/* Marks [off, off + len) as arrived; returns how many of those bytes had not. */
static size_t mark(qpending *p, uint64_t off, size_t len) {
  size_t fresh = 0;
  for (uint64_t i = off; i < off + len; i++) {
    uint8_t bit = (uint8_t)(1u << (i & 7));
    if ((p->have[i >> 3] & bit) == 0) {
      p->have[i >> 3] |= bit;
      fresh++;
    }
  }
  return fresh;
}

static int complete(const qpending *p, size_t len) {
  if (len > p->hello_cap) return 0;
  for (size_t i = 0; i < len; i++) {
    if ((p->have[i >> 3] & (1u << (i & 7))) == 0) return 0;
  }
  return 1;
}

/* Room for CRYPTO bytes up to end (≤ Q_HELLO_MAX): the buffer grows in Q_HELLO_CHUNK steps, so a
   flight held while its gap fills costs about what it carries, not the largest hello. */
static int reserve(qpending *p, size_t end) {
  if (end <= p->hello_cap) return 0;
  size_t cap = (end + Q_HELLO_CHUNK - 1) / Q_HELLO_CHUNK * Q_HELLO_CHUNK;
  uint8_t *hello = realloc(p->hello, cap);
  if (hello == NULL) return -1;
  p->hello = hello;
  uint8_t *have = realloc(p->have, cap / 8);
  if (have == NULL) return -1;
  memset(have + p->hello_cap / 8, 0, (cap - p->hello_cap) / 8);
  p->have = have;
  p->ep->pending_bytes += (cap - p->hello_cap) + (cap - p->hello_cap) / 8;
  p->hello_cap = cap;
  return 0;
}

void initial_release(qpending *p) {
  p->ep->pending_bytes -= p->hello_cap + p->hello_cap / 8;
  free(p->hello);
  free(p->have);
  p->hello = NULL;
  p->have = NULL;
  p->hello_cap = 0;
}

/* Frames of one decrypted Initial payload: CRYPTO bytes go into the hello buffer. */
static int absorb_frames(qpending *p, const uint8_t *f, size_t len, qabsorbed *got) {
  size_t at = 0;
  while (at < len) {
    uint64_t type;
    if (q_varint_read(f, len, &at, &type) != 0) return -1;
    switch (type) {
      case 0x00: /* PADDING */
      case 0x01: /* PING */
        break;
      case 0x02:
      case 0x03: { /* ACK */
        uint64_t v, ranges;
        if (q_varint_read(f, len, &at, &v) || q_varint_read(f, len, &at, &v) || q_varint_read(f, len, &at, &ranges) ||
            q_varint_read(f, len, &at, &v)) return -1;
        if (ranges > 256) return -1;
        for (uint64_t i = 0; i < ranges * 2; i++) {
          if (q_varint_read(f, len, &at, &v) != 0) return -1;
        }
        if (type == 0x03) {
          for (int i = 0; i < 3; i++) {
            if (q_varint_read(f, len, &at, &v) != 0) return -1;
          }
        }
        break;
      }
      case 0x06: { /* CRYPTO */
        uint64_t off, n;
        if (q_varint_read(f, len, &at, &off) || q_varint_read(f, len, &at, &n)) return -1;
        if (n > len - at) return -1;
        if (off + n > Q_HELLO_MAX) return -1; /* larger than any ClientHello we accept */
        if (n == 0) break;
        if (reserve(p, (size_t)(off + n)) != 0) return -1;
        memcpy(p->hello + off, f + at, (size_t)n);
        got->fresh += mark(p, off, (size_t)n);
        if (off == 0) got->start = 1;
        at += (size_t)n;
        break;
      }
      case 0x1c: /* CONNECTION_CLOSE: the client gave up */
        return -1;
      default:
        return -1; /* no other frame may appear in a client's Initial (RFC 9000 §12.4) */
    }
  }
  return 0;
}

/* Opens one Initial packet at b[0..len); returns its length, 0 when b does not start with an
   Initial we can read (a later coalesced packet of another type), -1 when it is malformed. */
static ssize_t open_packet(qpending *p, const uint8_t *b, size_t len, qabsorbed *got) {
  if (len < 7 || (b[0] & 0xc0) != 0xc0) return 0;
  uint32_t version = ((uint32_t)b[1] << 24) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 8) | b[4];
  if (version != NGTCP2_PROTO_VER_V1 || ((b[0] >> 4) & 0x03) != 0) return 0;
  size_t at = 5;
  size_t dcidlen = b[at++];
  if (dcidlen > NGTCP2_MAX_CIDLEN || at + dcidlen >= len) return -1;
  if (dcidlen != p->dcid.datalen || memcmp(b + at, p->dcid.data, dcidlen) != 0) return 0;
  at += dcidlen;
  size_t scidlen = b[at++];
  if (scidlen > NGTCP2_MAX_CIDLEN || at + scidlen > len) return -1;
  at += scidlen;
  uint64_t tokenlen, plen;
  if (q_varint_read(b, len, &at, &tokenlen) != 0 || tokenlen > len - at) return -1;
  at += (size_t)tokenlen;
  if (q_varint_read(b, len, &at, &plen) != 0 || plen > len - at || plen < 20) return -1;
  size_t pn_off = at;
  size_t end = pn_off + (size_t)plen;

  uint8_t mask[16];
  if (hp_mask(p->hp, b + pn_off + 4, mask) != 0) return -1;
  uint8_t first = b[0] ^ (mask[0] & 0x0f);
  size_t pnlen = (first & 0x03) + 1;
  uint8_t header[256]; /* room for our own Retry tokens (NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN) */
  size_t hlen = pn_off + pnlen;
  if (hlen > sizeof header) return -1; /* a token too long for an Initial we would read */
  memcpy(header, b, hlen);
  header[0] = first;
  uint64_t pn = 0;
  for (size_t i = 0; i < pnlen; i++) {
    header[pn_off + i] ^= mask[1 + i];
    pn = (pn << 8) | header[pn_off + i];
  }
  uint8_t nonce[12];
  memcpy(nonce, p->iv, 12);
  for (int i = 0; i < 8; i++) nonce[11 - i] ^= (uint8_t)(pn >> (8 * i));

  size_t clen = end - hlen;
  if (clen < 16) return -1;
  uint8_t *plain = malloc(clen);
  if (plain == NULL) return -1;
  gnutls_aead_cipher_hd_t aead;
  gnutls_datum_t key = {p->key, 16};
  size_t plainlen = clen;
  int ok = gnutls_aead_cipher_init(&aead, GNUTLS_CIPHER_AES_128_GCM, &key) == 0;
  if (ok) {
    ok = gnutls_aead_cipher_decrypt(aead, nonce, 12, header, hlen, 16, b + hlen, clen, plain, &plainlen) == 0;
    gnutls_aead_cipher_deinit(aead);
  }
  int rv = ok ? absorb_frames(p, plain, plainlen, got) : -1;
  free(plain);
  return rv == 0 ? (ssize_t)end : -1;
}

int initial_absorb(qpending *p, const uint8_t *dgram, size_t len, qabsorbed *got) {
  size_t at = 0;
  int opened = 0;
  got->fresh = 0;
  got->start = 0;
  while (at < len) {
    ssize_t n = open_packet(p, dgram + at, len - at, got);
    if (n < 0) return -1;
    if (n == 0) break;
    opened = 1;
    at += (size_t)n;
  }
  if (!opened) return -1;
  if (p->hello == NULL) return 0;
  if (p->hello_len == 0) {
    if (!complete(p, 4)) return 0;
    if (p->hello[0] != 0x01) return -1; /* not a ClientHello */
    size_t body = ((size_t)p->hello[1] << 16) | ((size_t)p->hello[2] << 8) | p->hello[3];
    if (body + 4 > Q_HELLO_MAX) return -1;
    p->hello_len = body + 4;
  }
  return complete(p, p->hello_len) ? 1 : 0;
}

/* server_name and application_layer_protocol_negotiation of a complete ClientHello (RFC 8446 §4.1.2). */
int initial_client_hello(qpending *p, char **sni, uint8_t **alpn, size_t *alpnlen) {
  *sni = NULL;
  *alpn = NULL;
  *alpnlen = 0;
  const uint8_t *b = p->hello + 4;
  size_t len = p->hello_len - 4;
  size_t at = 2 + 32; /* legacy_version, random */
  if (at >= len) return -1;
  at += 1 + b[at]; /* legacy_session_id */
  if (at + 2 > len) return -1;
  at += 2 + (((size_t)b[at] << 8) | b[at + 1]); /* cipher_suites */
  if (at >= len) return -1;
  at += 1 + b[at]; /* legacy_compression_methods */
  if (at + 2 > len) return -1;
  size_t ext_end = at + 2 + (((size_t)b[at] << 8) | b[at + 1]);
  if (ext_end > len) return -1;
  at += 2;
  int transport_params = 0;
  while (at + 4 <= ext_end) {
    unsigned type = ((unsigned)b[at] << 8) | b[at + 1];
    size_t size = ((size_t)b[at + 2] << 8) | b[at + 3];
    const uint8_t *d = b + at + 4;
    at += 4 + size;
    if (at > ext_end) return -1;
    if (type == 0x0039 && size > 0) transport_params = 1;
    if (type == 0x0000 && size >= 5 && *sni == NULL) {
      /* server_name_list: length, then entries of (type, length, name); host_name is type 0 */
      size_t list = ((size_t)d[0] << 8) | d[1];
      size_t p2 = 2;
      if (list + 2 > size) return -1;
      while (p2 + 3 <= 2 + list) {
        uint8_t nt = d[p2];
        size_t nl = ((size_t)d[p2 + 1] << 8) | d[p2 + 2];
        if (p2 + 3 + nl > 2 + list) return -1;
        if (nt == 0 && nl > 0 && nl <= 255) {
          char *name = malloc(nl + 1);
          if (name == NULL) return -1;
          for (size_t i = 0; i < nl; i++) {
            unsigned char ch = d[p2 + 3 + i];
            /* A host name is printable ASCII without NUL; anything else makes it no name at all. */
            if (ch <= 0x20 || ch >= 0x7f) {
              free(name);
              name = NULL;
              break;
            }
            name[i] = (char)tolower(ch);
          }
          if (name != NULL) {
            name[nl] = 0;
            *sni = name;
          }
          break;
        }
        p2 += 3 + nl;
      }
    } else if (type == 0x0010 && size >= 2 && *alpn == NULL) {
      size_t list = ((size_t)d[0] << 8) | d[1];
      if (list + 2 > size || list == 0) return -1;
      /* Each entry is a length byte and a non-empty name (RFC 7301 §3.1). */
      for (size_t q = 0; q < list;) {
        size_t n = d[2 + q];
        if (n == 0 || q + 1 + n > list) return -1;
        q += 1 + n;
      }
      *alpn = malloc(list);
      if (*alpn == NULL) return -1;
      memcpy(*alpn, d + 2, list);
      *alpnlen = list;
    }
  }
  /* A QUIC ClientHello without transport parameters is no QUIC ClientHello (RFC 9001 §8.2). */
  return transport_params ? 0 : -1;
}
