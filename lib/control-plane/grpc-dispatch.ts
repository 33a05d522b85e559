/** Routes gRPC streams of the front door by :path to the StargateControlPlane methods. */
import type { IncomingHttpHeaders, ServerHttp2Stream } from 'node:http2'
import { REGISTER_INFERENCE_SERVER_PATH, WATCH_STARGATES_PATH, respondWithStatus } from './grpc.ts'
import { grpcError, type GrpcError } from './errors.ts'
import type { GrpcStreamHandler } from '../front-door/listener.ts'

export interface GrpcMethods {
  readonly watchStargates: (stream: ServerHttp2Stream) => void
  readonly registerInferenceServer: (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, rawHeaders: readonly string[]) => void
}

export function createGrpcDispatch (methods: GrpcMethods): GrpcStreamHandler {
  return function dispatchGrpc (stream, headers, rawHeaders) {
    const path = headers[':path']
    if (headers[':method'] !== 'POST') {
      respondWith(stream, grpcError('method_not_post', { method: String(headers[':method']) }))
      return
    }
    switch (path) {
      case WATCH_STARGATES_PATH:
        methods.watchStargates(stream)
        return
      case REGISTER_INFERENCE_SERVER_PATH:
        methods.registerInferenceServer(stream, headers, rawHeaders)
        return
      default:
        respondWith(stream, grpcError('unknown_method', { path: String(path) }))
    }
  }
}

function respondWith (stream: ServerHttp2Stream, error: GrpcError): void {
  respondWithStatus(stream, error.status, error.message)
}
