/**
 * WatchStargates, answered by the router from its own snapshot (SPEC §5), with the fields
 * the Rust router sends: advertise_addr = rendered host + --advertised-grpc-port,
 * http_advertise_addr empty, grpc_pylon_dial_addr = --grpc-pylon-dial-addr. One encoded
 * frame per advertised set is shared by every watcher (encode once, write many). A watcher
 * whose stream is congested holds at most one pending frame, always the latest: every
 * message is a full set, so an intermediate one can be skipped without losing anything.
 *
 * Heartbeats: each watcher gets the set again --watch-heartbeat-ms after the last message
 * written to it (as upstream), from a timer of its own that every write refresh()es. Node keeps
 * timers of one duration in a single list ordered by expiry under one OS timer, so this costs
 * a list move per write, not a timer per message; a shared interval instead let a gap reach
 * 1.5 heartbeats (a message just after one tick skipped the next).
 */
import type { ServerHttp2Stream } from 'node:http2'
import { create, toBinary } from '@bufbuild/protobuf'
import { WatchStargatesResponseSchema } from './gen/stargate/stargate_pb.js'
import { endWithStatus, frameMessage, respondWithStatus } from './grpc.ts'
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
  /** Where heartbeat timers come from: Node's timers, or a test clock. */
  readonly timers?: HeartbeatTimers
}

/** A timer the hub re-arms with refresh() (Node's Timeout has both methods). */
export interface HeartbeatTimer {
  refresh (): unknown
  unref (): unknown
}

/** The two timer calls the hub makes, so a test can drive heartbeats with a clock of its own. */
export interface HeartbeatTimers {
  setTimeout<A> (callback: (arg: A) => void, ms: number, arg: A): HeartbeatTimer
  clearTimeout (timer: HeartbeatTimer): void
}

const NODE_TIMERS: HeartbeatTimers = {
  setTimeout: (callback, ms, arg) => setTimeout(callback, ms, arg),
  clearTimeout: (timer) => { clearTimeout(timer as NodeJS.Timeout) },
}

type SendReason = 'initial' | 'change' | 'heartbeat'

class Watcher {
  readonly stream: ServerHttp2Stream
  readonly hub: WatchStargatesHub
  pending: Buffer | null = null
  blocked = false
  /** Fires --watch-heartbeat-ms after the last message written (refreshed on every write). */
  heartbeat: HeartbeatTimer | null = null

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

function onHeartbeat (watcher: Watcher): void {
  watcher.hub.heartbeat(watcher)
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
  readonly #timers: HeartbeatTimers
  readonly #watchers = new Set<Watcher>()
  #frame: Buffer | null = null
  #advertised: TargetSnapshot | null = null
  #unsubscribe: (() => void) | null = null
  #open = false
  #closed = false

  constructor (options: WatchStargatesOptions) {
    this.#options = options
    this.#timers = options.timers ?? NODE_TIMERS
    this.#unsubscribe = options.snapshot.subscribe((snapshot) => { this.#onSnapshot(snapshot) })
  }

  get size (): number {
    return this.#watchers.size
  }

  /** The frame watchers currently receive, or null while the snapshot is uninitialized. */
  get frame (): Buffer | null {
    return this.#frame
  }

  /**
   * Watches are answered from now on; until then each is refused UNAVAILABLE `router is
   * starting`. The router opens the hub once every listener is up, so that no Pylon is told of
   * Stargates before their tunnels can be opened through it.
   */
  open (): void {
    this.#open = true
  }

  /** Serves one WatchStargates call on a stream whose request headers were accepted. */
  handle (stream: ServerHttp2Stream): void {
    if (this.#closed) {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': String(GRPC_ERRORS.shutting_down.status), 'grpc-message': SHUTDOWN_MESSAGE }, { endStream: true })
      return
    }
    if (!this.#open) {
      respondWithStatus(stream, GRPC_ERRORS.starting.status, GRPC_ERRORS.starting.message)
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
    this.#options.metrics.watchMessagesSent.labels(reason).inc()
    if (!watcher.stream.write(frame)) watcher.blocked = true
    if (watcher.heartbeat === null) {
      watcher.heartbeat = this.#timers.setTimeout(onHeartbeat, this.#options.heartbeatMs, watcher)
      watcher.heartbeat.unref()
    } else {
      watcher.heartbeat.refresh()
    }
  }

  /** The heartbeat of one watcher is due: the current set again (pending if congested). */
  heartbeat (watcher: Watcher): void {
    const frame = this.#frame
    if (frame === null || this.#closed || !this.#watchers.has(watcher)) return
    // Ended or torn down, its 'close' not yet emitted: nothing may be written any more.
    if (watcher.stream.writableEnded || watcher.stream.destroyed) return
    if (watcher.blocked) {
      // The drain writes it (and re-arms the timer); a newer pending change is the same set or newer.
      watcher.pending ??= frame
      return
    }
    this.write(watcher, frame, 'heartbeat')
  }

  remove (watcher: Watcher): void {
    if (watcher.heartbeat !== null) this.#timers.clearTimeout(watcher.heartbeat)
    watcher.heartbeat = null
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
    for (const watcher of this.#watchers) if (watcher.heartbeat !== null) this.#timers.clearTimeout(watcher.heartbeat)
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
  // Host through the front door, not at an address of their own.
  const stargates = snapshot.targets.map((target) => ({
    stargateId: target.identity,
    advertiseAddr: options.template.render(target.identity) + port,
    httpAdvertiseAddr: '',
    grpcPylonDialAddr: options.grpcPylonDialAddr,
  }))
  const message = create(WatchStargatesResponseSchema, { stargates, watchStargateUrls: [...options.remoteStargateUrls] })
  return frameMessage(toBinary(WatchStargatesResponseSchema, message))
}
