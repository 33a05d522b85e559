/**
 * The front door's HTTP error answers ("one error handler"): every status, code and
 * body comes from HTTP_ERRORS (lib/http-forward/errors.ts), whichever layer refuses the request.
 *
 *   connection layer (listener.ts)  an oversized HTTP/2 header list: headersTooLargeAnswers;
 *                                   an HTTP/1.0 request with Transfer-Encoding, a request line
 *                                   that is not HTTP/1.x: refuseRequest; an HTTP/1.1 CONNECT:
 *                                   refuseConnect
 *   Node's HTTP/1.1 parser          bytes it gave up on: createClientErrorHandler (Fastify's
 *                                   clientErrorHandler option), unless a request of that
 *                                   connection is in flight (the listener decides then)
 *   Fastify's request lifecycle     an error thrown or sent on the way to the forwarder:
 *                                   createErrorHandler (Fastify's setErrorHandler)
 *   the forwarder                   its own refusals and upstream failures (forwarder.ts)
 *
 * Fastify's own refusals that today's clients never saw are not errors of the router: a path
 * with bad percent-encoding is forwarded as before (front-door.ts, frameworkErrors), and the pod
 * decides; no body is parsed, so no content type is refused.
 */
import { STATUS_CODES } from 'node:http'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2'
import type { Socket } from 'node:net'
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { HTTP_ERRORS, errorBody, type StaticHttpErrorCode } from '../http-forward/errors.ts'
import { ALLOWED_METHODS, writeErrorResponse } from '../http-forward/forwarder.ts'
import { requestIdOf } from '../http-forward/headers.ts'
import { grpcError, type GrpcError } from '../control-plane/errors.ts'
import { fillMessage } from '../error-catalogue.ts'
import type { Logger } from '../log.ts'

/** What an oversized header list is answered with, per protocol; built once per listener. */
export interface HeadersTooLarge {
  readonly grpc: GrpcError
  readonly body: Buffer
  readonly h1: string
}

export function headersTooLargeAnswers (maxHeaderListSize: number): HeadersTooLarge {
  const fields = { max_bytes: maxHeaderListSize }
  const body = errorBody('headers_too_large', fillMessage(HTTP_ERRORS.headers_too_large.message, fields))
  return { grpc: grpcError('headers_too_large', fields), body, h1: h1ErrorResponse('headers_too_large', body) }
}

/**
 * Fastify's clientErrorHandler: the answer to bytes Node's HTTP/1.1 parser gave up on
 * (HPE_HEADER_OVERFLOW: 431 naming the limit; anything else: 400). Both are complete responses
 * with `connection: close`, written straight to the socket (there is no request object). When
 * `listenerOwns` says a request of that connection is in flight, nothing is written here: the
 * client must not be told 400 about a connection whose request may already be at a pod.
 */
export function createClientErrorHandler (maxHeaderListSize: number, logger: Logger, listenerOwns: (socket: Socket) => boolean): (err: NodeJS.ErrnoException, socket: Socket) => void {
  const tooLarge = headersTooLargeAnswers(maxHeaderListSize).h1
  const badRequest = h1ErrorResponse('bad_request', errorBody('bad_request', HTTP_ERRORS.bad_request.message))
  return function onClientError (err, socket) {
    const owned = listenerOwns(socket)
    if (!owned) {
      if (socket.writable && !socket.destroyed) socket.end(err.code === 'HPE_HEADER_OVERFLOW' ? tooLarge : badRequest)
      else socket.destroy()
    }
    logger.debug({ err: err.code ?? err.message, inFlight: owned }, 'front door http/1.1 client error')
  }
}

/**
 * An HTTP/1.x request refused before it is routed, the connection closing after the answer:
 * bad_request for an HTTP/1.0 request with Transfer-Encoding (RFC 9112 §6.1) or a request line
 * without a version (HTTP/0.9), http_version_not_supported for `HTTP/2.0`.
 */
export function refuseRequest (req: IncomingMessage, res: ServerResponse, code: 'bad_request' | 'http_version_not_supported'): void {
  res.shouldKeepAlive = false
  writeErrorResponse(req, res, code, requestIdOf(req.headers['x-request-id']))
}

/** An HTTP/2 CONNECT (without :protocol, which the front door does not enable): 405 method_not_allowed. */
export function refuseConnectStream (req: Http2ServerRequest, res: Http2ServerResponse): void {
  writeErrorResponse(req, res, 'method_not_allowed', requestIdOf(req.headers['x-request-id']))
}

/**
 * The answer to an HTTP/1.1 CONNECT (Node's 'connect' event, which hands over the socket with
 * no response object): 405 method_not_allowed, and the connection closes.
 */
export const CONNECT_REFUSAL: string = (() => {
  const code = 'method_not_allowed'
  const body = errorBody(code, HTTP_ERRORS[code].message)
  return h1ErrorResponse(code, body, `allow: ${ALLOWED_METHODS}\r\n`)
})()

/** Hands a request to the HTTP forwarder (front-door.ts). */
export type ForwardRequest = (request: FastifyRequest, reply: FastifyReply) => void

/**
 * Fastify's error handler. A client error Fastify raises (4xx) is bad_request; anything else is
 * a fault of the router: internal_error, logged at error with the request's logger (its id;
 * lib/log.ts redacts secrets).
 */
export function createErrorHandler (): (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => void {
  return function onFrontDoorError (error, request, reply) {
    const status = error.statusCode ?? 500
    const code: StaticHttpErrorCode = status >= 400 && status < 500 ? 'bad_request' : 'internal_error'
    if (code === 'internal_error') request.log.error({ err: error.message, code: error.code }, 'front door request failed')
    reply.hijack()
    if (reply.raw.headersSent) reply.raw.destroy()
    else writeErrorResponse(request.raw, reply.raw, code, request.id)
  }
}

/** A complete HTTP/1.1 error response for a connection the parser gave up on (it then closes). */
function h1ErrorResponse (code: 'headers_too_large' | 'bad_request' | 'method_not_allowed', body: Buffer, extraFields = ''): string {
  const { status } = HTTP_ERRORS[code]
  return `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\ncontent-type: application/json\r\nx-stargate-error-code: ${code}\r\n${extraFields}connection: close\r\ncontent-length: ${body.length}\r\n\r\n${body.toString('latin1')}`
}
