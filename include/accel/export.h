/* accel — symbol export. The library builds with hidden visibility by default; only what is
 * marked ACCEL_API is part of the public ABI. */
#ifndef ACCEL_EXPORT_H
#define ACCEL_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define ACCEL_API __attribute__((visibility("default")))
#else
#define ACCEL_API
#endif

#endif
