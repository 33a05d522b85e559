/**
 * Pylon stand-ins for the control-plane benchmarks, on node:http2 directly (no gRPC library):
 * a registration stream sends one pre-encoded InferenceServerRegistration per send() and
 * calls back once per InferenceServerAck message received, whatever way the DATA frames cut
 * the length-prefixed messages. What a client costs per message is then a write and a few
 * integer operations, so the client process is not what limits a load run.
 */
import http2, { type ClientHttp2Session, type ClientHttp2Stream } from 'node:http2'
import { create, toBinary } from '@bufbuild/protobuf'
import { InferenceServerRegistrationSchema, InferenceServerStatus } from '../../lib/control-plane/gen/stargate/stargate_pb.js'
import { frameMessage, REGISTER_INFERENCE_SERVER_PATH } from '../../lib/control-plane/grpc.ts'

/** A registration as a Pylon sends it every heartbeat: one model with its stats. */
export function registrationMessage (id: string): Buffer {
  const message = create(InferenceServerRegistrationSchema, {
    inferenceServerId: id,
    inferenceServerUrl: 'http://10.0.3.17:8000',
    reverseTunnel: true,
    clusterId: 'bench-cluster',
    models: {
      'meta-llama/Llama-3.1-8B-Instruct': {
        status: InferenceServerStatus.ACTIVE,
        stats: {
          lastMeanInputTps: 1834.5,
          outputTps: 412.25,
          queueSize: 3n,
          queuedInputSize: 5120n,
          maxOutputTps: 950,
          kvCacheCapacityTokens: 262144n,
          kvCacheUsedTokens: 73111n,
          kvCacheFreeTokens: 189033n,
          numRunningQueries: 12n,
          maxEngineConcurrency: 64n,
          totalQueryInputSize: 40960n,
          queueTimeEstimateMsByPriority: { 0: 12n, 1: 40n },
          inputProcessingQueries: 2n,
          outputGenerationQueries: 10n,
          statsObservedAtUnixMs: 1796050281569n,
          statsCapabilities: ['queue_time_estimate'],
          statsSources: ['vllm'],
        },
      },
    },
  })
  return frameMessage(toBinary(InferenceServerRegistrationSchema, message))
}

export function connect (port: number): Promise<ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`, { settings: { enablePush: false } })
    session.once('remoteSettings', () => { session.off('error', reject); resolve(session) })
    session.once('error', reject)
  })
}

/** Follows the 5-byte gRPC length prefixes of a response body and counts whole messages. */
class MessageCounter {
  #headerSeen = 0
  #length = 0
  #bodyLeft = 0

  /** Whole messages completed by this chunk. */
  push (chunk: Buffer): number {
    let complete = 0
    let i = 0
    const n = chunk.length
    while (i < n) {
      if (this.#bodyLeft > 0) {
        const take = Math.min(this.#bodyLeft, n - i)
        this.#bodyLeft -= take
        i += take
        if (this.#bodyLeft === 0) complete++
        continue
      }
      if (this.#headerSeen > 0) this.#length = this.#length * 256 + (chunk[i] as number)
      this.#headerSeen++
      i++
      if (this.#headerSeen === 5) {
        this.#headerSeen = 0
        this.#bodyLeft = this.#length
        this.#length = 0
        if (this.#bodyLeft === 0) complete++
      }
    }
    return complete
  }
}

export interface RegistrationStreamOptions {
  readonly authority: string
  readonly message: Buffer
  /** Called once per ack message, with the stream. */
  readonly onAck: (stream: RegistrationStream) => void
  readonly onError?: (stream: RegistrationStream, err: Error) => void
}

export class RegistrationStream {
  readonly stream: ClientHttp2Stream
  readonly #message: Buffer
  readonly #counter = new MessageCounter()
  /** When the last message was sent (bench/_util.ts now()), for the caller's timing. */
  sentAt = 0
  /** Free for the caller (e.g. a round-trip count). */
  count = 0

  constructor (session: ClientHttp2Session, options: RegistrationStreamOptions) {
    this.#message = options.message
    this.stream = session.request({
      ':method': 'POST',
      ':path': REGISTER_INFERENCE_SERVER_PATH,
      ':authority': options.authority,
      ':scheme': 'http',
      'content-type': 'application/grpc',
      te: 'trailers',
      'x-stargate-registration-heartbeat-ms': '1000',
    }, { endStream: false })
    this.stream.on('data', (chunk: Buffer) => {
      for (let n = this.#counter.push(chunk); n > 0; n--) options.onAck(this)
    })
    this.stream.on('error', (err) => { options.onError?.(this, err) })
  }

  send (at: number): void {
    this.sentAt = at
    this.stream.write(this.#message)
  }

  close (): void {
    if (!this.stream.closed) this.stream.close(http2.constants.NGHTTP2_CANCEL)
  }
}
