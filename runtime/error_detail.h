/* The calling thread's last error detail, as accel_last_error_detail() returns it
 * (include/accel/error.h): code that makes an error records, in words, what the code alone
 * cannot say (which argument or address, which values, which system call and errno). Any
 * layer may use it; it is per thread, so a failure made on one thread is read on that thread
 * (acceld's start-up runs on its main thread; libaccel's accel_open on the caller's). */
#ifndef RT_ERROR_DETAIL_H
#define RT_ERROR_DETAIL_H

/* Records the printf-formatted detail (cut at 511 bytes) and returns `err`, so that
 * `return rt_error_detail(ACCEL_ECLOSED, "no acceld at %s (connect: %s)", url, why);` makes
 * the error and says why in one place. */
__attribute__((format(printf, 2, 3))) int rt_error_detail(int err, const char *fmt, ...);

/* Forgets the detail: a call that records one clears it first, so a failure that had nothing
 * to add never shows an older failure's words. */
void rt_error_detail_clear(void);

#endif
