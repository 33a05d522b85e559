# stargate-router: runs the TypeScript sources directly on Node 24 (type stripping; no build
# step for them), with production dependencies only, as the unprivileged `node` user.
#
# Two stages because the QUIC engine is a small N-API addon over Debian's ngtcp2 + GnuTLS
# (lib/quic/native) that `npm ci` compiles with node-gyp: the compiler and the -dev packages
# stay in the builder; the runtime gets the shared libraries, the app and node_modules.
#
# `npm run image-smoke` builds the runtime filesystem this file describes without a Docker
# engine (scripts/image-smoke.ts reads this file) and starts the router in it: keep to the
# instructions it knows (FROM … AS, ARG, ENV, WORKDIR, RUN, COPY [--from], USER, EXPOSE,
# ENTRYPOINT, CMD, LABEL), one source per COPY line or several files into a directory.

FROM node:24-bookworm AS builder
# g++, make, python3: node-gyp; pkg-config and the -dev packages: the addon's build (its
# install step names what is missing); ca-certificates: npm over https.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates g++ make python3 pkg-config \
      libngtcp2-dev libngtcp2-crypto-gnutls-dev libgnutls28-dev \
 && rm -rf /var/lib/apt/lists/*
# Build against the headers of the image's own Node.js, not headers fetched from nodejs.org.
ENV npm_config_nodedir=/usr/local
WORKDIR /app
COPY package.json package-lock.json ./
# Before npm ci: its install step builds the addon in lib/quic/native.
COPY lib ./lib
COPY server ./server
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

FROM node:24-bookworm-slim AS runtime
# The addon's shared libraries (Debian bookworm: ngtcp2 0.12, GnuTLS 3.7).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libngtcp2-9 libngtcp2-crypto-gnutls2 libgnutls30 \
 && rm -rf /var/lib/apt/lists/*
ENV NODE_ENV=production
WORKDIR /app
COPY --from=builder /app/package.json /app/package-lock.json ./
COPY --from=builder /app/node_modules ./node_modules
COPY --from=builder /app/lib ./lib
COPY --from=builder /app/server ./server
# The Rust router's binary name: a chart that sets `command: /usr/local/bin/stargate-k8s-router`
# runs this router with the same arguments.
COPY server/stargate-k8s-router.sh /usr/local/bin/stargate-k8s-router
USER node
# front door (gRPC + HTTP), tunnels (QUIC on UDP, WebTransport over HTTP/2 on TCP), health
EXPOSE 50071/tcp 50072/udp 50072/tcp 8080/tcp
ENTRYPOINT ["/usr/local/bin/stargate-k8s-router"]
