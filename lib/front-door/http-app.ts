/**
 * The Fastify application for every non-gRPC request on the front door (LLM clients).
 * Fastify does not own the listener: the front door hands it HTTP/1.1 and h2 requests
 * through the handler captured from serverFactory.
 */
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import { EventEmitter } from 'node:events'
import type { HttpRequestHandler } from './listener.ts'

export type HttpRoute = (request: FastifyRequest, reply: FastifyReply) => Promise<unknown> | unknown

export interface HttpApp {
  readonly app: FastifyInstance
  readonly handler: HttpRequestHandler
}

/** Error body of SPEC §6: `{ error: { code, message } }` with x-stargate-error-code. */
export function sendError (reply: FastifyReply, status: number, code: string, message: string): FastifyReply {
  return reply.code(status).header('x-stargate-error-code', code).type('application/json')
    .send({ error: { code, message } })
}

export async function createHttpApp (route: HttpRoute | null): Promise<HttpApp> {
  let captured: HttpRequestHandler | null = null
  const app = Fastify({
    logger: false,
    serverFactory: (handler) => {
      captured = handler as unknown as HttpRequestHandler
      // Fastify wants a server object; the front door owns the real listener.
      return Object.assign(new EventEmitter(), { listening: false, address: () => null, close: (cb?: () => void) => { cb?.() } }) as never
    },
  })
  app.all('/*', route ?? (async (_request, reply) => sendError(reply, 404, 'not_found', 'no route for this request on the stargate router')))
  await app.ready()
  if (captured === null) throw new Error('fastify did not call serverFactory')
  return { app, handler: captured }
}
