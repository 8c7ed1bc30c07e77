#!/usr/bin/env bash
# scripts/check-layers on a planted tree: an include up the layers, one from a folder with no
# place, and accelctl reaching for the device world each fail it; includes down the layers,
# beside the file and of the public headers pass.
set -euo pipefail
check=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../scripts" && pwd)/check-layers
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
failures=0

plant() { # plant FILE LINE...
  local file=$1
  shift
  mkdir -p "$tree/$(dirname "$file")"
  printf '%s\n' "$@" >"$tree/$file"
}

expect() { # expect STATUS FILE
  local want=$1 file=$2 got=0 out
  out=$(CHECK_LAYERS_ROOT=$tree "$check" "$file" 2>&1) || got=$?
  if [[ $got != "$want" ]]; then
    printf 'FAIL: %s: exit %s, expected %s\n%s\n' "$file" "$got" "$want" "$out"
    failures=$((failures + 1))
  else
    printf 'ok: %s: exit %s\n' "$file" "$got"
  fi
}

plant proto/up.c '#include "proto/wire.h"' '#include "actors/world.h"'
expect 1 proto/up.c
plant proto/down.c '#include "ops/op.h"' '#include "runtime/alloc.h"' '#include "accel/accel.h"' \
  '#include "codec_io.h"' '#include <stdio.h>'
expect 0 proto/down.c
plant ops/up.h '#include "backends/backend.h"'
expect 1 ops/up.h
plant runtime/up.c '  #  include "ops/op.h"'
expect 1 runtime/up.c
plant nowhere/x.c '#include "runtime/alloc.h"'
expect 1 nowhere/x.c
plant clients/accelctl.c '#include "proto/wire.h"' '#include "actors/world.h"'
expect 1 clients/accelctl.c
plant clients/ctx.c '#include "actors/world.h"'
expect 0 clients/ctx.c

if ((failures > 0)); then
  printf '%d failed\n' "$failures"
  exit 1
fi
