/**
 * SPEC §11, the HTTP/2 WebTransport bridge's drain at the byte level (lib/tunnel/
 * webtransport-h2/bridge.ts), on real HTTP/2 streams over loopback with capsules written by hand:
 * the drain capsule reaches both ends between whole capsules, a new bidirectional stream gets
 * WT_RESET_STREAM and WT_STOP_SENDING with the catalogued code at both ends (after its own
 * capsule, never inside it), and a peer that keeps opening streams while the session drains
 * gets the session closed instead of an ever longer queue of refusals.
 */
import t from 'tap'
import http2, { type ClientHttp2Session, type ClientHttp2Stream, type ServerHttp2Stream } from 'node:http2'
import type { AddressInfo } from 'node:net'
import { Registry } from 'prom-client'
import { WebTransportBridge } from '../../lib/tunnel/webtransport-h2/bridge.ts'
import { DRAIN_WEBTRANSPORT_SESSION } from '../../lib/quic/h3/capsule.ts'
import { createWebTransportMetrics } from '../../lib/tunnel/webtransport-metrics.ts'
import { STREAM_REFUSALS } from '../../lib/tunnel/errors.ts'
import { writeVarint, varintSize } from '../../lib/quic/varint.ts'
import { waitFor } from '../fixtures/wait.ts'

const CODE = STREAM_REFUSALS.draining.code

function capsule (type: number, ...parts: Array<number | Buffer>): Buffer {
  const value = Buffer.concat(parts.map((p) => {
    if (Buffer.isBuffer(p)) return p
    const b = Buffer.alloc(varintSize(p))
    writeVarint(b, 0, p)
    return b
  }))
  const out = Buffer.alloc(varintSize(type) + varintSize(value.length) + value.length)
  value.copy(out, writeVarint(out, writeVarint(out, 0, type), value.length))
  return out
}

const WT_STREAM = 0x190b4d3b
const WT_STREAM_FIN = 0x190b4d3c
const WT_RESET_STREAM = 0x190b4d39
const WT_STOP_SENDING = 0x190b4d3a

interface End {
  readonly bytes: Buffer[]
  received (): Buffer
}

function collect (stream: ServerHttp2Stream | ClientHttp2Stream): End {
  const bytes: Buffer[] = []
  stream.on('data', (chunk: Buffer) => { bytes.push(chunk) })
  stream.on('error', () => {})
  return { bytes, received: () => Buffer.concat(bytes) }
}

/** Capsule (type, first varint of the value) pairs in order, and whether the bytes end between capsules. */
function capsulesOf (bytes: Buffer): Array<[number, number]> {
  const out: Array<[number, number]> = []
  let at = 0
  const read = (): number => {
    const first = bytes[at] as number
    const n = 1 << (first >> 6)
    let v = first & 0x3f
    for (let i = 1; i < n; i++) v = v * 256 + (bytes[at + i] as number)
    at += n
    return v
  }
  while (at < bytes.length) {
    const type = read()
    const length = read()
    const end = at + length
    const first = length > 0 ? read() : -1
    out.push([type, first])
    at = end
  }
  if (at !== bytes.length) throw new Error('the bytes end inside a capsule')
  return out
}

/** The codes (second varint) of the WT_RESET_STREAM and WT_STOP_SENDING capsules in bytes. */
function codesOf (bytes: Buffer): number[] {
  const codes: number[] = []
  let at = 0
  const read = (): number => {
    const first = bytes[at] as number
    const n = 1 << (first >> 6)
    let v = first & 0x3f
    for (let i = 1; i < n; i++) v = v * 256 + (bytes[at + i] as number)
    at += n
    return v
  }
  while (at < bytes.length) {
    const type = read()
    const end = read() + at
    if (type === WT_RESET_STREAM || type === WT_STOP_SENDING) {
      read()
      codes.push(read())
    }
    at = end
  }
  return codes
}

/** A bridge between a "Pylon" stream and a "pod" stream, each end a raw HTTP/2 client/server of the test. */
async function bridged (t: { teardown (fn: () => unknown): void }, maxRefusals?: number): Promise<{ bridge: WebTransportBridge, pylon: ClientHttp2Stream, pod: ServerHttp2Stream, atPylon: End, atPod: End, ended: Promise<string> }> {
  // The router's downstream server (the Pylon dials it) and the pod (the router dials it).
  const front = http2.createServer()
  const podServer = http2.createServer()
  for (const server of [front, podServer]) {
    await new Promise<void>((resolve) => { server.listen(0, '127.0.0.1', resolve) })
    t.teardown(() => { server.close() })
  }
  const downstream = new Promise<ServerHttp2Stream>((resolve) => { front.once('stream', (stream) => { stream.respond({ ':status': 200 }); resolve(stream) }) })
  const podStream = new Promise<ServerHttp2Stream>((resolve) => { podServer.once('stream', (stream) => { stream.respond({ ':status': 200 }); resolve(stream) }) })
  const pylonSession = http2.connect(`http://127.0.0.1:${(front.address() as AddressInfo).port}`)
  const upstreamSession: ClientHttp2Session = http2.connect(`http://127.0.0.1:${(podServer.address() as AddressInfo).port}`)
  t.teardown(() => { pylonSession.destroy(); upstreamSession.destroy() })
  for (const s of [pylonSession, upstreamSession]) s.on('error', () => {})
  const pylon = pylonSession.request({ ':method': 'POST', ':path': '/' }, { endStream: false })
  const upstream = upstreamSession.request({ ':method': 'POST', ':path': '/' }, { endStream: false })
  const pod = await podStream
  const atPylon = collect(pylon)
  const atPod = collect(pod)
  let end: (value: string) => void = () => {}
  const ended = new Promise<string>((resolve) => { end = resolve })
  const bridge = new WebTransportBridge({
    downstream: await downstream,
    upstream,
    upstreamSession,
    trustKey: 'test',
    target: 'stargate-0',
    clock: { now: Date.now() },
    keepAlive: false,
    metrics: createWebTransportMetrics(new Registry()),
    onEnd: (_bridge, e) => { end(e) },
    ...(maxRefusals === undefined ? {} : { maxRefusals }),
  })
  return { bridge, pylon, pod, atPylon, atPod, ended }
}

t.test('the drain capsule reaches both ends between whole capsules; a new stream is refused at both ends after its capsule', async (t) => {
  const { bridge, pylon, pod, atPylon, atPod } = await bridged(t)
  // Stream 1 (the Pylon's) open before the drain; the pod has started a capsule it has not finished.
  pylon.write(capsule(WT_STREAM, 1, Buffer.from('request')))
  const half = capsule(WT_STREAM, 4, Buffer.alloc(100, 7))
  pod.write(half.subarray(0, 20))
  await waitFor(() => atPod.received().length > 0 ? true : undefined)
  bridge.drain('router shutdown')
  await waitFor(() => capsulesOf(atPod.received()).some(([type]) => type === DRAIN_WEBTRANSPORT_SESSION) ? true : undefined, { message: 'the drain capsule at the pod' })
  t.equal(atPylon.received().length, 20, 'the Pylon got the pod\'s half capsule and no drain inside it')
  pod.write(half.subarray(20))
  await waitFor(() => { try { return capsulesOf(atPylon.received()).some(([type]) => type === DRAIN_WEBTRANSPORT_SESSION) ? true : undefined } catch { return undefined } }, { message: 'the drain capsule at the Pylon, after the pod\'s capsule' })
  t.same(capsulesOf(atPylon.received()), [[WT_STREAM, 4], [DRAIN_WEBTRANSPORT_SESSION, -1]])

  // A new stream of the Pylon's (5): its capsule reaches the pod, then the refusal, at both ends.
  pylon.write(capsule(WT_STREAM, 5, Buffer.from('a request after the drain began')))
  await waitFor(() => capsulesOf(atPylon.received()).length >= 4 ? true : undefined, { message: 'the refusal at the Pylon' })
  t.same(capsulesOf(atPylon.received()).slice(2), [[WT_RESET_STREAM, 5], [WT_STOP_SENDING, 5]], 'the Pylon: reset and stop-sending for stream 5')
  await waitFor(() => capsulesOf(atPod.received()).length >= 5 ? true : undefined, { message: 'the refusal at the pod' })
  t.same(capsulesOf(atPod.received()), [[WT_STREAM, 1], [DRAIN_WEBTRANSPORT_SESSION, -1], [WT_STREAM, 5], [WT_RESET_STREAM, 5], [WT_STOP_SENDING, 5]], 'the pod: the stream\'s capsule, then the refusal')
  t.same(codesOf(atPylon.received()), [CODE, CODE], 'both carry 0x44524e at the Pylon')
  t.same(codesOf(atPod.received()), [CODE, CODE], 'and at the pod')

  // Stream 1 and the pod's stream 4 end: the session closes.
  pylon.write(capsule(WT_STREAM_FIN, 1))
  pod.write(capsule(WT_STREAM_FIN, 1))
  pod.write(capsule(WT_STREAM_FIN, 4))
  pylon.write(capsule(WT_STREAM_FIN, 4))
  await waitFor(() => capsulesOf(atPylon.received()).some(([type]) => type === 0x2843) ? true : undefined, { message: 'the close capsule' })
  t.equal(bridge.ledger.open, 0)
})

t.test('a peer that keeps opening streams while the session drains gets it closed', async (t) => {
  const { bridge, pylon, atPylon, ended } = await bridged(t, 2)
  pylon.write(capsule(WT_STREAM, 1, Buffer.from('open before the drain')))
  await new Promise((resolve) => { setTimeout(resolve, 50) })
  bridge.drain('router shutdown')
  for (let id = 5; id <= 17; id += 4) pylon.write(capsule(WT_STREAM, id, Buffer.from('one more')))
  await waitFor(() => { try { return capsulesOf(atPylon.received()).some(([type]) => type === 0x2843) ? true : undefined } catch { return undefined } }, { message: 'the close capsule' })
  t.equal(capsulesOf(atPylon.received()).filter(([type]) => type === WT_RESET_STREAM).length, 2, 'two refusals, then the session closed')
  t.equal(await ended, 'completed')
})
