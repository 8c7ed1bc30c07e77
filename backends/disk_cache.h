/* A disk cache of built code, shared by the backends (OpenCL programs, user kernels).
 *
 * Files live in $ACCEL_CACHE_DIR, else $CACHE_DIRECTORY (systemd's CacheDirectory=: acceld's
 * unit sets it), else $XDG_CACHE_HOME/accel, else $HOME/.cache/accel (made on the first write,
 * mode 0700), one per entry, named "<kind>-<key as 16 hex digits>.bin". A
 * file holds a header (magic, payload length, FNV-1a hash of the payload) and the payload.
 * Files are written whole to a temporary file and renamed into place, so a concurrent reader,
 * in this process or another, never sees half a file; one that is missing, short, too long or
 * whose hash does not match is a miss. The cache is an optimisation only: an entry that cannot
 * be written is a missed saving, never an error.
 *
 * Keys are 64-bit hashes of everything the entry depends on (be_cache_hash); a caller that
 * cannot afford a collision stores what it hashed inside the payload and compares it on read.
 * All functions are thread-safe and may block on the file system (worker threads only).
 */
#ifndef BE_DISK_CACHE_H
#define BE_DISK_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/attr.h"

/* The start value of be_cache_hash (FNV-1a's offset basis). */
#define BE_CACHE_HASH_INIT 0xcbf29ce484222325ull

/* The largest payload the cache stores or reads back. */
#define BE_CACHE_MAX ((size_t)256 << 20)

/* FNV-1a, 64 bits: h updated with n bytes at p (chain calls to hash several pieces). */
uint64_t be_cache_hash(uint64_t h, const void *p, size_t n);

/* The file of (kind, key), whether or not it exists: 0, or ACCEL_ENOENT if no directory can
 * be named (none of the variables above is set) or the path does not fit in len. kind is a
 * short name of letters, digits and '-' ("opencl", "cuda"). */
RT_MUST_USE int be_cache_path(const char *kind, uint64_t key, char *buf, size_t len);

/* The payload of a valid entry in *data (malloc'd: the caller frees it) and its length: 0, or
 * ACCEL_ENOENT on a miss (no such file, an invalid one, no memory to read it into). */
RT_MUST_USE int be_cache_read(const char *kind, uint64_t key, void **data, size_t *len);

/* Stores len bytes (at most BE_CACHE_MAX) as the entry of (kind, key), replacing any. Best
 * effort: failures are silent. */
void be_cache_write(const char *kind, uint64_t key, const void *data, size_t len);

#endif
