#!/usr/bin/env bash
# `make deb`: build/deb/fabscope_VERSION_ARCH.deb with the Debian tooling (debhelper, dh-python), from a
# copy of this tree's files (tracked and new, not ignored) under build/deb: the checkout is never
# written to. packaging/debian is the package's debian/ directory; its changelog is written here from
# the one version (python/fabscope/__init__.py). Ends with lintian (no errors allowed).
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
src=$out/fabscope-$version
rm -rf "$src" "$out"/fabscope_* "$out"/fabscope-dbgsym_*
mkdir -p "$src"
git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  tar -c --null -T - -f - | tar -x -f - -C "$src"
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
lintian --fail-on error "$deb"
echo "$deb"
