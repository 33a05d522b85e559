/** Routes gRPC streams of the front door by :path to the StargateControlPlane methods. */
import type { IncomingHttpHeaders, ServerHttp2Stream } from 'node:http2'
import { GrpcStatus, REGISTER_INFERENCE_SERVER_PATH, WATCH_STARGATES_PATH, respondWithStatus } from './grpc.ts'
import type { GrpcStreamHandler } from '../front-door/listener.ts'

export interface GrpcMethods {
  readonly watchStargates: (stream: ServerHttp2Stream) => void
  readonly registerInferenceServer: (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, rawHeaders: readonly string[]) => void
}

export function createGrpcDispatch (methods: GrpcMethods): GrpcStreamHandler {
  return function dispatchGrpc (stream, headers, rawHeaders) {
    const path = headers[':path']
    if (headers[':method'] !== 'POST') {
      respondWithStatus(stream, GrpcStatus.UNIMPLEMENTED, `gRPC requires POST, got ${String(headers[':method'])}`)
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
        respondWithStatus(stream, GrpcStatus.UNIMPLEMENTED, `unknown method ${String(path)}`)
    }
  }
}
