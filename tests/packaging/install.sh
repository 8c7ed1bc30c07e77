#!/bin/sh
# meson install into a temporary DESTDIR, then check what a packager gets: the systemd unit
# (that systemd-analyze verify accepts it, its security exposure, its CacheDirectory=), the
# sysusers.d entry, the sample configuration, the man pages, an accel.pc whose Cflags name no
# OpenBLAS path, and the Python package (meson install and pip install).
#   install.sh BUILD_DIR [PYTHON [SANITIZERS]]
set -u
build=$1
python=${2:-python3}
sanitize=${3:-none}
fail=0
dest=$(mktemp -d) || exit 1
trap 'rm -rf "$dest"' EXIT

ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
# The one file under $dest whose path matches the pattern, or nothing.
find_one() { find "$dest" -path "$1" -type f | head -n 1; }

if ! meson install -C "$build" --destdir "$dest" --no-rebuild --quiet >"$dest.log" 2>&1; then
  cat "$dest.log"; rm -f "$dest.log"
  echo "FAIL: meson install"; exit 1
fi
rm -f "$dest.log"

unit=$(find_one '*/systemd/system/acceld.service')
[ -n "$unit" ] && ok "unit ${unit#"$dest"}" || bad "no acceld.service under systemd/system"
sysusers=$(find_one '*/sysusers.d/acceld.conf')
if [ -n "$sysusers" ] && grep -q '^g accel ' "$sysusers"; then
  ok "sysusers ${sysusers#"$dest"}"
else
  bad "no sysusers.d/acceld.conf creating group accel"
fi
conf=$(find_one '*/etc/acceld/acceld.conf')
[ -n "$conf" ] && ok "config ${conf#"$dest"}" || bad "no etc/acceld/acceld.conf"

if command -v scdoc >/dev/null 2>&1; then
  for page in man8/acceld.8 man1/accelctl.1 man3/accel.3; do
    f=$(find_one "*/man/$page")
    [ -n "$f" ] && ok "man ${f#"$dest"}" || bad "no $page"
  done
else
  echo "SKIP: no scdoc, no man pages to check"
fi

if [ -n "$unit" ]; then
  grep -q '^Documentation=man:acceld(8)$' "$unit" && ok "Documentation=man:acceld(8)" ||
    bad "Documentation= is not man:acceld(8)"
  grep -q '@[a-z]*@' "$unit" && bad "unsubstituted @...@ in the unit"
  # The kernel cache: under DynamicUser= and ProtectSystem=strict the only writable place for
  # it is the unit's CacheDirectory= (acceld reads $CACHE_DIRECTORY, tests/packaging/cache_dir.c)
  grep -q '^CacheDirectory=accel$' "$unit" && ok "CacheDirectory=accel" ||
    bad "no CacheDirectory=accel: the service could not keep built kernels"
  exec_path=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit")
  [ -x "$dest$exec_path" ] && ok "ExecStart=$exec_path installed" ||
    bad "ExecStart=$exec_path is not installed"
  if command -v systemd-analyze >/dev/null 2>&1; then
    # A copy whose ExecStart= names the acceld in DESTDIR (verify wants it executable); the man
    # page is checked above, so --man=no.
    mkdir "$dest/verify"
    sed "s|^ExecStart=$exec_path|ExecStart=$dest$exec_path|" "$unit" >"$dest/verify/acceld.service"
    # systemd only warns about a bad directive (status 0): any output fails too.
    if out=$(systemd-analyze verify --man=no "$dest/verify/acceld.service" 2>&1) &&
      [ -z "$out" ]; then
      ok "systemd-analyze verify"
    else
      echo "$out"; bad "systemd-analyze verify"
    fi
    # The sandbox's exposure score (0 safest, 10 none) stays at 2.1 or below (--threshold is in
    # tenths; --offline needs systemd 250).
    if out=$(systemd-analyze security --offline=true --threshold=21 \
        "$dest/verify/acceld.service" 2>&1); then
      ok "systemd-analyze security: $(echo "$out" | sed -n 's/.*exposure level for [^:]*: //p')"
    elif echo "$out" | grep -q 'unrecognized option'; then
      echo "SKIP: systemd-analyze security --offline (systemd < 250)"
    else
      echo "$out" | tail -n 3; bad "systemd-analyze security: above 2.1"
    fi
  else
    echo "SKIP: no systemd-analyze"
  fi
fi

pc=$(find_one '*/pkgconfig/accel.pc')
if [ -z "$pc" ]; then
  bad "no accel.pc"
elif ! command -v pkg-config >/dev/null 2>&1; then
  echo "SKIP: no pkg-config"
else
  cflags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags accel 2>&1)
  case $cflags in
    *openblas*|*"Package "*) bad "pkg-config --cflags accel: $cflags" ;;
    *) ok "pkg-config --cflags accel: $cflags" ;;
  esac
fi

# The Python package: installed by meson next to the library, with _paths.py naming where
# libaccel went; and installable with pip from clients/python (into a target directory, built
# offline by Debian's setuptools). Both import and call libaccel.
src=$(cd "$(dirname "$0")/../.." && pwd)
lib=$(find "$dest" -name 'libaccel.so.0' | head -n 1)
init=$(find_one '*/accel/__init__.py')
if [ "$python" = none ]; then
  echo "SKIP: the Python package is not built (-Dpython=disabled, or no python3)"
elif [ -z "$init" ]; then
  bad "no accel/__init__.py (the Python package) installed"
else
  site=$(dirname "$(dirname "$init")")
  # PEP 561: the marker that tells type checkers to read the package's annotations
  [ -f "$site/accel/py.typed" ] && ok "accel/py.typed installed" || bad "no accel/py.typed"
  # Where the prefix has a directory on the interpreter's own path (/usr/local on Debian),
  # the package goes there: `import accel` then needs no PYTHONPATH.
  prefix=$(meson introspect --buildoptions "$build" |
    "$python" -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
  want=$("$python" "$src/clients/python/site_dir.py" "$prefix")
  if [ -n "$want" ]; then
    [ "${site#"$dest"}" = "$want" ] && ok "python package in $want, on python3's own path" ||
      bad "python package in ${site#"$dest"}, not $want (on python3's path)"
  fi
  libdir=$(sed -n 's/^LIBDIR = "\(.*\)"$/\1/p' "$site/accel/_paths.py" 2>/dev/null)
  [ -n "$lib" ] && [ "$dest$libdir/libaccel.so.0" = "$lib" ] &&
    ok "python package ${site#"$dest"}, _paths.LIBDIR=$libdir" ||
    bad "accel/_paths.py LIBDIR '$libdir' is not where libaccel.so.0 went (${lib#"$dest"})"
  if [ "$sanitize" != none ]; then  # python3 would need the sanitizer runtime preloaded
    echo "SKIP: importing the package against a $sanitize build of libaccel"
  else
    v=$(ACCEL_LIBRARY=$lib PYTHONPATH=$site "$python" -c 'import accel; print(accel.__version__)' 2>&1)
    [ "$v" = "$(meson introspect --projectinfo "$build" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["version"])')" ] &&
      ok "import accel (meson install): $v" || bad "import accel (meson install): $v"
  fi
fi
if [ "$python" = none ] || [ "$sanitize" != none ]; then
  :
elif "$python" -m pip --version >/dev/null 2>&1; then
  cp -r "$src/clients/python" "$dest/pysrc"
  if out=$("$python" -m pip install --quiet --no-build-isolation --no-deps --no-index \
      --target "$dest/pip" "$dest/pysrc" 2>&1); then
    v=$(ACCEL_LIBRARY=$lib PYTHONPATH=$dest/pip "$python" -c \
      'import accel, numpy; c = accel.open("embedded:?backends=cpu"); a = c.asarray(numpy.ones(3)); print(accel.dot(a, a).result()); c.close()' 2>&1)
    [ "$v" = "3.0" ] && ok "pip install clients/python: dot = $v" ||
      bad "pip install clients/python, then using it: $v"
    [ -f "$dest/pip/accel/py.typed" ] && ok "pip install clients/python: py.typed" ||
      bad "pip install clients/python: no accel/py.typed"
  else
    echo "$out"; bad "pip install clients/python"
  fi
else
  bad "no pip (python3-pip) to check pip install clients/python"
fi

[ "$fail" = 0 ] && echo "packaging: all checks passed"
exit "$fail"
