/** The health listener (SPEC §9): /livez, /readyz, /metrics, /debug/snapshot. Plain HTTP. */
import Fastify, { type FastifyInstance } from 'fastify'
import type { AddressInfo } from 'node:net'
import type { Registry } from 'prom-client'
import type { DiscoveryStatus, SnapshotReader } from '../discovery/types.ts'
import type { Readiness } from './readiness.ts'

export interface HealthServerOptions {
  readonly host: string
  readonly port: number
  readonly readiness: Readiness
  readonly registry: Registry
  readonly snapshot: SnapshotReader
  readonly discovery: DiscoveryStatus
  /** Extra debug routes, e.g. /debug/peers, added by optional features. */
  readonly debugRoutes?: ReadonlyArray<{ path: string, handler: () => unknown }>
}

export class HealthServer {
  readonly #app: FastifyInstance
  readonly #options: HealthServerOptions

  constructor (options: HealthServerOptions) {
    this.#options = options
    const app = Fastify({ logger: false, keepAliveTimeout: 5000 })
    app.get('/livez', async (_req, reply) => reply.type('text/plain').send('ok\n'))
    app.get('/readyz', async (_req, reply) => {
      const reason = options.readiness.check()
      if (reason === null) return reply.type('text/plain').send('ready\n')
      return reply.code(503).type('text/plain').send(`not ready: ${reason}\n`)
    })
    app.get('/metrics', async (_req, reply) => {
      const body = await options.registry.metrics()
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
      }
    })
    for (const route of options.debugRoutes ?? []) app.get(route.path, async () => route.handler())
    this.#app = app
  }

  async listen (): Promise<AddressInfo> {
    await this.#app.listen({ host: this.#options.host, port: this.#options.port })
    return this.#app.server.address() as AddressInfo
  }

  close (): Promise<void> {
    return this.#app.close()
  }
}
