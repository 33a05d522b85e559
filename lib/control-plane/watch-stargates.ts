/**
 * WatchStargates, answered by the router from its own snapshot (SPEC §5), with the fields
 * the Rust router sends: advertise_addr = rendered host + --advertised-grpc-port,
 * http_advertise_addr empty, grpc_pylon_dial_addr = --grpc-pylon-dial-addr. One encoded
 * frame per advertised set is shared by every watcher (encode once, write many). A watcher
 * whose stream is congested holds at most one pending frame, always the latest: every
 * message is a full set, so an intermediate one can be skipped without losing anything.
 */
import type { ServerHttp2Stream } from 'node:http2'
import { create, toBinary } from '@bufbuild/protobuf'
import { WatchStargatesResponseSchema } from './gen/stargate/stargate_pb.js'
import { endWithStatus, frameMessage } from './grpc.ts'
import { GRPC_ERRORS, type GrpcErrorCode } from './errors.ts'
import type { HostnameTemplate } from '../routing/hostname-template.ts'
import type { PodTarget, SnapshotReader, TargetSnapshot } from '../discovery/types.ts'
import type { RouterMetrics } from '../metrics/metrics.ts'
import type { Logger } from '../log.ts'

export interface WatchStargatesOptions {
  readonly snapshot: SnapshotReader
  readonly template: HostnameTemplate
  readonly advertisedGrpcPort: number
  /** --grpc-pylon-dial-addr, written into every StargateInfo. */
  readonly grpcPylonDialAddr: string
  /** --remote-stargate-url, already sorted and deduplicated (lib/config). */
  readonly remoteStargateUrls: readonly string[]
  readonly heartbeatMs: number
  readonly metrics: RouterMetrics
  readonly logger: Logger
  readonly now?: () => number
}

type SendReason = 'initial' | 'change' | 'heartbeat'

class Watcher {
  readonly stream: ServerHttp2Stream
  readonly hub: WatchStargatesHub
  pending: Buffer | null = null
  blocked = false
  lastSentAt = 0

  constructor (hub: WatchStargatesHub, stream: ServerHttp2Stream) {
    this.hub = hub
    this.stream = stream
  }
}

function onWatcherDrain (this: ServerHttp2Stream): void {
  const watcher = watchers.get(this)
  if (watcher === undefined) return
  watcher.blocked = false
  const frame = watcher.pending
  if (frame !== null) {
    watcher.pending = null
    watcher.hub.write(watcher, frame, 'change')
  }
}

function onWatcherClose (this: ServerHttp2Stream): void {
  const watcher = watchers.get(this)
  if (watcher !== undefined) watcher.hub.remove(watcher)
}

const watchers = new WeakMap<ServerHttp2Stream, Watcher>()

/** The status message both RPCs end with on shutdown, as the Rust router words it. */
export const SHUTDOWN_MESSAGE: string = GRPC_ERRORS.shutting_down.message

export class WatchStargatesHub {
  readonly #options: WatchStargatesOptions
  readonly #watchers = new Set<Watcher>()
  readonly #now: () => number
  #frame: Buffer | null = null
  #advertised: TargetSnapshot | null = null
  #timer: NodeJS.Timeout | null = null
  #unsubscribe: (() => void) | null = null
  #closed = false

  constructor (options: WatchStargatesOptions) {
    this.#options = options
    this.#now = options.now ?? Date.now
    this.#unsubscribe = options.snapshot.subscribe((snapshot) => { this.#onSnapshot(snapshot) })
    if (options.heartbeatMs > 0) {
      this.#timer = setInterval(() => { this.#heartbeat() }, options.heartbeatMs)
      this.#timer.unref()
    }
  }

  get size (): number {
    return this.#watchers.size
  }

  /** The frame watchers currently receive, or null while the snapshot is uninitialized. */
  get frame (): Buffer | null {
    return this.#frame
  }

  /** Serves one WatchStargates call on a stream whose request headers were accepted. */
  handle (stream: ServerHttp2Stream): void {
    if (this.#closed) {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': String(GRPC_ERRORS.shutting_down.status), 'grpc-message': SHUTDOWN_MESSAGE }, { endStream: true })
      return
    }
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true })
    // The request is one empty WatchStargatesRequest; nothing in it changes the answer.
    stream.resume()
    const watcher = new Watcher(this, stream)
    watchers.set(stream, watcher)
    this.#watchers.add(watcher)
    this.#options.metrics.watchStreamsActive.inc()
    stream.on('drain', onWatcherDrain)
    stream.on('close', onWatcherClose)
    if (this.#frame !== null) this.write(watcher, this.#frame, 'initial')
  }

  /** Writes a frame unless the stream is congested, in which case it becomes the pending one. */
  write (watcher: Watcher, frame: Buffer, reason: SendReason): void {
    if (watcher.blocked) {
      watcher.pending = frame
      return
    }
    watcher.lastSentAt = this.#now()
    this.#options.metrics.watchMessagesSent.labels(reason).inc()
    if (!watcher.stream.write(frame)) watcher.blocked = true
  }

  remove (watcher: Watcher): void {
    if (this.#watchers.delete(watcher)) this.#options.metrics.watchStreamsActive.dec()
  }

  /** Ends one watch stream with the status of code (its connection drains); false when it is no watch. */
  end (stream: ServerHttp2Stream, code: GrpcErrorCode): boolean {
    if (watchers.get(stream) === undefined) return false
    const error = GRPC_ERRORS[code]
    endWithStatus(stream, error.status, error.message)
    return true
  }

  /** Ends every watch stream with UNAVAILABLE so clients re-watch elsewhere; refuses new ones. */
  close (message = SHUTDOWN_MESSAGE): void {
    if (this.#closed) return
    this.#closed = true
    if (this.#timer !== null) clearInterval(this.#timer)
    this.#unsubscribe?.()
    for (const watcher of this.#watchers) endWithStatus(watcher.stream, GRPC_ERRORS.shutting_down.status, message)
  }

  #onSnapshot (snapshot: TargetSnapshot): void {
    if (!snapshot.initialized) return
    // Most snapshot changes (a pod's IP, node, zone) advertise nothing new: compare what is
    // advertised before paying for an encode of the whole set.
    if (this.#frame !== null && sameAdvertised(this.#advertised, snapshot)) return
    this.#advertised = snapshot
    const started = performance.now()
    const frame = encodeStargates(snapshot, this.#options)
    this.#options.metrics.watchEncodeDuration.observe((performance.now() - started) / 1000)
    if (this.#frame !== null && this.#frame.equals(frame)) return // an address change advertises nothing new
    this.#frame = frame
    for (const watcher of this.#watchers) this.write(watcher, frame, 'change')
  }

  #heartbeat (): void {
    const frame = this.#frame
    if (frame === null) return
    // Watchers that got a message recently are skipped; each gets one at least every heartbeat.
    const due = this.#now() - this.#options.heartbeatMs / 2
    for (const watcher of this.#watchers) {
      if (watcher.lastSentAt <= due) this.write(watcher, frame, 'heartbeat')
    }
  }
}

/** Whether two snapshots advertise the same entries: an entry is made from the identity only. */
function sameAdvertised (a: TargetSnapshot | null, b: TargetSnapshot): boolean {
  if (a === null || a.targets.length !== b.targets.length) return false
  const x = a.targets
  const y = b.targets
  for (let i = 0; i < x.length; i++) {
    if ((x[i] as PodTarget).identity !== (y[i] as PodTarget).identity) return false
  }
  return true
}

/** The framed WatchStargatesResponse advertising every ready target, sorted by id. */
export function encodeStargates (
  snapshot: TargetSnapshot,
  options: Pick<WatchStargatesOptions, 'template' | 'advertisedGrpcPort' | 'grpcPylonDialAddr' | 'remoteStargateUrls'>
): Buffer {
  const port = `:${options.advertisedGrpcPort}`
  // http_advertise_addr stays empty, as the Rust router sends it: LLM clients reach pods by
  // Host through the front door, not at an address of their own (issue 13).
  const stargates = snapshot.targets.map((target) => ({
    stargateId: target.identity,
    advertiseAddr: options.template.render(target.identity) + port,
    httpAdvertiseAddr: '',
    grpcPylonDialAddr: options.grpcPylonDialAddr,
  }))
  const message = create(WatchStargatesResponseSchema, { stargates, watchStargateUrls: [...options.remoteStargateUrls] })
  return frameMessage(toBinary(WatchStargatesResponseSchema, message))
}
