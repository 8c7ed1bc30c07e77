/* [metrics] listen (and --metrics), parsed: where acceld's HTTP endpoint listens.
 *
 * The forms: PORT, :PORT, http://:PORT, http://HOST:PORT, http://[IPV6]:PORT, each with an
 * optional trailing '/'. With no host the endpoint is bound to 127.0.0.1: the endpoint has no
 * authentication, so the default reaches no one else. A host given is honoured, wildcards
 * (0.0.0.0, [::], *) included: the operator asked for it (server_http.c logs a warning).
 * Read by daemon/config.c when the configuration is read, and by the server when it binds.
 * Pure: no lookups here (a name is resolved at bind time). */
#include <string.h>

#include "server/server.h"

/* A decimal port, 1 to 65535, running to the end of s or a single '/'. */
static bool parse_port(const char *s, uint16_t *port) {
  unsigned long n = 0;
  size_t i = 0;
  for (; s[i] >= '0' && s[i] <= '9' && i < 6; i++)
    n = n * 10 + (unsigned long)(s[i] - '0');
  if (i == 0 || n == 0 || n > 65535 || !(s[i] == '\0' || (s[i] == '/' && s[i + 1] == '\0')))
    return false;
  *port = (uint16_t)n;
  return true;
}

static bool host_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' ||
         c == '-' || c == '_' || c == '*';
}

/* HOST or [IPV6] before ":PORT" at the end. */
static bool parse_host(const char *s, srv_http_addr *out) {
  const char *colon;
  size_t n;
  if (s[0] == '[') {
    const char *close = strchr(s, ']');
    if (close == NULL || close[1] != ':' || close == s + 1)
      return false;
    colon = close + 1;
    n = (size_t)(close - s - 1);
    if (strspn(s + 1, "0123456789abcdefABCDEF:.") < n)
      return false;
    s++;
  } else {
    colon = strrchr(s, ':');
    if (colon == NULL)
      return false;
    n = (size_t)(colon - s);
    for (size_t i = 0; i < n; i++)
      if (!host_char(s[i]))
        return false;
    if (n > 0 && memchr(s, '*', n) != NULL && n != 1)
      return false; /* '*' alone, or not at all */
  }
  if (n >= sizeof out->host || !parse_port(colon + 1, &out->port))
    return false;
  memcpy(out->host, s, n);
  out->host[n] = '\0';
  return true;
}

int srv_http_addr_parse(const char *url, srv_http_addr *out) {
  srv_http_addr a = {.host = ""};
  bool ok;
  if (url == NULL)
    ok = false;
  else if (strncmp(url, "http://", 7) == 0)
    ok = parse_host(url + 7, &a);
  else if (url[0] == ':')
    ok = parse_port(url + 1, &a.port);
  else
    ok = parse_port(url, &a.port);
  if (!ok)
    return ACCEL_EINVAL;
  *out = a;
  return 0;
}
