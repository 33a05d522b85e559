/**
 * gRPC over HTTP/2 wire details the router needs without a gRPC library: status codes,
 * length-prefixed message frames and trailers-only responses
 * (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md).
 */
import type { ServerHttp2Stream } from 'node:http2'

export const GrpcStatus = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
} as const
export type GrpcStatusCode = typeof GrpcStatus[keyof typeof GrpcStatus]

const SERVICE_PATH = '/stargate.StargateControlPlane/'
export const WATCH_STARGATES_PATH = SERVICE_PATH + 'WatchStargates'
export const REGISTER_INFERENCE_SERVER_PATH = SERVICE_PATH + 'RegisterInferenceServer'

export function isGrpcContentType (contentType: string | undefined): boolean {
  return contentType !== undefined && contentType.startsWith('application/grpc') &&
    (contentType.length === 16 || contentType.charCodeAt(16) === 43 /* + */ || contentType.charCodeAt(16) === 59 /* ; */)
}

/** Percent-encodes a grpc-message value as the gRPC spec requires (space to ~ kept, except %). */
export function encodeGrpcMessage (message: string): string {
  let plain = true
  for (let i = 0; i < message.length; i++) {
    const c = message.charCodeAt(i)
    if (c < 0x20 || c > 0x7e || c === 0x25) { plain = false; break }
  }
  if (plain) return message
  let out = ''
  for (const byte of Buffer.from(message, 'utf8')) {
    out += byte < 0x20 || byte > 0x7e || byte === 0x25 ? '%' + byte.toString(16).toUpperCase().padStart(2, '0') : String.fromCharCode(byte)
  }
  return out
}

/** One length-prefixed, uncompressed gRPC message. */
export function frameMessage (message: Uint8Array): Buffer {
  const frame = Buffer.allocUnsafe(5 + message.length)
  frame[0] = 0
  frame.writeUInt32BE(message.length, 1)
  frame.set(message, 5)
  return frame
}

/**
 * Ends a stream that has not sent headers with a trailers-only response (status in the
 * HEADERS frame that ends the stream), which is how gRPC servers report call errors.
 */
export function respondWithStatus (stream: ServerHttp2Stream, code: GrpcStatusCode, message: string): void {
  if (stream.destroyed || stream.closed) return
  if (stream.headersSent) {
    endWithStatus(stream, code, message)
    return
  }
  stream.respond({
    ':status': 200,
    'content-type': 'application/grpc',
    'grpc-status': String(code),
    'grpc-message': encodeGrpcMessage(message),
  }, { endStream: true })
  // A trailers-only response still leaves the request side open; discard what the client sends.
  stream.resume()
}

/** Ends a stream whose response headers were sent (with waitForTrailers) with a status. */
export function endWithStatus (stream: ServerHttp2Stream, code: GrpcStatusCode, message: string): void {
  if (stream.destroyed || stream.closed) return
  const trailers = code === GrpcStatus.OK
    ? { 'grpc-status': '0' }
    : { 'grpc-status': String(code), 'grpc-message': encodeGrpcMessage(message) }
  if (stream.writableEnded) return
  stream.once('wantTrailers', () => { stream.sendTrailers(trailers) })
  stream.end()
}
