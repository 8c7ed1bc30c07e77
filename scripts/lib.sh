# shellcheck shell=bash
# Helpers shared by the scripts in scripts/ and by .ci/run. Source this file; don't run it.
#
# Everything here assumes `set -euo pipefail` in the caller.

ACCEL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export ACCEL_ROOT

# The Debian 12 packages needed to build, test and demo accel: the one list. When code starts
# to need a new package, add it here and scripts/deps, scripts/test and scripts/demo pick it up.
ACCEL_DEPS=(
  # toolchain
  build-essential meson ninja-build pkg-config
  # libraries: event loop, transport, BLAS, config, systemd, StarPU, OpenCL
  libuv1-dev
  libnng-dev nng-utils
  # mbedTLS (nng's TLS): bench-daemon measures its cipher, the floor of tls+tcp:// transfers
  libmbedtls-dev
  libopenblas-dev
  libinih-dev
  libsystemd-dev
  libstarpu-dev
  ocl-icd-opencl-dev pocl-opencl-icd libclblast-dev
  # packaging: the man pages (scdoc), systemd.pc and systemd-analyze for the install test
  scdoc systemd
  # test tools: clang and its sanitizer runtimes, valgrind, python for the test summaries,
  # the openssl CLI for the TLS tests' throwaway certificates
  clang libclang-rt-14-dev
  valgrind
  # Debian's reference BLAS: tests/backends/foreign_blas.c links it ahead of OpenBLAS
  libblas3
  python3
  # the Python package: numpy, and pytest for its tests (mypy: tests/python/test_typing.py
  # checks the package's annotations)
  python3-numpy python3-pytest python3-hypothesis python3-mypy python3-pip python3-setuptools
  python3-wheel
  # a real terminal for the test of `accelctl top`
  tmux
  openssl
  # the C formatting check (scripts/check-format; .clang-format is for Debian 12's version 14)
  clang-format
)

# ---- output -------------------------------------------------------------------------------

say() { printf '%s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}

# A banner that stands out in a long log.
banner() {
  local line='=========================================================================='
  printf '\n%s\n== %s\n%s\n' "$line" "$*" "$line"
}

# Prints a command, then runs it.
run() {
  printf '+ %s\n' "$*"
  "$@"
}

cpu_count() { nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1; }

# ---- dependencies -------------------------------------------------------------------------

# Runs a command as root: directly when we are root, else through sudo.
as_root() {
  if [[ $EUID -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    die "need root to run '$*' (not root, and sudo is not installed)"
  fi
}

pkg_installed() {
  dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed$'
}

# Prints the packages of ACCEL_DEPS that are not installed, one per line.
deps_missing() {
  local pkg
  for pkg in "${ACCEL_DEPS[@]}"; do
    pkg_installed "$pkg" || printf '%s\n' "$pkg"
  done
}

# Installs what is missing; does nothing when all is there. ACCEL_NO_DEPS=1 skips the check.
deps_ensure() {
  if [[ ${ACCEL_NO_DEPS:-0} == 1 ]]; then
    return 0
  fi
  if ! command -v dpkg >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    warn "not a Debian-like system: install the equivalents of: ${ACCEL_DEPS[*]}"
    return 0
  fi
  local missing
  mapfile -t missing < <(deps_missing)
  if [[ ${#missing[@]} -eq 0 ]]; then
    say "deps: all ${#ACCEL_DEPS[@]} packages installed"
    return 0
  fi
  say "deps: installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# ---- meson --------------------------------------------------------------------------------

# meson_setup BUILDDIR [MESON OPTIONS...]: configures a new build dir, or reconfigures an
# existing one with the given options (so a script's flags always decide the configuration).
meson_setup() {
  local builddir=$1
  shift
  if [[ -f $builddir/meson-private/coredata.dat ]]; then
    run meson setup --reconfigure "$@" "$builddir" "$ACCEL_ROOT"
  else
    run meson setup "$@" "$builddir" "$ACCEL_ROOT"
  fi
}

# accel_setup BUILDDIR SANITIZE: the one configuration every script uses (project defaults plus
# a sanitizer or none), so scripts/test and scripts/demo never fight over the same build dir.
accel_setup() {
  local builddir=$1 sanitize=$2 lundef=true
  [[ $sanitize == none ]] || lundef=false # sanitizer runtimes leave symbols undefined
  meson_setup "$builddir" -Db_sanitize="$sanitize" -Db_lundef="$lundef"
}

# meson_build BUILDDIR [TARGETS...]
meson_build() {
  local builddir=$1
  shift
  run meson compile -C "$builddir" "$@"
}

# ---- sanitizers ---------------------------------------------------------------------------

# ThreadSanitizer maps its shadow memory at fixed addresses. With the high ASLR entropy of
# some kernels the runtime dies at start with "unexpected memory mapping" (older compilers'
# TSan). Returns 0 when a TSan program needs ASLR off (setarch -R) to run here.
tsan_needs_no_aslr() {
  local dir rc=1
  dir=$(mktemp -d)
  printf 'int main(void) { return 0; }\n' >"$dir/probe.c"
  if ! cc -fsanitize=thread -o "$dir/probe" "$dir/probe.c" 2>/dev/null; then
    rm -rf "$dir"
    return 1
  fi
  if ! "$dir/probe" >"$dir/out" 2>&1 && grep -q 'unexpected memory mapping' "$dir/out"; then
    rc=0
  fi
  rm -rf "$dir"
  return "$rc"
}

# Prints the command prefix that makes TSan programs runnable here: nothing, or setarch -R.
# Dies when even that does not help (some containers forbid turning ASLR off).
tsan_prefix() {
  tsan_needs_no_aslr || return 0
  local arch
  arch=$(uname -m)
  if ! setarch "$arch" -R true 2>/dev/null; then
    die "ThreadSanitizer needs ASLR off on this kernel, and 'setarch -R' is not permitted here
       (try: sysctl vm.mmap_rnd_bits=28, as root)"
  fi
  printf 'setarch %s -R\n' "$arch"
}
