/*
 * A small open-addressing hash map from byte keys (at most 20 bytes: a QUIC connection ID, an
 * address, an integer) to pointers. The hash is keyed with a random seed: connection IDs in
 * Initials and source addresses are chosen by whoever sends the datagram, so an unkeyed hash
 * would let a sender pick colliding keys.
 */
#ifndef STARGATE_QUIC_MAP_H
#define STARGATE_QUIC_MAP_H

#include <stdint.h>
#include <stddef.h>

#define QMAP_KEYMAX 20

typedef struct qmap_slot {
  void *val;
  uint8_t state; /* 0 empty, 1 used, 2 deleted */
  uint8_t len;
  uint8_t key[QMAP_KEYMAX];
} qmap_slot;

typedef struct qmap {
  qmap_slot *slots;
  size_t cap;   /* power of two */
  size_t used;
  size_t tombs;
  uint64_t seed;
} qmap;

void qmap_init(qmap *m);
void qmap_free(qmap *m);
void *qmap_get(const qmap *m, const void *key, size_t len);
/* Returns 0, or -1 when out of memory. Replaces an existing value. */
int qmap_put(qmap *m, const void *key, size_t len, void *val);
void *qmap_del(qmap *m, const void *key, size_t len);

static inline void *qmap_get_u64(const qmap *m, uint64_t k) { return qmap_get(m, &k, sizeof k); }
static inline int qmap_put_u64(qmap *m, uint64_t k, void *v) { return qmap_put(m, &k, sizeof k, v); }
static inline void *qmap_del_u64(qmap *m, uint64_t k) { return qmap_del(m, &k, sizeof k); }

#define QMAP_EACH(m, i) for (size_t i = 0; i < (m)->cap; i++) if ((m)->slots[i].state == 1)

#endif
