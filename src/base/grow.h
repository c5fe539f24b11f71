/* grow.h — growing a malloc'd array geometrically (amortised appends). */
#ifndef CW_GROW_H
#define CW_GROW_H

#include <stddef.h>

/* Makes *p hold at least `need` elements of `elem` bytes: doubles *cap
 * (from 64) until it does, reallocating *p. 0, or -1 (out of memory; *p and
 * *cap unchanged). */
int cw_grow(void **p, size_t *cap, size_t need, size_t elem);

#endif
