#!/usr/bin/env bash
# Fetches the Rust source crates of Debian trixie (quinn 0.11, rustls 0.23 with ring, tokio 1.43)
# that the quinn test peer (test/fixtures/quinn-peer) builds against, into a folder cargo reads
# as a directory source: DEST/usr/share/cargo/registry (DEST: the first argument, default
# node_modules/.cache/trixie-crates, where no linter or type checker looks and `npm ci` starts
# afresh; test/fixtures/quinn-peer/.cargo/config.toml points there).
#
# The machine's apt configuration is left alone: a private apt state (its own sources.list for
# trixie main, signed by the Debian archive keyring, and its own lists, cache and an empty dpkg
# status) resolves the librust-*-dev closure of the crates below with apt's own resolver, downloads
# those exact versions (apt checks each against the signed Release file) and unpacks them with
# dpkg -x. Nothing is installed. The archive is the one the machine's own apt sources use for
# Debian (TRIXIE_MIRROR overrides it).
#
# Idempotent: with DEST complete (its crates.list written last) it returns at once without the
# network; --refresh fetches again (e.g. after a trixie point release). Needs apt-get, apt-cache,
# dpkg-deb and the keyring (debian-archive-keyring), all on a Debian machine.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
REFRESH=0
if [ "${1:-}" = "--refresh" ]; then REFRESH=1; shift; fi
DEST=${1:-$ROOT/node_modules/.cache/trixie-crates}
SUITE=trixie
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
# The crates the peer's Cargo.toml names; apt adds what they depend on (~180 packages).
ROOTS=(librust-quinn-dev librust-rustls-dev librust-tokio-dev
  librust-ring-dev librust-bytes-dev librust-libc-dev librust-tracing-dev)
# What the build needs to find, as registry folder prefixes.
REQUIRED=(quinn-0.11. quinn-proto-0.11. quinn-udp-0. rustls-0.23. tokio-1. ring-0.17.)
REGISTRY=$DEST/usr/share/cargo/registry
LIST=$DEST/crates.list

fail () {
  echo "fetch-trixie-crates: $*" >&2
  exit 1
}

complete () {
  [ -s "$LIST" ] || return 1
  local prefix
  for prefix in "${REQUIRED[@]}"; do
    compgen -G "$REGISTRY/$prefix*" > /dev/null || return 1
  done
}

if [ "$REFRESH" = 0 ] && complete; then
  echo "fetch-trixie-crates: $REGISTRY is complete ($(wc -l < "$LIST") packages; --refresh to fetch again)"
  exit 0
fi

for tool in apt-get apt-cache dpkg-deb; do
  command -v "$tool" > /dev/null || fail "$tool is not installed: the trixie crates are fetched with Debian's apt and dpkg"
done
[ -r "$KEYRING" ] || fail "$KEYRING is missing: apt-get install debian-archive-keyring"

MIRROR=${TRIXIE_MIRROR:-}
if [ -z "$MIRROR" ]; then
  MIRROR=$(apt-get indextargets --format '$(REPO_URI)' 'Label: Debian' 'Created-By: Packages' 2>/dev/null | head -n 1)
  [ -n "$MIRROR" ] || fail "no Debian archive in the machine's apt sources (run apt-get update first), or set TRIXIE_MIRROR to a Debian archive URL"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/trixie-crates.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/etc/sources.list.d" "$WORK/etc/preferences.d" "$WORK/lists/partial" "$WORK/cache/archives/partial" "$WORK/debs"
: > "$WORK/status"
echo "deb [signed-by=$KEYRING] $MIRROR $SUITE main" > "$WORK/etc/sources.list"
# Every path apt reads or writes is private; the downloads run as the invoking user (no drop to
# _apt, which could not write into this private folder).
APT_OPTS=(
  -o "Dir::Etc::sourcelist=$WORK/etc/sources.list" -o "Dir::Etc::sourceparts=$WORK/etc/sources.list.d"
  -o "Dir::Etc::preferences=$WORK/etc/preferences" -o "Dir::Etc::preferencesparts=$WORK/etc/preferences.d"
  -o "Dir::State=$WORK" -o "Dir::State::Lists=$WORK/lists" -o "Dir::State::status=$WORK/status"
  -o "Dir::Cache=$WORK/cache" -o "APT::Sandbox::User=$(id -un)" -o APT::Get::List-Cleanup=false
)

echo "fetch-trixie-crates: $SUITE main from $MIRROR"
# apt-get update exits 0 when a download fails (it only warns): the index on disk tells.
if ! apt-get "${APT_OPTS[@]}" -q update > "$WORK/update.log" 2>&1 || ! compgen -G "$WORK/lists/*_dists_${SUITE}_main_binary-*_Packages*" > /dev/null; then
  cat "$WORK/update.log" >&2
  fail "could not download $SUITE's package index from $MIRROR"
fi

# apt's resolver over an empty dpkg status: what installing the roots on a bare trixie would
# take. Of that, the librust-*-dev packages are the crates; the rest (libc6, dpkg-dev, …) is not
# needed to unpack sources.
apt-get "${APT_OPTS[@]}" -s --no-install-recommends install "${ROOTS[@]}" > "$WORK/resolve.log" 2>&1 \
  || { cat "$WORK/resolve.log" >&2; fail "apt could not resolve ${ROOTS[*]} in $SUITE"; }
awk '$1 == "Inst" && $2 ~ /^librust-/ { v = $3; gsub(/[()]/, "", v); print $2 "=" v }' "$WORK/resolve.log" | sort > "$WORK/crates.list"
[ -s "$WORK/crates.list" ] || fail "apt resolved no librust packages for ${ROOTS[*]} (see $WORK/resolve.log)"

(cd "$WORK/debs" && apt-get "${APT_OPTS[@]}" -qq download $(cat "$WORK/crates.list")) > "$WORK/download.log" 2>&1 \
  || { cat "$WORK/download.log" >&2; fail "apt-get download failed"; }

# Unpack next to DEST and move into place, so an interrupted run leaves no half-filled registry.
STAGE="$DEST.partial.$$"
rm -rf "$STAGE"
mkdir -p "$STAGE"
for deb in "$WORK"/debs/*.deb; do
  dpkg-deb -x "$deb" "$STAGE" || fail "cannot unpack $deb"
done
cp "$WORK/crates.list" "$STAGE/crates.list"
rm -rf "$DEST"
mv "$STAGE" "$DEST"
complete || fail "$REGISTRY lacks one of ${REQUIRED[*]} after unpacking (see $LIST)"
echo "fetch-trixie-crates: $(wc -l < "$LIST") crates in $REGISTRY"
