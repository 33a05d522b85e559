#include "map.h"

#include <stdlib.h>
#include <string.h>
#include <gnutls/crypto.h>

static uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

static uint64_t hash(const qmap *m, const uint8_t *key, size_t len) {
  uint64_t h = m->seed ^ (len * 0x9e3779b97f4a7c15ULL);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    memcpy(&w, key + i, 8);
    h = mix(h ^ w) + 0x9e3779b97f4a7c15ULL;
  }
  uint64_t tail = 0;
  memcpy(&tail, key + i, len - i);
  return mix(h ^ tail ^ m->seed);
}

void qmap_init(qmap *m) {
  m->slots = NULL;
  m->cap = 0;
  m->used = 0;
  m->tombs = 0;
  if (gnutls_rnd(GNUTLS_RND_NONCE, &m->seed, sizeof m->seed) != 0) m->seed = (uint64_t)(uintptr_t)m * 0x9e3779b97f4a7c15ULL;
}

void qmap_free(qmap *m) {
  free(m->slots);
  m->slots = NULL;
  m->cap = m->used = m->tombs = 0;
}

static qmap_slot *find(const qmap *m, const uint8_t *key, size_t len) {
  if (m->cap == 0) return NULL;
  size_t mask = m->cap - 1;
  size_t i = (size_t)hash(m, key, len) & mask;
  for (size_t n = 0; n < m->cap; n++, i = (i + 1) & mask) {
    qmap_slot *s = &m->slots[i];
    if (s->state == 0) return NULL;
    if (s->state == 1 && s->len == len && memcmp(s->key, key, len) == 0) return s;
  }
  return NULL;
}

void *qmap_get(const qmap *m, const void *key, size_t len) {
  if (len > QMAP_KEYMAX) return NULL;
  qmap_slot *s = find(m, key, len);
  return s == NULL ? NULL : s->val;
}

static int grow(qmap *m, size_t cap) {
  qmap_slot *old = m->slots;
  size_t oldcap = m->cap;
  qmap_slot *slots = calloc(cap, sizeof *slots);
  if (slots == NULL) return -1;
  m->slots = slots;
  m->cap = cap;
  m->used = 0;
  m->tombs = 0;
  for (size_t i = 0; i < oldcap; i++) {
    if (old[i].state != 1) continue;
    size_t mask = cap - 1;
    size_t j = (size_t)hash(m, old[i].key, old[i].len) & mask;
    while (slots[j].state != 0) j = (j + 1) & mask;
    slots[j] = old[i];
    m->used++;
  }
  free(old);
  return 0;
}

int qmap_put(qmap *m, const void *key, size_t len, void *val) {
  if (len > QMAP_KEYMAX) return -1;
  qmap_slot *s = find(m, key, len);
  if (s != NULL) {
    s->val = val;
    return 0;
  }
  /* Keep the load (live + deleted) under 1/2 so probes stay short for any key. */
  if ((m->used + m->tombs + 1) * 2 > m->cap) {
    size_t cap = m->cap == 0 ? 16 : m->cap;
    while ((m->used + 1) * 4 > cap) cap *= 2;
    if (cap < 16) cap = 16;
    if (grow(m, cap) != 0) return -1;
  }
  size_t mask = m->cap - 1;
  size_t i = (size_t)hash(m, key, len) & mask;
  while (m->slots[i].state == 1) i = (i + 1) & mask;
  if (m->slots[i].state == 2) m->tombs--;
  m->slots[i].state = 1;
  m->slots[i].len = (uint8_t)len;
  memcpy(m->slots[i].key, key, len);
  m->slots[i].val = val;
  m->used++;
  return 0;
}

void *qmap_del(qmap *m, const void *key, size_t len) {
  if (len > QMAP_KEYMAX) return NULL;
  qmap_slot *s = find(m, key, len);
  if (s == NULL) return NULL;
  void *val = s->val;
  s->state = 2;
  s->val = NULL;
  m->used--;
  m->tombs++;
  /* Shrink (and drop tombstones) once mostly empty, so a burst does not pin memory. */
  if (m->cap > 64 && m->used * 8 < m->cap) {
    size_t cap = 16;
    while ((m->used + 1) * 4 > cap) cap *= 2;
    grow(m, cap);
  } else if (m->tombs * 4 > m->cap) {
    grow(m, m->cap);
  }
  return val;
}
