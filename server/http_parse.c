/* The request head of acceld's HTTP endpoint, parsed strictly and minimally (RFC 9112).
 *
 * Why our own parser: the endpoint answers GET and HEAD of two paths and closes the
 * connection after every response, so all it needs of a request is its request line and
 * where its head ends: no bodies, no chunking, no keep-alive, no header values. Debian 12
 * packages only the archived http-parser 2.9 (unmaintained upstream); llhttp and
 * picohttpparser are not packaged there. This file accepts the few forms real clients send
 * and refuses everything else with 400: a method that is not a token, more than one space
 * between the parts, a target that is not origin-form or absolute-form (for GET and HEAD),
 * a version other than HTTP/1.x (505 for a well-formed one), a bare CR, control bytes, a
 * header line that is not `token:value`, and obs-fold (a line starting with a space).
 * The Host header is not required: the endpoint serves one site.
 *
 * Pure functions over bytes: the tests feed them malformed heads directly. */
#include <string.h>
#include <strings.h>

#include "server/http_priv.h"

/* RFC 9110 5.6.2: token characters. */
static bool tchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
    return true;
  return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Where the request line starts: RFC 9112 2.2 lets a server skip empty lines before it. */
static size_t head_start(const char *buf, size_t len) {
  size_t i = 0;
  while (i < len && (buf[i] == '\r' || buf[i] == '\n'))
    i++;
  return i;
}

size_t http_head_end(const char *buf, size_t len, size_t from) {
  size_t start = head_start(buf, len);
  size_t i = from > start + 2 ? from - 2 : start; /* a terminator may straddle two reads */
  for (; i < len; i++) {
    if (buf[i] != '\n')
      continue;
    if (i + 1 < len && buf[i + 1] == '\n')
      return i + 2;
    if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
      return i + 3;
  }
  return 0;
}

/* The next line of [*p, end): its length without CRLF or LF, *p past it; -1 for a bare CR
 * or a line with no end. */
static long next_line(const char **p, const char *end, const char **line) {
  const char *nl = memchr(*p, '\n', (size_t)(end - *p));
  if (nl == NULL)
    return -1;
  const char *e = nl > *p && nl[-1] == '\r' ? nl - 1 : nl;
  if (memchr(*p, '\r', (size_t)(e - *p)) != NULL)
    return -1;
  *line = *p;
  *p = nl + 1;
  return (long)(e - *line);
}

/* The part of the line up to the next space (none: the rest); *at past the space. */
static size_t part(const char *line, size_t len, size_t *at) {
  const char *sp = memchr(line + *at, ' ', len - *at);
  size_t n = sp ? (size_t)(sp - (line + *at)) : len - *at;
  *at += n + (sp != NULL);
  return n;
}

static int parse_version(const char *v, size_t n) {
  if (n != 8 || memcmp(v, "HTTP/", 5) != 0 || v[6] != '.' || v[5] < '0' || v[5] > '9' ||
      v[7] < '0' || v[7] > '9')
    return 400;
  return v[5] == '1' && (v[7] == '0' || v[7] == '1') ? 0 : 505;
}

/* origin-form (/path?query) or absolute-form (http://authority/path?query): the path. */
static bool parse_target(const char *t, size_t n, http_request *req) {
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
      return false;
  size_t skip = n >= 7 && !strncasecmp(t, "http://", 7)    ? 7
                : n >= 8 && !strncasecmp(t, "https://", 8) ? 8
                                                           : 0;
  if (skip > 0) {
    const char *slash = memchr(t + skip, '/', n - skip);
    size_t at = slash ? (size_t)(slash - t) : n;
    t += at;
    n -= at;
    if (n == 0) { /* http://host alone: the root */
      t = "/";
      n = 1;
    }
  }
  if (n == 0 || t[0] != '/')
    return false;
  const char *q = memchr(t, '?', n);
  req->path = t;
  req->path_len = q ? (size_t)(q - t) : n;
  return true;
}

static int parse_request_line(const char *line, size_t len, http_request *req) {
  size_t at = 0, mlen = part(line, len, &at);
  size_t tstart = at, tlen = part(line, len, &at);
  size_t vstart = at, vlen = len - at;
  if (mlen == 0 || tlen == 0 || vstart >= len || memchr(line + vstart, ' ', vlen) != NULL)
    return 400;
  for (size_t i = 0; i < mlen; i++)
    if (!tchar((unsigned char)line[i]))
      return 400;
  req->method = mlen == 3 && !memcmp(line, "GET", 3)    ? HTTP_GET
                : mlen == 4 && !memcmp(line, "HEAD", 4) ? HTTP_HEAD
                                                        : HTTP_OTHER;
  int rc = parse_version(line + vstart, vlen);
  if (rc != 0)
    return rc;
  if (!parse_target(line + tstart, tlen, req) && req->method != HTTP_OTHER)
    return 400; /* another method's target does not matter: it gets 405 */
  return 0;
}

/* `name: value`: a token, a colon, then visible bytes, spaces, tabs or obs-text. */
static bool header_line_ok(const char *line, size_t len) {
  size_t i = 0;
  while (i < len && tchar((unsigned char)line[i]))
    i++;
  if (i == 0 || i == len || line[i] != ':')
    return false;
  for (i++; i < len; i++) {
    unsigned char c = (unsigned char)line[i];
    if ((c < 0x20 && c != '\t') || c == 0x7f)
      return false;
  }
  return true;
}

int http_request_parse(const char *head, size_t len, http_request *req) {
  const char *p = head + head_start(head, len), *end = head + len, *line;
  *req = (http_request){.method = HTTP_OTHER};
  long n = next_line(&p, end, &line);
  if (n <= 0)
    return 400;
  int rc = parse_request_line(line, (size_t)n, req);
  while (rc == 0 && (n = next_line(&p, end, &line)) > 0)
    if (!header_line_ok(line, (size_t)n))
      rc = 400;
  return rc != 0 ? rc : n == 0 && p == end ? 0 : 400;
}
