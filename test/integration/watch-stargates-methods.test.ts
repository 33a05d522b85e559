// SPEC §5: the front door answers gRPC methods it does not serve with UNIMPLEMENTED, as a
// trailers-only response that any gRPC client understands.
import t from 'tap'
import grpc from '@grpc/grpc-js'
import { startKubeRouter } from '../fixtures/kube-router.ts'
import { REGISTER_INFERENCE_SERVER, createGrpcClient, stargateService } from '../fixtures/stargate-watch-client.ts'

function unaryError (client: grpc.Client, path: string): Promise<grpc.ServiceError> {
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest(path, (b: Buffer) => b, (b: Buffer) => b, Buffer.alloc(0), (err) => {
      if (err === null) reject(new Error('expected an error'))
      else resolve(err)
    })
  })
}

t.test('an unknown gRPC method answers UNIMPLEMENTED', async (t) => {
  const kr = await startKubeRouter(t)
  const client = createGrpcClient(kr.address)
  t.teardown(() => { client.close() })
  for (const path of ['/stargate.StargateControlPlane/Nope', '/other.Service/WatchStargates']) {
    const err = await unaryError(client, path)
    t.equal(err.code, grpc.status.UNIMPLEMENTED, path)
  }
})

// RegisterInferenceServer is served (registration forwarding, SPEC §5), never UNIMPLEMENTED:
// a registration whose :authority is not an advertised Stargate host is refused with
// INVALID_ARGUMENT.
t.test('RegisterInferenceServer is served: an authority outside the hostname template answers INVALID_ARGUMENT, not UNIMPLEMENTED', async (t) => {
  const kr = await startKubeRouter(t)
  const client = createGrpcClient(kr.address, { authority: 'not-a-stargate.example' })
  t.teardown(() => { client.close() })
  const method = stargateService().RegisterInferenceServer
  if (method === undefined) throw new Error('RegisterInferenceServer missing from the proto')
  const call = client.makeBidiStreamRequest(
    REGISTER_INFERENCE_SERVER,
    method.requestSerialize as (value: object) => Buffer,
    method.responseDeserialize as (bytes: Buffer) => unknown,
  )
  call.on('data', () => { t.fail('no acknowledgement expected') })
  const err = await new Promise<grpc.ServiceError>((resolve) => { call.on('error', resolve) })
  t.equal(err.code, grpc.status.INVALID_ARGUMENT)
  t.equal(err.details, 'registration authority not-a-stargate.example does not match advertised stargate hostname template')
})
