// SPEC §5 framing: grpc-message percent-encoding and length-prefixed frames
// (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md), and the
// WatchStargatesResponse the router encodes from a snapshot, decoded by protobuf-es.
import t from 'tap'
import { fromBinary } from '@bufbuild/protobuf'
import { encodeGrpcMessage, frameMessage, isGrpcContentType } from '../../lib/control-plane/grpc.ts'
import { encodeStargates } from '../../lib/control-plane/watch-stargates.ts'
import { WatchStargatesResponseSchema } from '../../lib/control-plane/gen/stargate/stargate_pb.js'
import { compileHostnameTemplate, type HostnameTemplate } from '../../lib/routing/hostname-template.ts'
import { SnapshotStore } from '../../lib/discovery/snapshot-store.ts'
import type { PodTarget, TargetSnapshot } from '../../lib/discovery/types.ts'

t.test('grpc-message keeps printable ASCII and percent-encodes %, control and non-ASCII characters', async (t) => {
  const cases: Array<[string, string]> = [
    ['target stargate stargate-0 is not ready', 'target stargate stargate-0 is not ready'],
    ['', ''],
    [' !"#$&\'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~', ' !"#$&\'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~'],
    ['100%', '100%25'],
    ['%25', '%2525'],
    ['line one\nline two', 'line one%0Aline two'],
    ['tab\there', 'tab%09here'],
    ['\r\n', '%0D%0A'],
    ['\x00', '%00'],
    ['del\x7f', 'del%7F'],
    ['café', 'caf%C3%A9'],
    ['模型', '%E6%A8%A1%E5%9E%8B'],
    ['🙂', '%F0%9F%99%82'],
  ]
  for (const [message, want] of cases) t.equal(encodeGrpcMessage(message), want, JSON.stringify(message))
})

t.test('percent-encoded grpc-message decodes back to the original text', async (t) => {
  for (const message of ['100% done: café ✓\nnext', 'plain', '%%']) {
    t.equal(decodeURIComponent(encodeGrpcMessage(message)), message)
  }
})

t.test('a frame is a zero compression flag, a big-endian length and the message bytes', async (t) => {
  t.strictSame([...frameMessage(new Uint8Array([]))], [0, 0, 0, 0, 0])
  t.strictSame([...frameMessage(new Uint8Array([1, 2, 3]))], [0, 0, 0, 0, 3, 1, 2, 3])
  const big = frameMessage(new Uint8Array(300).fill(7))
  t.equal(big.length, 305)
  t.strictSame([...big.subarray(0, 5)], [0, 0, 0, 1, 44])
  t.ok(big.subarray(5).every((b) => b === 7))
  const large = frameMessage(new Uint8Array(0x010304))
  t.strictSame([...large.subarray(0, 5)], [0, 0, 0x01, 0x03, 0x04])
})

t.test('only application/grpc content types are gRPC', async (t) => {
  const cases: Array<[string | undefined, boolean]> = [
    ['application/grpc', true],
    ['application/grpc+proto', true],
    ['application/grpc;charset=utf-8', true],
    ['application/grpc-web', false],
    ['application/grpcx', false],
    ['application/json', false],
    ['', false],
    [undefined, false],
  ]
  for (const [contentType, want] of cases) t.equal(isGrpcContentType(contentType), want, String(contentType))
})

function compile (source: string): HostnameTemplate {
  const result = compileHostnameTemplate(source, 'stargate')
  if (!result.ok) throw new Error(result.message)
  return result.template
}

function target (identity: string, httpPort: number | null): PodTarget {
  return { identity, namespace: 'stargate', address: '10.0.0.1', host: '10.0.0.1', grpcPort: 50051, quicPort: 50052, httpPort, nodeName: null, zone: null, serving: true }
}

function snapshotOf (targets: readonly PodTarget[]): TargetSnapshot {
  const store = new SnapshotStore()
  store.markInitialized()
  for (const x of targets) store.stage(x.identity, x)
  store.flush()
  return store.current()
}

function decode (frame: Buffer): { stargates: unknown[], watchStargateUrls: string[] } {
  if (frame[0] !== 0) throw new Error('compressed flag set')
  if (frame.readUInt32BE(1) !== frame.length - 5) throw new Error('length prefix does not match')
  const message = fromBinary(WatchStargatesResponseSchema, frame.subarray(5))
  return {
    stargates: message.stargates.map((s) => ({
      stargateId: s.stargateId,
      advertiseAddr: s.advertiseAddr,
      httpAdvertiseAddr: s.httpAdvertiseAddr,
      grpcPylonDialAddr: s.grpcPylonDialAddr,
    })),
    watchStargateUrls: [...message.watchStargateUrls],
  }
}

t.test('WatchStargates advertises every ready target sorted by id with its rendered host, the advertised port, the dial URI and no http address', async (t) => {
  const snapshot = snapshotOf([target('stargate-2', null), target('stargate-0', 8000), target('stargate-10', 8000)])
  const frame = encodeStargates(snapshot, {
    template: compile('{pod_name}.{namespace}.stargate.example'),
    advertisedGrpcPort: 443,
    grpcPylonDialAddr: 'https://router.example:443',
    remoteStargateUrls: ['https://router-b.example:50071', 'https://router-c.example:50071'],
  })
  t.strictSame(decode(frame), {
    stargates: [
      { stargateId: 'stargate-0', advertiseAddr: 'stargate-0.stargate.stargate.example:443', httpAdvertiseAddr: '', grpcPylonDialAddr: 'https://router.example:443' },
      { stargateId: 'stargate-10', advertiseAddr: 'stargate-10.stargate.stargate.example:443', httpAdvertiseAddr: '', grpcPylonDialAddr: 'https://router.example:443' },
      { stargateId: 'stargate-2', advertiseAddr: 'stargate-2.stargate.stargate.example:443', httpAdvertiseAddr: '', grpcPylonDialAddr: 'https://router.example:443' },
    ],
    watchStargateUrls: ['https://router-b.example:50071', 'https://router-c.example:50071'],
  })
})

t.test('an empty snapshot encodes an empty set, and no remote URLs stay empty', async (t) => {
  const frame = encodeStargates(snapshotOf([]), {
    template: compile('{pod_name}.stargate.external'),
    advertisedGrpcPort: 50071,
    grpcPylonDialAddr: 'http://router:50071',
    remoteStargateUrls: [],
  })
  t.strictSame([...frame], [0, 0, 0, 0, 0], 'proto3 encodes an empty message as zero bytes')
  t.strictSame(decode(frame), { stargates: [], watchStargateUrls: [] })
})

t.test('the same set encodes to the same bytes whatever order it was built in', async (t) => {
  const options = { template: compile('{pod_name}.stargate.external'), advertisedGrpcPort: 50071, grpcPylonDialAddr: 'http://router:50071', remoteStargateUrls: [] }
  const a = encodeStargates(snapshotOf([target('b', null), target('a', 1)]), options)
  const b = encodeStargates(snapshotOf([target('a', 1), target('b', null)]), options)
  t.ok(a.equals(b))
})
