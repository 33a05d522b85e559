/**
 * The health listener (SPEC §9): /livez, /readyz, /metrics, /debug/snapshot, and the debug
 * routes features add (/debug/peers, /debug/load). Plain HTTP.
 *
 * Limits (SPEC §12): it is scraped and probed by a few clients, so a slow or hostile
 * one gets short header, request and idle timeouts, and its connections are capped; at the cap
 * a new connection (a probe) is taken and the oldest idle one closed (connection-cap.ts). The
 * requests of a connection are answered one at a time and a connection that pipelines more
 * than a few is closed (serial-requests.ts); /metrics renderings are shared between scrapes and
 * start at most every METRICS_RENDER_INTERVAL_MS (metrics-render.ts). An accept error (EMFILE)
 * is logged and counted, never thrown.
 */
import Fastify, { type FastifyInstance } from 'fastify'
import http, { type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import type { Registry } from 'prom-client'
import type { DiscoveryStatus, SnapshotReader } from '../discovery/types.ts'
import type { Readiness } from './readiness.ts'
import type { Logger } from '../log.ts'
import { ConnectionCap, type EvictedState } from './connection-cap.ts'
import { MetricsRender } from './metrics-render.ts'
import { SerialRequests } from '../serial-requests.ts'

export interface HealthLimits {
  /** Time to receive a request head. */
  readonly headersTimeoutMs: number
  /** Time to receive a whole request. */
  readonly requestTimeoutMs: number
  /** Silence on a connection between requests. */
  readonly keepAliveTimeoutMs: number
  readonly maxConnections: number
}

const DEFAULT_HEALTH_LIMITS: HealthLimits = { headersTimeoutMs: 10_000, requestTimeoutMs: 30_000, keepAliveTimeoutMs: 5000, maxConnections: 256 }

export interface HealthServerOptions {
  readonly host: string
  readonly port: number
  readonly readiness: Readiness
  readonly registry: Registry
  readonly snapshot: SnapshotReader
  readonly discovery: DiscoveryStatus
  /** Extra debug routes, e.g. /debug/peers and /debug/load, added by features. */
  readonly debugRoutes?: ReadonlyArray<{ path: string, handler: () => unknown }>
  readonly limits?: HealthLimits
  /** An accept error (its code): the listener keeps serving. */
  readonly onRefused?: (reason: 'accept_error', code: string | null) => void
  /** A connection closed at the cap to make room for a new one. */
  readonly onEvicted?: (state: EvictedState) => void
  /** A connection closed for pipelining more than MAX_PIPELINED requests. */
  readonly onPipelining?: () => void
  readonly logger?: Logger
}

/** Requests a connection may have waiting behind the one being answered. */
export const MAX_PIPELINED = 8
/** Shortest time between two /metrics renderings. */
export const METRICS_RENDER_INTERVAL_MS = 100

const kCap = Symbol('health connection cap')
type CappedResponse = ServerResponse & { [kCap]?: ConnectionCap<Socket> }

interface SerialLine {
  readonly serial: SerialRequests<Socket, [IncomingMessage, ServerResponse]>
  readonly handler: (req: IncomingMessage, res: ServerResponse) => void
}

const kLine = Symbol('health serial line')
type SerialResponse = ServerResponse & { [kLine]?: SerialLine }

function runSerial (line: SerialLine, req: IncomingMessage, res: SerialResponse): void {
  res[kLine] = line
  res.once('close', onSerialClose)
  line.handler(req, res)
}

/** A connection's request is over: its next waiting one, if any, runs. */
function onSerialClose (this: SerialResponse): void {
  const line = this[kLine] as SerialLine
  const socket = this.req.socket
  const next = line.serial.done(socket)
  if (next !== null && !socket.destroyed) runSerial(line, next[0], next[1])
}

function onResponseClose (this: CappedResponse): void {
  this[kCap]?.requestFinished(this.req.socket)
}

export class HealthServer {
  readonly #app: FastifyInstance
  readonly #options: HealthServerOptions
  #closing: Promise<void> | null = null

  constructor (options: HealthServerOptions) {
    this.#options = options
    const limits = options.limits ?? DEFAULT_HEALTH_LIMITS
    const serial = new SerialRequests<Socket, [IncomingMessage, ServerResponse]>(MAX_PIPELINED)
    const app = Fastify({
      logger: false,
      // close() ends every connection, idle or not (a partial head would otherwise hold it for
      // the header timeout): the health listener closes last in a shutdown (SPEC §11).
      forceCloseConnections: true,
      // Fastify's handler runs a connection's requests one at a time (serial-requests.ts).
      serverFactory: (handler) => {
        const line: SerialLine = { serial, handler }
        const server = http.createServer({
          headersTimeout: limits.headersTimeoutMs,
          requestTimeout: limits.requestTimeoutMs,
          keepAliveTimeout: limits.keepAliveTimeoutMs,
          // Node checks header and request deadlines on this interval (30 s by default).
          connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(limits.headersTimeoutMs / 2))),
        }, (req, res) => {
          const socket = req.socket
          if (socket.destroyed) return
          switch (serial.arrive(socket, [req, res])) {
            case 'run':
              runSerial(line, req, res)
              break
            case 'close':
              socket.destroy()
              options.onPipelining?.()
              break
            case 'wait':
              break
          }
        })
        return server
      },
    })
    // Not server.maxConnections: Node closes the newest connection at accept, the probe.
    const cap = new ConnectionCap<Socket>(limits.maxConnections)
    app.server.prependListener('connection', (socket: Socket) => {
      const eviction = cap.admit(socket)
      socket.once('close', () => { cap.closed(socket) })
      if (eviction === null) return
      eviction.connection.destroy()
      options.onEvicted?.(eviction.state)
    })
    app.server.prependListener('request', (_req: IncomingMessage, res: CappedResponse) => {
      cap.requestStarted(res.req.socket)
      res[kCap] = cap
      res.once('close', onResponseClose)
    })
    app.get('/livez', async (_req, reply) => reply.type('text/plain').send('ok\n'))
    app.get('/readyz', async (_req, reply) => {
      const reason = options.readiness.check()
      if (reason === null) return reply.type('text/plain').send('ready\n')
      return reply.code(503).type('text/plain').send(`not ready: ${reason}\n`)
    })
    const metrics = new MetricsRender({ render: () => options.registry.metrics(), minIntervalMs: METRICS_RENDER_INTERVAL_MS })
    app.get('/metrics', async (_req, reply) => {
      const body = await metrics.get()
      return reply.type(options.registry.contentType).send(body)
    })
    app.get('/debug/snapshot', async () => {
      const snapshot = options.snapshot.current()
      return {
        initialized: snapshot.initialized,
        generation: snapshot.generation,
        digest: snapshot.digest,
        ageSeconds: options.discovery.stalenessMs() / 1000,
        targets: snapshot.targets,
        // Listed, not ready, not terminating: not targets, but what already runs to them stays.
        unready: [...snapshot.unready.values()],
      }
    })
    for (const route of options.debugRoutes ?? []) app.get(route.path, async () => route.handler())
    this.#app = app
  }

  async listen (): Promise<AddressInfo> {
    await this.#app.listen({ host: this.#options.host, port: this.#options.port })
    // Fastify drops its own 'error' listener once listening; an accept error (EMFILE) would
    // then be an uncaught exception. The listener keeps serving once descriptors free up.
    this.#app.server.on('error', (err: NodeJS.ErrnoException) => {
      this.#options.onRefused?.('accept_error', err.code ?? null)
      this.#options.logger?.warn({ code: err.code ?? err.message }, 'health listener accept error')
    })
    return this.#app.server.address() as AddressInfo
  }

  /** Open connections (what the cap counts). */
  connectionCount (): Promise<number> {
    return new Promise((resolve) => { this.#app.server.getConnections((err, count) => { resolve(err === null ? count : 0) }) })
  }

  /** Closes the listener and every connection on it. Idempotent: a second call waits for the first. */
  close (): Promise<void> {
    this.#closing ??= this.#app.close()
    return this.#closing
  }
}
