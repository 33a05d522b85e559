/*
 * TLS material and sessions (GnuTLS 3.7). Credentials are built from PEM by TypeScript (hot
 * reload = build new ones, use them for new connections); each connection holds a reference, so
 * old material is freed when TypeScript releases it and its last connection has ended.
 *
 * ALPN is whatever TypeScript passes, including nothing: GnuTLS never requires it in QUIC (unlike
 * BoringSSL, which refuses a QUIC handshake without ALPN in both roles), so any ALPN
 * rule is TypeScript's to apply at accept time.
 *
 * No session tickets are issued or used (GNUTLS_NO_TICKETS): a resumed session would skip the
 * certificate checks, and a trust change must apply to every later handshake (SPEC §8).
 */
#include "quic.h"

#include <stdlib.h>

/* TLS 1.3 only, no middlebox compatibility mode (RFC 9001 §8.4). The cipher suites are NORMAL's
   four, with AES-128-GCM (TLS 1.3's mandatory suite, BoringSSL's and Go's first choice) moved
   ahead of AES-256-GCM, and the router's order winning where it is the server: GnuTLS otherwise
   follows the client, and rustls (the Pylon's and the Stargate's stack) asks for AES-256-GCM
   first. A relayed byte is decrypted and encrypted again, and the Pylon and the Stargate each
   encrypt or decrypt it once, so every hop pays for the suite; AES-256 costs 14 rounds a block
   to AES-128's 10 (router CPU per relayed GiB 2.12 -> 2.04 s, medians of 7 interleaved
   runs; docs/benchmarks.md). A peer that offers only AES-256-GCM or ChaCha20 still gets it. */
static const char PRIORITY[] = "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:+AES-128-CCM:%SERVER_PRECEDENCE:%DISABLE_TLS13_COMPAT_MODE";

/* A credential with no material yet; NULL (err set) when out of memory. */
static qcred *cred_alloc(const char **err) {
  qcred *cr = calloc(1, sizeof *cr);
  if (cr != NULL && gnutls_certificate_allocate_credentials(&cr->cred) != 0) {
    free(cr);
    cr = NULL;
  }
  if (cr == NULL) *err = "out of memory";
  return cr;
}

/* Frees a credential that could not be built, with why for the caller; NULL to return. */
static qcred *cred_discard(qcred *cr, const char *why, const char **err) {
  gnutls_certificate_free_credentials(cr->cred);
  free(cr);
  *err = why;
  return NULL;
}

/* A certificate chain and its private key (PEM); -1 when either does not load. */
static int cred_set_key(qcred *cr, const char *cert, size_t certlen, const char *key, size_t keylen) {
  gnutls_datum_t c = {(unsigned char *)cert, (unsigned int)certlen};
  gnutls_datum_t k = {(unsigned char *)key, (unsigned int)keylen};
  return gnutls_certificate_set_x509_key_mem2(cr->cred, &c, &k, GNUTLS_X509_FMT_PEM, NULL, 0) < 0 ? -1 : 0;
}

/* A trust bundle (PEM); -1 when it holds no usable certificate. */
static int cred_set_trust(qcred *cr, const char *ca, size_t calen) {
  gnutls_datum_t a = {(unsigned char *)ca, (unsigned int)calen};
  return gnutls_certificate_set_x509_trust_mem(cr->cred, &a, GNUTLS_X509_FMT_PEM) <= 0 ? -1 : 0;
}

/* A built credential gets its id; TypeScript holds its one reference. */
static qcred *cred_register(qengine *eng, qcred *cr) {
  cr->refs = 1;
  cr->id = engine_new_id(eng);
  qmap_put_u64(&eng->creds, cr->id, cr);
  eng->live_creds++;
  return cr;
}

qcred *cred_new_server(qengine *eng, const char *cert, size_t certlen, const char *key, size_t keylen,
                       const char *ca, size_t calen, const char **err) {
  qcred *cr = cred_alloc(err);
  if (cr == NULL) return NULL;
  if (cred_set_key(cr, cert, certlen, key, keylen) != 0) {
    return cred_discard(cr, "the certificate chain or private key could not be loaded", err);
  }
  if (ca != NULL) {
    if (cred_set_trust(cr, ca, calen) != 0) {
      return cred_discard(cr, "the client CA bundle holds no usable certificate", err);
    }
    cr->verify = 1;
  }
  cr->server = 1;
  return cred_register(eng, cr);
}

qcred *cred_new_client(qengine *eng, const char *ca, size_t calen, int verify,
                       const char *cert, size_t certlen, const char *key, size_t keylen, const char **err) {
  qcred *cr = cred_alloc(err);
  if (cr == NULL) return NULL;
  if (verify && ca != NULL && cred_set_trust(cr, ca, calen) != 0) {
    return cred_discard(cr, "the trust bundle holds no usable certificate", err);
  }
  /* verify without a bundle trusts nothing: every handshake fails verification (never a silent
     fallback to no verification). */
  if (cert != NULL && key != NULL && cred_set_key(cr, cert, certlen, key, keylen) != 0) {
    return cred_discard(cr, "the client certificate chain or private key could not be loaded", err);
  }
  cr->verify = verify;
  return cred_register(eng, cr);
}

void cred_unref(qengine *eng, qcred *cr) {
  if (cr == NULL || --cr->refs > 0) return;
  qmap_del_u64(&eng->creds, cr->id);
  gnutls_certificate_free_credentials(cr->cred);
  free(cr);
  eng->live_creds--;
}

/* GnuTLS 3.7 takes at most 8 protocols (MAX_ALPN_PROTOCOLS) of at most 31 bytes
   (MAX_ALPN_PROTOCOL_NAME - 1) and refuses the whole list beyond either. */
#define ALPN_MAX_PROTOCOLS 8
#define ALPN_MAX_NAME 31

/* ALPN in wire format (length-prefixed names) to GnuTLS datums: the first ALPN_MAX_PROTOCOLS
   names GnuTLS can hold, in order. A client offering more, or longer names, is served from the
   rest of its offer (a server picks from the client's list, so the first names win anyway).
   Returns the count, or -1 when the list is malformed. */
static int alpn_datums(const uint8_t *alpn, size_t alpnlen, gnutls_datum_t *out) {
  int n = 0;
  for (size_t at = 0; at < alpnlen;) {
    size_t len = alpn[at];
    if (len == 0 || at + 1 + len > alpnlen) return -1;
    if (n < ALPN_MAX_PROTOCOLS && len <= ALPN_MAX_NAME) {
      out[n].data = (unsigned char *)alpn + at + 1;
      out[n].size = (unsigned int)len;
      n++;
    }
    at += 1 + len;
  }
  return n;
}

static int session_common(qconn *c, qcred *cr, const uint8_t *alpn, size_t alpnlen) {
  if (gnutls_priority_set_direct(c->session, PRIORITY, NULL) != 0) return -1;
  gnutls_session_set_ptr(c->session, &c->conn_ref);
  if (gnutls_credentials_set(c->session, GNUTLS_CRD_CERTIFICATE, cr->cred) != 0) return -1;
  if (alpnlen > 0) {
    gnutls_datum_t protos[ALPN_MAX_PROTOCOLS];
    int n = alpn_datums(alpn, alpnlen, protos);
    if (n < 0) return -1;
    if (n > 0 && gnutls_alpn_set_protocols(c->session, protos, (unsigned)n, 0) != 0) return -1;
  }
  return 0;
}

int tls_session_server(qconn *c, qcred *cr, const uint8_t *alpn, size_t alpnlen) {
  if (gnutls_init(&c->session, GNUTLS_SERVER | GNUTLS_NO_TICKETS | GNUTLS_NO_END_OF_EARLY_DATA) != 0) return -1;
  if (ngtcp2_crypto_gnutls_configure_server_session(c->session) != 0) return -1;
  if (session_common(c, cr, alpn, alpnlen) != 0) return -1;
  if (cr->verify) {
    /* --client-ca-path (SPEC §12): no valid client certificate, no handshake. */
    gnutls_certificate_server_set_request(c->session, GNUTLS_CERT_REQUIRE);
    gnutls_session_set_verify_cert(c->session, NULL, 0);
  }
  return 0;
}

int tls_session_client(qconn *c, qcred *cr, const char *sni, const uint8_t *alpn, size_t alpnlen) {
  if (gnutls_init(&c->session, GNUTLS_CLIENT | GNUTLS_NO_TICKETS | GNUTLS_NO_END_OF_EARLY_DATA) != 0) return -1;
  if (ngtcp2_crypto_gnutls_configure_client_session(c->session) != 0) return -1;
  if (session_common(c, cr, alpn, alpnlen) != 0) return -1;
  if (sni != NULL) {
    c->sni = strdup(sni);
    if (c->sni == NULL || gnutls_server_name_set(c->session, GNUTLS_NAME_DNS, c->sni, strlen(c->sni)) != 0) return -1;
  }
  /* GnuTLS keeps the hostname pointer (not a copy) for the verification: c->sni lives as long
     as the session. */
  if (cr->verify) gnutls_session_set_verify_cert(c->session, c->sni, 0);
  return 0;
}
