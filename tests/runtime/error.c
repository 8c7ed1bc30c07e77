/* The error table: every code's value, name and message; success; unknown codes. */
#include <limits.h>

#include "../test.h"

typedef struct expected_code {
  int value;
  const char *name;
} expected_code;

/* Written out by hand on purpose: codes travel on the wire, so a renumbering must fail here. */
static const expected_code stable_codes[] = {
    {-1, "EINVAL"},     {-2, "ESTALE"},   {-3, "ENOMEM"},    {-4, "ETIMEDOUT"}, {-5, "EAGAIN"},
    {-6, "EBUSY"},      {-7, "EDEVLOST"}, {-8, "EDATALOST"}, {-9, "ENOTSUP"},   {-10, "EPERM"},
    {-11, "ECANCELED"}, {-12, "ECLOSED"}, {-13, "EDEADLK"},  {-14, "EALREADY"}, {-15, "ELIMIT"},
    {-16, "EFAILED"},   {-17, "EPROTO"},  {-18, "EIO"},      {-19, "ENOENT"},   {-20, "ESYS"},
    {-21, "EBUILD"},
};
enum { N_CODES = sizeof stable_codes / sizeof stable_codes[0] };

TEST(every_code_has_its_name_and_message) {
#define CHECK_ONE_(name, value, msg)                                                               \
  CHECK_EQ(ACCEL_##name, value);                                                                   \
  CHECK_STR_EQ(accel_err_name(value), #name);                                                      \
  CHECK_STR_EQ(accel_strerror(value), msg);
  ACCEL_ERRNO_MAP(CHECK_ONE_)
#undef CHECK_ONE_
}

TEST(codes_keep_their_wire_values) {
  for (int i = 0; i < N_CODES; i++) {
    CHECK_STR_EQ(accel_err_name(stable_codes[i].value), stable_codes[i].name);
    CHECK(strcmp(accel_strerror(stable_codes[i].value), "unknown error") != 0);
  }
  CHECK_EQ(ACCEL_EINVAL, -1);
  CHECK_EQ(ACCEL_EBUSY, -6);
  CHECK_EQ(ACCEL_ESYS, -20);
  CHECK_EQ(ACCEL_EBUILD, -21);
  CHECK_EQ(ACCEL_ERRNO_MIN_, -22);
}

static int count_codes(void) {
  int n = 0;
#define COUNT_ONE_(name, value, msg) n++;
  ACCEL_ERRNO_MAP(COUNT_ONE_)
#undef COUNT_ONE_
  return n;
}

TEST(table_is_dense_negative_and_above_min) {
  CHECK_EQ(count_codes(), N_CODES);
  for (int v = -1; v > ACCEL_ERRNO_MIN_; v--) {
    CHECK(strcmp(accel_err_name(v), "UNKNOWN") != 0);
    CHECK(strcmp(accel_strerror(v), "unknown error") != 0);
  }
}

TEST(messages_and_names_are_distinct) {
  for (int a = -1; a > ACCEL_ERRNO_MIN_; a--)
    for (int b = a - 1; b > ACCEL_ERRNO_MIN_; b--) {
      CHECK(strcmp(accel_err_name(a), accel_err_name(b)) != 0);
      CHECK(strcmp(accel_strerror(a), accel_strerror(b)) != 0);
    }
}

TEST(success_is_ok) {
  CHECK_STR_EQ(accel_strerror(0), "success");
  CHECK_STR_EQ(accel_err_name(0), "OK");
}

TEST(unknown_codes_say_unknown) {
  static const int unknown[] = {ACCEL_ERRNO_MIN_, -22,     -100,       -1000, 1, 2, 6, 1000,
                                INT_MIN,          INT_MAX, INT_MIN + 1};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    CHECK_STR_EQ(accel_strerror(unknown[i]), "unknown error");
    CHECK_STR_EQ(accel_err_name(unknown[i]), "UNKNOWN");
  }
}

TEST(strings_are_static) {
  const char *first = accel_strerror(ACCEL_EBUSY);
  (void)accel_strerror(ACCEL_EINVAL);
  CHECK_PTR_EQ(accel_strerror(ACCEL_EBUSY), first);
  CHECK_PTR_EQ(accel_err_name(ACCEL_ESTALE), accel_err_name(ACCEL_ESTALE));
}

static const test_case tests[] = {
    TEST_CASE(every_code_has_its_name_and_message),
    TEST_CASE(codes_keep_their_wire_values),
    TEST_CASE(table_is_dense_negative_and_above_min),
    TEST_CASE(messages_and_names_are_distinct),
    TEST_CASE(success_is_ok),
    TEST_CASE(unknown_codes_say_unknown),
    TEST_CASE(strings_are_static),
};

TEST_MAIN(tests)
