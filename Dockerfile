# stargate-router: runs the TypeScript sources directly on Node 24 (type stripping; no build
# step), with production dependencies only, as the unprivileged `node` user.
FROM node:24-bookworm-slim

ENV NODE_ENV=production
WORKDIR /app

COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

COPY lib ./lib
COPY server ./server

USER node
# front door (gRPC + HTTP), tunnels (QUIC on UDP, WebTransport over HTTP/2 on TCP), health
EXPOSE 50071/tcp 50072/udp 50072/tcp 8080/tcp
ENTRYPOINT ["node", "server/main.ts"]
