/**
 * The front door (SPEC §2): Fastify on the dual-protocol listener, and what it serves.
 *
 *   TCP ──▶ FrontDoorListener (listener.ts): caps, deadlines, h2c sniffing / TLS ALPN, rapid reset
 *             ├─ HTTP/2 stream, gRPC content type ──▶ gRPC route by :path ──▶ a control-plane method
 *             │                                        (the raw stream, spliced or answered)
 *             └─ any other request (h1 or h2) ──▶ Fastify ──▶ catch-all route ──▶ forward()
 *
 * Routes: the constructor declares them side by side: the two StargateControlPlane methods
 * (WatchStargates, RegisterInferenceServer), each a handler object of lib/control-plane, and
 * Fastify's catch-all route to the HTTP forwarder.
 *
 * Fastify's serverFactory hands it the listener's HTTP/1.1 server (where Fastify installs its
 * clientErrorHandler) and gives the listener Fastify's request handler. Fastify never listens:
 * the listener accepts and closes connections itself (see listener.ts); listen() and close()
 * here order the two.
 *
 * gRPC streams do not go through Fastify. Its router would need Node's compat request/response
 * pair on every gRPC stream, whose listeners answer and send trailers on their own (Fastify
 * cannot carry gRPC trailers), for a routing that is one lookup by :path; the splice itself
 * would be the same. Registration round trips (bench control-plane/registration,
 * docs/benchmarks.md) are therefore the same on either front door; what Fastify costs is per
 * HTTP request (bench http-forward).
 *
 * Per request Fastify does: find-my-way lookup (one wildcard route), Request/Reply objects, a
 * logger carrying the request id, bound lazily (request-logger.ts; genReqId is the forwarder's
 * x-request-id rule, so the id in logs is the one sent upstream and back), then the route hijacks the reply and hands
 * the raw request and response to the forwarder, which streams them with undici. No body is
 * parsed (every method is bodyless to Fastify). Features the front door does
 * not use are off: request logging (a line per request), HEAD routes, 503 on closing (the
 * listener drains itself).
 */
import type { AddressInfo } from 'node:net'
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { Http2ServerRequest, Http2ServerResponse, IncomingHttpHeaders, ServerHttp2Stream } from 'node:http2'
import Fastify, { LogController, type FastifyInstance } from 'fastify'
import { FrontDoorListener, type FrontDoorOptions } from './listener.ts'
import { REGISTER_INFERENCE_SERVER_PATH, WATCH_STARGATES_PATH, respondWithStatus } from '../control-plane/grpc.ts'
import { GRPC_ERRORS, grpcError, type GrpcError, type GrpcErrorCode } from '../control-plane/errors.ts'
import { createClientErrorHandler, createErrorHandler, type ForwardRequest } from './http-errors.ts'
import { requestIdOf } from '../http-forward/headers.ts'
import type { Logger, RequestLog } from '../log.ts'
import { RequestLogger } from './request-logger.ts'

/** What the front door forwards HTTP requests to (HttpForwarder). */
export interface HttpHandler {
  handle (req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse, requestId: string, log: RequestLog): void
}

/**
 * A gRPC method the front door serves: it takes the raw HTTP/2 stream of each call, which it
 * splices or answers itself (SPEC §2).
 */
export interface GrpcMethod {
  handle (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, rawHeaders: readonly string[]): void
  /** Ends a stream it serves with the status of code (its connection drains); false when it serves no such stream. */
  end (stream: ServerHttp2Stream, code: GrpcErrorCode): boolean
}

/** The methods of stargate.StargateControlPlane (lib/control-plane). */
export interface StargateControlPlane {
  readonly watchStargates: GrpcMethod
  readonly registerInferenceServer: GrpcMethod
}

export interface FrontDoorAppOptions extends Omit<FrontDoorOptions, 'onHttpRequest' | 'onGrpcStream' | 'endGrpcStream'> {
  readonly http: HttpHandler
  readonly grpc: StargateControlPlane
}

type App = FastifyInstance<Server, IncomingMessage, ServerResponse, Logger>

/** The methods Fastify reads a body for by default (fastify.js kSupportedHTTPMethods.bodywith). */
const BODY_METHODS = ['DELETE', 'OPTIONS', 'PATCH', 'PUT', 'POST', 'QUERY'] as const

export class FrontDoor {
  readonly app: App
  readonly listener: FrontDoorListener
  #closing: Promise<void> | null = null

  constructor (options: FrontDoorAppOptions) {
    let listener: FrontDoorListener | null = null
    /** The gRPC routes by :path, declared below beside Fastify's. */
    const grpcRoutes = new Map<string, GrpcMethod>()
    const maxHeaderListSize = options.limits?.maxHeaderListSize ?? FrontDoorListener.DEFAULT_LIMITS.maxHeaderListSize
    const app: App = Fastify({
      loggerInstance: options.logger,
      serverFactory: (handler) => {
        // Fastify's handler takes HTTP/2 compat requests as well (it serves them with http2: true).
        listener = new FrontDoorListener({
          ...options,
          onHttpRequest: handler as FrontDoorOptions['onHttpRequest'],
          onGrpcStream: (stream, headers, rawHeaders) => { routeGrpc(grpcRoutes, stream, headers, rawHeaders) },
          endGrpcStream: (stream, code) => { endGrpc(grpcRoutes, stream, code) },
        })
        return listener.http1Server
      },
      clientErrorHandler: createClientErrorHandler(maxHeaderListSize, options.logger, (socket) => listener?.h1ClientError(socket) ?? false),
      genReqId: (req) => requestIdOf(req.headers['x-request-id']),
      // request.log binds the request id on its first enabled line, not per request (request-logger.ts).
      childLoggerFactory: (_parent, bindings) => new RequestLogger(options.logger, bindings),
      // No line per request (the forwarder logs failures); the id's field as the forwarder names it.
      logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'requestId' }),
      exposeHeadRoutes: false,
      return503OnClosing: false,
      // A path find-my-way cannot decode is still forwarded as sent (the pod decides).
      frameworkErrors: (error, request, reply) => {
        if (error.code === 'FST_ERR_BAD_URL') forward(request, reply)
        else onError(error, request, reply)
      },
    })
    const http = options.http
    const forward: ForwardRequest = (request, reply) => {
      // request.log is our RequestLogger (childLoggerFactory); Fastify's types widen it.
      http.handle(request.raw, reply.raw, request.id, request.log as RequestLogger)
      // After handle(): an exception in it still reaches the error handler (internal_error).
      reply.hijack()
    }
    const onError = createErrorHandler()
    // No body is parsed: every method Fastify would read a body for is declared bodyless, so the
    // route gets the raw request stream untouched and no content-type parser runs (nor its
    // 415 for a media type it cannot parse), and no POST pays a parser lookup only to pass its
    // stream on (bench http-forward).
    for (const method of BODY_METHODS) app.addHttpMethod(method, { hasBody: false, overrideExisting: true })
    app.setErrorHandler(onError)
    // What the front door serves. gRPC (an HTTP/2 stream with a gRPC content type): POST to one
    // of the two control-plane methods, which gets the raw stream (spliced, never through Fastify).
    grpcRoutes.set(WATCH_STARGATES_PATH, options.grpc.watchStargates)
    grpcRoutes.set(REGISTER_INFERENCE_SERVER_PATH, options.grpc.registerInferenceServer)
    // Every other request, HTTP/1.1 or h2: the catch-all route to the HTTP forwarder.
    app.all('*', forward)
    // What find-my-way matches no route for (an asterisk-form target, a method Fastify does not
    // route) is forwarded too: the forwarder answers what cannot be sent upstream (bad_request).
    app.setNotFoundHandler(forward)
    if (listener === null) throw new Error('fastify did not call serverFactory')
    this.app = app
    this.listener = listener
  }

  async listen (): Promise<AddressInfo> {
    await this.app.ready()
    return this.listener.listen()
  }

  /** The listener's graceful close (listener.ts), then Fastify's. Idempotent. */
  close (deadlineMs: number): Promise<void> {
    this.#closing ??= (async () => {
      await this.listener.close(deadlineMs)
      await this.app.close()
    })()
    return this.#closing
  }
}

/** A gRPC stream of the front door to its method; what is no POST or no method is UNIMPLEMENTED. */
function routeGrpc (routes: ReadonlyMap<string, GrpcMethod>, stream: ServerHttp2Stream, headers: IncomingHttpHeaders, rawHeaders: readonly string[]): void {
  if (headers[':method'] !== 'POST') {
    respondWithError(stream, grpcError('method_not_post', { method: String(headers[':method']) }))
    return
  }
  const path = headers[':path']
  const method = path === undefined ? undefined : routes.get(path)
  if (method === undefined) respondWithError(stream, grpcError('unknown_method', { path: String(path) }))
  else method.handle(stream, headers, rawHeaders)
}

/** Ends a control-plane stream of a draining connection: by its method (which cancels what it forwards), else with the bare status. */
function endGrpc (routes: ReadonlyMap<string, GrpcMethod>, stream: ServerHttp2Stream, code: GrpcErrorCode): void {
  for (const method of routes.values()) if (method.end(stream, code)) return
  respondWithError(stream, GRPC_ERRORS[code])
}

function respondWithError (stream: ServerHttp2Stream, error: GrpcError): void {
  respondWithStatus(stream, error.status, error.message)
}
