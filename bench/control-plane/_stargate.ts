/**
 * The Stargate of bench/control-plane/registration.bench.ts, in its own process: @grpc/grpc-js
 * serving RegisterInferenceServer with the repository's .proto, acking every registration
 * message as test/fixtures/stub-stargate.ts does (reverse_tunnel_target = its advertised host
 * and QUIC port, x-stargate-pod in the response metadata). Unlike that fixture it records
 * nothing: a benchmark sends millions of messages.
 *
 * Prints {"port": N} once listening. Usage: node _stargate.ts <ip>
 */
import * as grpc from '@grpc/grpc-js'
import { StargateControlPlane, type InferenceServerAck, type InferenceServerRegistration } from '../../test/fixtures/stargate-proto.ts'

const ip = process.argv[2] ?? '127.0.0.1'
const ACK: InferenceServerAck = { reverseTunnelTarget: 'stargate-0.stargate.external:50072', reverseTunnelPylonDialAddr: '' }

const server = new grpc.Server()
server.addService(StargateControlPlane.service, {
  registerInferenceServer: (call: grpc.ServerDuplexStream<InferenceServerRegistration, InferenceServerAck>) => {
    const header = new grpc.Metadata()
    header.set('x-stargate-pod', 'stargate-0')
    call.sendMetadata(header)
    call.on('data', () => { call.write(ACK) })
    call.on('end', () => { call.end() })
    call.on('error', () => {})
  },
  watchStargates: (call: grpc.ServerWritableStream<unknown, unknown>) => {
    call.emit('error', { code: grpc.status.UNIMPLEMENTED, details: 'the bench stargate does not serve WatchStargates' })
  },
})
server.bindAsync(`${ip}:0`, grpc.ServerCredentials.createInsecure(), (err, port) => {
  if (err !== null) throw err
  console.log(JSON.stringify({ port }))
})

// Exit on SIGTERM through process.exit, so that a run under --cpu-prof writes its profile.
process.on('SIGTERM', () => { process.exit(0) })
