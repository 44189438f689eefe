#!/bin/sh
# Prints weft's version: configure.ac's AC_INIT calls this at autoconf time
# (m4_esyscmd), and the Python package's build backend calls it too, so the
# version is written in one place (the BASE argument in configure.ac).
#   - in a release tarball: the .tarball-version that `make dist` wrote;
#   - in a git checkout at tag vBASE with no changes: BASE;
#   - any other checkout: a PEP 440 snapshot version that says so,
#     BASE.devN+gHASH, N commits after the last v* tag (or since the first
#     commit), ".dirty" appended when tracked files differ from HEAD;
#   - neither (an export without .git): BASE+unknown.
# Usage: contrib/scripts/version.sh BASE  (run from anywhere)
set -e
base=${1:?usage: $0 BASE}
top=$(cd "$(dirname "$0")/../.." && pwd)
if [ -f "$top/.tarball-version" ]; then
    cat "$top/.tarball-version"
    exit 0
fi
if [ -e "$top/.git" ] && command -v git >/dev/null 2>&1 &&
    hash=$(git -C "$top" rev-parse --short=9 HEAD 2>/dev/null); then
    tag=$(git -C "$top" describe --tags --match 'v[0-9]*' --abbrev=0 2>/dev/null || true)
    n=$(git -C "$top" rev-list --count ${tag:+"$tag"..}HEAD)
    dirty=
    git -C "$top" update-index -q --refresh >/dev/null 2>&1 || true
    git -C "$top" diff-index --quiet HEAD -- 2>/dev/null || dirty=.dirty
    if [ "$tag" = "v$base" ] && [ "$n" = 0 ] && [ -z "$dirty" ]; then
        printf '%s\n' "$base"
    else
        printf '%s.dev%s+g%s%s\n' "$base" "$n" "$hash" "$dirty"
    fi
    exit 0
fi
printf '%s+unknown\n' "$base"
