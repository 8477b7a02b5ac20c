#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# `make deb`: build/deb/fabscope_VERSION_ARCH.deb with the Debian tooling (debhelper, dh-python), from a
# copy of this tree's files (tracked and new, not ignored) under build/deb: the checkout is never
# written to. packaging/debian is the package's debian/ directory; its changelog is written here from
# the one version (python/fabscope/__init__.py). Ends with lintian: no error and no warning (a warning is
# fixed, or overridden with its reason in packaging/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' python/fabscope/__init__.py)
if [ -z "$version" ]; then
  echo "build-deb: no __version__ = \"X.Y.Z\" line in python/fabscope/__init__.py" >&2
  exit 1
fi
for tool in dpkg-buildpackage dh dh_python3 lintian git; do
  if ! command -v "$tool" >/dev/null; then
    echo "build-deb: $tool not found; \`make setup\` installs the packaging tools (deps/apt-packages.txt)" >&2
    exit 1
  fi
done
out=${FABSCOPE_DEB_DIR:-$PWD/build/deb}  # tests build elsewhere
# lintian leaves its mldbm-* caches in $TMPDIR: give it a directory of its own, removed on exit.
lintian_tmp=$(mktemp -d)
trap 'rm -rf "$lintian_tmp"' EXIT
run_lintian() { TMPDIR=$lintian_tmp lintian --fail-on error,warning "$1"; }
src=$out/fabscope-$version
tree_files() {
  git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done
}
# The same inputs make the same package: when the tree's files, the commit, the settings below and the
# versions of the build dependencies are those of the .deb already in $out, it is kept (lintian still
# runs); FABSCOPE_DEB_REBUILD=1 rebuilds anyway. `make test` runs this every time and most runs
# change nothing the package is made of.
build_deps=$(sed -n '/^Build-Depends:/,/^[A-Z][A-Za-z-]*:/p' packaging/debian/control | sed '1s/^Build-Depends://;$d' |
  tr ',' '\n' | sed 's/[(:].*//; s/^ *//; s/ *$//' | grep -v '^$')
# The files' contents, modes and symlinks as tar stores them, without times or owners.
# shellcheck disable=SC2086 # one word per package
key=$( { tree_files | tar -c --null -T - --mtime=@0 --owner=0 --group=0 --numeric-owner -f -
         git describe --always --dirty
         echo "${SOURCE_DATE_EPOCH:-}|${DEBFULLNAME:-}|${DEBEMAIL:-}|${DEB_BUILD_OPTIONS:-}"
         dpkg-query -W -f '${Package} ${Version}\n' debhelper gcc $build_deps 2>/dev/null || true; } |
       sha256sum | cut -d' ' -f1)
stamp=$out/inputs.sha256
prev=$(ls "$out"/fabscope_"${version}"_*.deb 2>/dev/null | head -1 || true)
if [ -z "${FABSCOPE_DEB_REBUILD:-}" ] && [ -n "$prev" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$key" ]; then
  echo "build-deb: keeping $prev: built from the same tree and build dependencies (FABSCOPE_DEB_REBUILD=1 rebuilds)"
  echo "build-deb: lintian $prev"
  run_lintian "$prev"
  echo "$prev"
  exit 0
fi
rm -rf "$src" "$stamp" "$out"/fabscope_* "$out"/fabscope-dbgsym_*
mkdir -p "$src"
tree_files | tar -c --null -T - -f - | tar -x -f - -C "$src"
cp -r packaging/debian "$src/debian"
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
cat > "$src/debian/changelog" <<CHANGELOG
fabscope ($version) unstable; urgency=medium

  * Built from the fabscope tree at $(git describe --always --dirty).

 -- ${DEBFULLNAME:-fabscope developers} <${DEBEMAIL:-fabscope@fabscope.invalid}>  $(date -R -d "@$SOURCE_DATE_EPOCH")
CHANGELOG
log=$out/build.log
echo "build-deb: building fabscope $version in $src (log: $log)"
if ! (cd "$src" && DEB_BUILD_OPTIONS="parallel=$(nproc) ${DEB_BUILD_OPTIONS:-}" \
      dpkg-buildpackage -b -us -uc --no-sign) > "$log" 2>&1; then
  tail -40 "$log" >&2
  echo "build-deb: dpkg-buildpackage failed (whole log: $log)" >&2
  exit 1
fi
deb=$(ls "$out"/fabscope_"${version}"_*.deb)
echo "build-deb: lintian $deb"
run_lintian "$deb"
echo "$key" > "$stamp"
echo "$deb"
