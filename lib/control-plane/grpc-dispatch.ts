/** Routes gRPC streams of the front door by :path to the StargateControlPlane methods. */
import type { IncomingHttpHeaders, ServerHttp2Stream } from 'node:http2'
import { GrpcStatus, REGISTER_INFERENCE_SERVER_PATH, WATCH_STARGATES_PATH, respondWithStatus } from './grpc.ts'
import type { GrpcStreamHandler } from '../front-door/listener.ts'

export interface GrpcMethods {
  readonly watchStargates: (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => void
  /** Null until registration forwarding is wired in. */
  readonly registerInferenceServer: ((stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => void) | null
}

export function createGrpcDispatch (methods: GrpcMethods): GrpcStreamHandler {
  const register = methods.registerInferenceServer
  return function dispatchGrpc (stream, headers) {
    const path = headers[':path']
    if (headers[':method'] !== 'POST') {
      respondWithStatus(stream, GrpcStatus.UNIMPLEMENTED, `gRPC requires POST, got ${String(headers[':method'])}`)
      return
    }
    switch (path) {
      case WATCH_STARGATES_PATH:
        methods.watchStargates(stream, headers)
        return
      case REGISTER_INFERENCE_SERVER_PATH:
        if (register !== null) register(stream, headers)
        else respondWithStatus(stream, GrpcStatus.UNIMPLEMENTED, 'RegisterInferenceServer is not served by this router yet')
        return
      default:
        respondWithStatus(stream, GrpcStatus.UNIMPLEMENTED, `unknown method ${String(path)}`)
    }
  }
}
