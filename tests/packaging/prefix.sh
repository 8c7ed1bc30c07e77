#!/bin/sh
# Where `meson install` puts files, for three fresh configurations of the source tree (meson
# setup and `meson introspect --installed`: a second each, nothing built or installed):
#   --prefix=$HOME-like   every installed file under the prefix (a normal user's install);
#   --prefix=/usr         the unit and the sysusers.d entry where systemd.pc says (when it is
#                         found), the rest under /usr or /etc;
#   -Dsystemdsystemunitdir=DIR -Dsysusersdir=DIR   those two there, whatever the prefix.
#   prefix.sh SOURCE_DIR
set -u
src=$1
fail=0
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

# setup NAME MESON_ARGS...: configures $tmp/NAME (only what installs: no tests, no optional
# backends) and writes the installed paths, one a line, to $tmp/NAME.paths.
setup() {
  name=$1
  shift
  if ! meson setup "$@" -Dtests=false -Dbenchmarks=false -Dcuda=disabled -Dopencl=disabled \
    -Dstarpu=disabled "$tmp/$name" "$src" >"$tmp/$name.log" 2>&1; then
    cat "$tmp/$name.log"
    bad "meson setup $*"
    return 1
  fi
  meson introspect --installed "$tmp/$name" |
    python3 -c 'import json, sys; print("\n".join(sorted(json.load(sys.stdin).values())))' \
      >"$tmp/$name.paths"
}

# installed NAME PATTERN: the installed path of NAME's configuration that ends so (grep -E).
installed() { grep -E "$2\$" "$tmp/$1.paths" | head -n 1; }

home=$tmp/home/user/accel
if setup home --prefix="$home"; then
  outside=$(grep -v "^$home/" "$tmp/home.paths")
  if [ -z "$outside" ]; then
    ok "--prefix=$home: all $(wc -l <"$tmp/home.paths") installed files under the prefix"
  else
    bad "--prefix=$home installs outside the prefix:
$outside"
  fi
  [ "$(installed home /acceld.service)" = "$home/lib/systemd/system/acceld.service" ] &&
    ok "unit in PREFIX/lib/systemd/system" || bad "unit: $(installed home /acceld.service)"
fi

if setup usr --prefix=/usr; then
  unit=$(installed usr /acceld.service)
  sysusers=$(installed usr /sysusers.d/acceld.conf)
  if pkg-config --exists systemd 2>/dev/null; then
    want_unit=$(pkg-config --variable=systemdsystemunitdir systemd)/acceld.service
    want_sysusers=$(pkg-config --variable=sysusersdir systemd)/acceld.conf
  else
    want_unit=/usr/lib/systemd/system/acceld.service
    want_sysusers=/usr/lib/sysusers.d/acceld.conf
  fi
  [ "$unit" = "$want_unit" ] && ok "--prefix=/usr: unit $unit" ||
    bad "--prefix=/usr: unit '$unit', not '$want_unit'"
  [ "$sysusers" = "$want_sysusers" ] && ok "--prefix=/usr: sysusers $sysusers" ||
    bad "--prefix=/usr: sysusers '$sysusers', not '$want_sysusers'"
  others=$(grep -v -e '^/usr/' -e '^/etc/' -e "^$unit\$" -e "^$sysusers\$" "$tmp/usr.paths")
  [ -z "$others" ] && ok "--prefix=/usr: the rest under /usr and /etc" ||
    bad "--prefix=/usr installs elsewhere:
$others"
fi

if setup dirs --prefix="$home" -Dsystemdsystemunitdir=/srv/units -Dsysusersdir=/srv/sysusers; then
  [ "$(installed dirs /acceld.service)" = /srv/units/acceld.service ] &&
    [ "$(installed dirs /sysusers.d/acceld.conf)" = "" ] &&
    [ "$(installed dirs /srv/sysusers/acceld.conf)" = /srv/sysusers/acceld.conf ] &&
    ok "-Dsystemdsystemunitdir, -Dsysusersdir are obeyed" ||
    bad "-Dsystemdsystemunitdir, -Dsysusersdir: $(grep /srv/ "$tmp/dirs.paths")"
fi

[ "$fail" = 0 ] && echo "packaging prefix: all checks passed"
exit "$fail"
