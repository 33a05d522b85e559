/**
 * The connections to one pod for LLM client requests (SPEC §6, §12): at most `connections`
 * undici Clients of one socket each (no pipelining), and a FIFO of the requests waiting for
 * one. A request is given a connection only when the forwarder submits it (its body buffered,
 * forwarder.ts), and gives it back when it ends for the router, whatever undici is doing.
 *
 *   submit ──▶ idle slot? ──yes──▶ Client.dispatch (connects if its socket is gone)
 *                 │ no
 *                 ▼
 *              waiting FIFO ──▶ the next slot released goes to the oldest live request
 *
 * Why not undici's Pool: it cannot take back a request it was handed, which an attack of 2,100
 * trickling uploads made costly in two ways.
 * - A request waiting in Pool's queue cannot be withdrawn. When its client has gone, undici
 *   still dispatches it, opens a connection for it if none is free, and only then, in
 *   onConnect, lets the handler abort it (nodejs/undici#386); dead requests also stay queued
 *   (memory) until a connection frees. Here a request that ends while waiting leaves the
 *   queue and never reaches undici.
 * - Aborting a running request through undici's abort callback destroys its socket with an
 *   informational error (UND_ERR_INFO), on which the Client puts the aborted request back as
 *   pending and opens a fresh connection for it that no request then uses, idle for the
 *   keep-alive timeout (nodejs/undici#5845: +1,022 idle pod connections after the attack).
 *   Here a running request is aborted by destroying its socket with an ordinary error, which
 *   undici reports as that request's failure, and nothing is reconnected.
 * A request whose client leaves while its connection is being opened cannot be taken back
 * either; when undici then offers it (onConnect), the forwarder refuses it (lateConnect) and a
 * socket that no other request is waiting for is closed rather than kept idle.
 */
import type { Socket } from 'node:net'
import { buildConnector, Client, errors, type Dispatcher } from 'undici'

/** A request the pod's connections carry: an undici dispatch handler that says what state it is in. */
export interface PodRequest extends Dispatcher.DispatchHandler {
  /** Owned by PodConnections: the connection given to the request, or null. */
  slot: PodSlot | null
  /** Owned by PodConnections: the request waits in the FIFO. */
  waiting: boolean
  /** undici called onConnect for this dispatch: its bytes are being written on slot's socket. */
  readonly sent: boolean
  /** What to dispatch, built when the request gets its connection. */
  dispatchOptions (): Dispatcher.DispatchOptions
}

export interface PodConnectionsOptions {
  readonly origin: string
  readonly connections: number
  readonly keepAliveTimeoutMs: number
  /**
   * undici buildConnector options (the connect timeout and, for TLS, secureContext and
   * servername), or a connector of that shape (tests hold a connect open with one).
   */
  readonly connect: buildConnector.BuildOptions | buildConnector.connector
}

/** Why a running request is aborted: an ordinary error (not UND_ERR_INFO), so undici does not retry it. */
export class UpstreamAbortError extends Error {
  readonly code = 'STARGATE_UPSTREAM_ABORTED'
  constructor () {
    super('the router ended the request')
    this.name = 'UpstreamAbortError'
  }
}

/** One connection: an undici Client and the socket its connector made last. */
export class PodSlot {
  readonly client: Client
  socket: Socket | null = null
  /** The socket has carried no request to its end yet. */
  fresh = false
  request: PodRequest | null = null

  constructor (options: PodConnectionsOptions, connector: buildConnector.connector) {
    this.client = new Client(options.origin, {
      pipelining: 1,
      keepAliveTimeout: options.keepAliveTimeoutMs,
      connect: (opts, callback) => {
        connector(opts, (err, socket) => {
          if (socket !== null) {
            this.socket = socket
            this.fresh = true
          }
          ;(callback as (e: Error | null, s: Socket | null) => void)(err, socket)
        })
      },
    })
    // Failures reach each request's handler; this event only mirrors them.
    this.client.on('connectionError', noop)
  }
}

function noop (): void {}

export class PodConnections {
  readonly #options: PodConnectionsOptions
  readonly #connector: buildConnector.connector
  readonly #slots: PodSlot[] = []
  /** Slots without a request, the most recently released last (its socket is the likeliest alive). */
  readonly #idle: PodSlot[] = []
  /** FIFO from #head; entries whose request left are skipped (waiting false). */
  #queue: PodRequest[] = []
  #head = 0
  #waiting = 0
  #holding = 0
  #closed = false
  #destroyed = false
  #drained: (() => void) | null = null
  #closing: Promise<void> | null = null

  constructor (options: PodConnectionsOptions) {
    this.#options = options
    this.#connector = typeof options.connect === 'function' ? options.connect : buildConnector(options.connect)
  }

  /** Requests holding a connection. */
  get holding (): number {
    return this.#holding
  }

  /** Requests waiting for a connection. */
  get waiting (): number {
    return this.#waiting
  }

  get destroyed (): boolean {
    return this.#destroyed
  }

  /** Runs the request on an idle connection now, or on the next one released. */
  submit (request: PodRequest): void {
    if (this.#closed) {
      request.onError?.(new errors.ClientClosedError())
      return
    }
    let slot: PodSlot | null
    try {
      slot = this.#idleSlot()
    } catch (err) {
      // undici refused to set up a connection (an origin it cannot parse): this request fails,
      // not the process; submit runs from a request body's 'end' handler.
      request.onError?.(err as Error)
      return
    }
    if (slot === null) {
      request.waiting = true
      this.#waiting++
      this.#queue.push(request)
      return
    }
    this.#start(slot, request)
  }

  /**
   * The request has ended for the router. settled: undici reported its end (onComplete or
   * onError); otherwise a request on a connection is aborted (module comment). Its connection
   * goes to the oldest waiting request. Idempotent.
   */
  release (request: PodRequest, settled: boolean): void {
    if (request.waiting) {
      request.waiting = false
      this.#waiting--
      this.#compact()
      this.#checkDrained()
      return
    }
    const slot = request.slot
    if (slot === null || slot.request !== request) return
    slot.request = null
    this.#holding--
    if (settled) {
      slot.fresh = false
    } else if (request.sent) {
      // Running: the error reaches the request's onError, which the forwarder ignores (done).
      slot.socket?.destroy(new UpstreamAbortError())
    }
    // Not sent yet: the connection is being opened; lateConnect decides when undici offers it.
    const waiter = this.#dequeue()
    if (waiter !== null) {
      this.#start(slot, waiter)
    } else {
      this.#idle.push(slot)
      this.#checkDrained()
    }
  }

  /** The oldest request still waiting, taken out of the FIFO; null when none. */
  #dequeue (): PodRequest | null {
    while (this.#head < this.#queue.length) {
      const request = this.#queue[this.#head] as PodRequest
      this.#head++
      if (!request.waiting) continue
      request.waiting = false
      this.#waiting--
      this.#compact()
      return request
    }
    this.#compact()
    return null
  }

  /** Drops consumed and departed entries in bulk once they outnumber the live ones. */
  #compact (): void {
    const stale = this.#queue.length - this.#waiting
    if (stale < 64 || stale < this.#waiting) return
    this.#queue = this.#queue.filter((r, i) => i >= this.#head && r.waiting)
    this.#head = 0
  }

  #idleSlot (): PodSlot | null {
    const slot = this.#idle.pop()
    if (slot !== undefined) return slot
    if (this.#slots.length >= this.#options.connections) return null
    const created = new PodSlot(this.#options, this.#connector)
    this.#slots.push(created)
    return created
  }

  #start (slot: PodSlot, request: PodRequest): void {
    slot.request = request
    request.slot = slot
    this.#holding++
    slot.client.dispatch(request.dispatchOptions(), request)
  }

  /**
   * New requests are refused (ClientClosedError); waiting ones still run; resolves when none
   * holds or waits for a connection and every socket is closed. Idempotent.
   */
  close (): Promise<void> {
    this.#closing ??= this.#close()
    return this.#closing
  }

  async #close (): Promise<void> {
    this.#closed = true
    if (this.#holding > 0 || this.#waiting > 0) await new Promise<void>((resolve) => { this.#drained = resolve })
    await Promise.all(this.#slots.map((slot) => slot.client.close().catch(noop)))
  }

  /** Ends everything now: waiting requests fail (ClientDestroyedError), running ones are cut. */
  async destroy (): Promise<void> {
    this.#closed = true
    this.#destroyed = true
    const waiting = this.#queue.slice(this.#head).filter((r) => r.waiting)
    this.#queue = []
    this.#head = 0
    this.#waiting = 0
    for (const request of waiting) {
      request.waiting = false
      request.onError?.(new errors.ClientDestroyedError())
    }
    await Promise.all(this.#slots.map((slot) => slot.client.destroy().catch(noop)))
    // A close() waiting for requests to finish ends now: nothing runs any more.
    const drained = this.#drained
    this.#drained = null
    drained?.()
  }

  #checkDrained (): void {
    if (this.#drained !== null && this.#holding === 0 && this.#waiting === 0) {
      const resolve = this.#drained
      this.#drained = null
      resolve()
    }
  }
}

/**
 * undici offers a request that ended before its connection was open: the caller throws after
 * this (undici then drops the request and keeps the socket). A fresh socket no other request
 * was given is closed instead of left idle.
 */
export function lateConnect (request: PodRequest): void {
  const slot = request.slot
  if (slot !== null && slot.request === null && slot.fresh) slot.socket?.destroy(new UpstreamAbortError())
}
