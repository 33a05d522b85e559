#!/bin/sh
# /usr/local/bin/stargate-k8s-router in the image (see Dockerfile): the Rust router's binary
# name, so a chart that sets `command: /usr/local/bin/stargate-k8s-router` runs this router
# with the same arguments. exec: node becomes the process that receives SIGTERM.
exec node /app/server/main.ts "$@"
