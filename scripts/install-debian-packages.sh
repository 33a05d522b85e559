#!/usr/bin/env bash
# The Debian packages stargate-router builds against and tests with, named once: the README's
# install line and .ci/run both run this script (as root, or through sudo).
set -euo pipefail

# The QUIC engine's addon (lib/quic/native), compiled by `npm ci` against ngtcp2 + GnuTLS.
BUILD=(pkg-config gcc g++ make python3 libngtcp2-dev libngtcp2-crypto-gnutls-dev libgnutls28-dev)
# Independent peers and reference servers of the tests and benchmarks: grpcio (a second gRPC
# stack), nginx, h2load, wrk, ngtcp2's gtlsclient/gtlsserver, and quinn + rustls (the stack of
# the real Pylon and Stargate) built offline from Debian's Rust source packages: quinn 0.9 from
# these bookworm packages, quinn 0.11 from trixie's, which scripts/fetch-trixie-crates.sh
# downloads with apt and unpacks with dpkg-deb (checked against the archive keyring) without
# installing them; chromium, the independent WebTransport client of the HTTP/3 tests (driven by
# playwright-core).
TEST=(python3-grpcio nginx nghttp2-client ngtcp2-client ngtcp2-server wrk
  cargo librust-quinn-dev librust-rustls-pemfile-dev librust-tokio-dev debian-archive-keyring
  chromium)

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${BUILD[@]}" "${TEST[@]}"
