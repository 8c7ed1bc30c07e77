/* Compiler attributes for accel's internal headers (never the public ones: a user's -Werror
 * build must not break on a new warning of ours). The lowest layer: any folder may include
 * it; it includes nothing. */
#ifndef RT_ATTR_H
#define RT_ATTR_H

/* A result the caller must look at: an error code that would otherwise be lost, or memory
 * that would leak. GCC does not let a (void) cast silence it: a deliberate ignore is an if
 * with a comment saying why. */
#define RT_MUST_USE __attribute__((warn_unused_result))

#endif
