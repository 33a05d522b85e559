/**
 * Route checkers of the workload conformance matrix. Each checker proves one way a
 * Pylon or an LLM client reaches a Stargate pod through the router:
 *
 * - `reaches`: an advertised identity answers through the router, from the pod of that name,
 *   at the pod's CURRENT IP and port (the request is tagged, and the tag must show up in the
 *   stub that runs at that IP:port now; a stale address would hit no stub or a dead one);
 * - `refuses`: a name that is not advertised (a pod not ready, terminating or gone, or a
 *   dashed-IP alias) is refused by the router with the SPEC's error (for a tunnel refused from
 *   its Initial, the error the router counts), and does not reach the pod;
 * - `untargeted` (optional): a request that names no pod reaches a serving pod, never a warming
 *   one (LLM HTTP goes only to serving targets).
 *
 * ROUTE_CHECKS lists the checkers the matrix runs for every pod in every phase. It holds gRPC
 * registration (SPEC §5) and LLM HTTP (SPEC §6). The reverse tunnel checkers (raw QUIC by SNI,
 * WebTransport by SNI, SPEC §7) are added to ROUTE_CHECKS by the tunnel issues. Such a checker
 * implements `prepare` to return what it needs before the cluster and router start: a
 * `quicServer` factory that starts its tunnel stub on every pod's `quic` port
 * (test/fixtures/cluster/pod-runtime.ts; at most one checker may provide one) and `routerArgs`
 * (TLS material, --quic-insecure or --upstream-tls-cert-path, --tunnel-protocol); its `reaches`
 * dials the router's tunnel listener (`router.router.tunnel.udp` / `.tcp`) with SNI = the pod's
 * advertised host and finds its tag in the stub at the pod's current IP; its `refuses` expects
 * the unknown-SNI rejection. Raw QUIC and WebTransport use different --tunnel-protocol values, so
 * they cannot share one router: the WebTransport checker goes into its own matrix rows (ROWS in
 * workload-matrix.test.ts carry their own list of checkers), the raw QUIC one into ROUTE_CHECKS.
 */
import * as grpc from '@grpc/grpc-js'
import { request } from '../fixtures/http-client.ts'
import type { KubeRouter } from '../fixtures/kube-router.ts'
import type { Teardown } from '../fixtures/kube-router.ts'
import type { ClusterPod } from '../fixtures/cluster/cluster.ts'
import type { PodRuntimeOptions, QuicServerFactory } from '../fixtures/cluster/pod-runtime.ts'
import { StargateControlPlane, type InferenceServerAck, type InferenceServerRegistration, type StargateInfo } from '../fixtures/stargate-proto.ts'
import { createQuicTls, type QuicTls } from '../fixtures/quic-tls.ts'
import { StubStargateQuic } from '../fixtures/quic-stargate.ts'
import { PylonTunnel } from '../fixtures/quic-pylon.ts'
import { StubWtStargate } from '../fixtures/webtransport-stargate.ts'
import { openPylonSession, type PylonTarget } from '../fixtures/webtransport-pylon.ts'
import { connect as tlsConnect } from 'node:tls'
import { once } from 'node:events'

/** An advertised pod: what the router said about it, and the pod as it runs now. */
export interface AdvertisedRoute {
  readonly router: KubeRouter
  readonly stargate: StargateInfo
  readonly pod: ClusterPod
  /** The pod is Ready (its endpoint serving): false while it warms up behind a publishNotReadyAddresses Service. */
  readonly serving: boolean
}

/** A request that names no pod; `serving` are the pods that may answer it. */
export interface UntargetedRoute {
  readonly router: KubeRouter
  readonly serving: readonly ClusterPod[]
}

/** A name the router must not route: `host` is the name rendered like an advertised host. */
export interface RefusedRoute {
  readonly router: KubeRouter
  readonly identity: string
  readonly host: string
  /** The pod under that name when it still runs (not ready or terminating), else null. */
  readonly pod: ClusterPod | null
}

/** Null when the route behaves; otherwise what went wrong, in one line. */
export type CheckResult = string | null

/** What a checker needs from the cluster and the router, set up before either starts. */
export interface RouteCheckSetup {
  /** Extra router flags. */
  readonly routerArgs?: readonly string[]
  /** Serves every pod's `quic` (UDP) port; at most one checker may provide it. */
  readonly quicServer?: QuicServerFactory
}

export interface RouteChecker {
  readonly name: string
  /** Called once per matrix row, before the cluster and the router start. */
  prepare? (t: Teardown): Promise<RouteCheckSetup>
  reaches (route: AdvertisedRoute): Promise<CheckResult>
  refuses (route: RefusedRoute): Promise<CheckResult>
  untargeted? (route: UntargetedRoute): Promise<CheckResult>
}

/** Merges what the checkers need: router flags in order, the one quic server, if any. */
export async function prepareRouteChecks (t: Teardown, checks: readonly RouteChecker[]): Promise<{ routerArgs: string[], runtime: PodRuntimeOptions }> {
  const routerArgs: string[] = []
  let quic: { by: string, factory: QuicServerFactory } | null = null
  for (const check of checks) {
    const setup = await check.prepare?.(t) ?? {}
    routerArgs.push(...(setup.routerArgs ?? []))
    if (setup.quicServer === undefined) continue
    if (quic !== null) throw new Error(`route checks ${quic.by} and ${check.name} both want to serve the pods' quic port`)
    quic = { by: check.name, factory: setup.quicServer }
  }
  return { routerArgs, runtime: quic === null ? {} : { quicServer: quic.factory } }
}

let tagCounter = 0
function nextTag (kind: string): string {
  return `conformance-${kind}-${process.pid}-${++tagCounter}`
}

interface RegistrationOutcome {
  readonly status: grpc.StatusObject | null
  readonly pod: string | null
  readonly acks: InferenceServerAck[]
}

/** One registration update through the router with :authority = authority, then a clean end. */
function registerOnce (router: KubeRouter, authority: string, inferenceServerId: string, timeoutMs = 5000): Promise<RegistrationOutcome> {
  const client = new StargateControlPlane(router.address, grpc.credentials.createInsecure(), {
    'grpc.default_authority': authority,
    'grpc.use_local_subchannel_pool': 1,
  }) as unknown as grpc.Client & {
    registerInferenceServer: (md: grpc.Metadata) => grpc.ClientDuplexStream<InferenceServerRegistration, InferenceServerAck>
  }
  const metadata = new grpc.Metadata()
  metadata.set('x-stargate-registration-heartbeat-ms', '1000')
  const call = client.registerInferenceServer(metadata)
  let pod: string | null = null
  const acks: InferenceServerAck[] = []
  return new Promise((resolve) => {
    let done = false
    const timer = setTimeout(() => { finish(null) }, timeoutMs)
    function finish (status: grpc.StatusObject | null): void {
      if (done) return
      done = true
      clearTimeout(timer)
      if (status === null) call.cancel()
      client.close()
      resolve({ status, pod, acks })
    }
    call.on('metadata', (md: grpc.Metadata) => {
      const value = md.get('x-stargate-pod')[0]
      if (value !== undefined) pod = String(value)
    })
    call.on('data', (ack: InferenceServerAck) => {
      acks.push(ack)
      call.end()
    })
    call.on('status', finish)
    call.on('error', () => {})
    call.write({ inferenceServerId, inferenceServerUrl: 'http://127.0.0.1:9000', reverseTunnel: true, clusterId: 'conformance' })
  })
}

function describeStatus (status: grpc.StatusObject | null): string {
  return status === null ? 'no status within the timeout' : `${grpc.status[status.code] ?? status.code} "${status.details}"`
}

/** RegisterInferenceServer by :authority (SPEC §5). */
export const grpcRegistrationCheck: RouteChecker = {
  name: 'grpc registration',
  async reaches ({ router, stargate, pod }) {
    const tag = nextTag('grpc')
    const outcome = await registerOnce(router, stargate.advertiseAddr, tag)
    if (outcome.status?.code !== grpc.status.OK) return `registration to ${stargate.advertiseAddr} ended ${describeStatus(outcome.status)}`
    if (outcome.pod !== pod.name) return `registration to ${stargate.advertiseAddr} was answered by pod ${String(outcome.pod)}`
    if (outcome.acks.length !== 1) return `registration to ${stargate.advertiseAddr} got ${outcome.acks.length} acks, want 1`
    const stub = pod.process.stargate
    const seen = stub.registrations.find((r) => r.messages[0]?.inferenceServerId === tag)
    if (seen === undefined) return `the pod's current container at ${pod.ip}:${stub.port} never saw registration ${tag} (routed to a stale address?)`
    if (seen.authority !== stargate.advertiseAddr) return `the pod saw :authority ${seen.authority}, want ${stargate.advertiseAddr}`
    return null
  },
  async refuses ({ router, identity, host, pod }) {
    const tag = nextTag('grpc-refused')
    const authority = `${host}:${router.frontDoorPort}`
    const outcome = await registerOnce(router, authority, tag)
    const want = `target stargate ${identity} is not ready`
    if (outcome.status?.code !== grpc.status.UNAVAILABLE || outcome.status.details !== want) {
      return `registration to ${authority} ended ${describeStatus(outcome.status)}, want UNAVAILABLE "${want}"`
    }
    if (pod !== null && pod.process.stargate.registrations.some((r) => r.messages[0]?.inferenceServerId === tag)) {
      return `registration to ${authority} reached the pod although it is not advertised`
    }
    return null
  },
}

/** Requests naming no pod per phase: enough for a warming pod to be picked if it could be. */
const UNTARGETED_REQUESTS = 4

/** LLM HTTP by Host, and balanced when no pod is named (SPEC §6). */
export const llmHttpCheck: RouteChecker = {
  name: 'llm http',
  async reaches ({ router, stargate, pod, serving }) {
    // The Host is the advertised host (http_advertise_addr is empty, as upstream sends it).
    const tag = nextTag('http')
    const reply = await request(router.frontDoorPort, { host: stargate.advertiseAddr, headers: { 'x-conformance-tag': tag } })
    const llm = pod.process.llm
    if (!serving) {
      // Warming (or failing readiness) behind a publishNotReadyAddresses Service: no LLM traffic.
      const code = reply.headers['x-stargate-error-code']
      if (reply.status !== 503 || code !== 'target_not_serving') return `POST to Host ${stargate.advertiseAddr} of a pod that is not serving answered ${reply.status} (${String(code)}), want 503 target_not_serving`
      if (llm.requests.some((r) => r.headers['x-conformance-tag'] === tag)) return `request to Host ${stargate.advertiseAddr} reached the pod although it is not serving`
      return null
    }
    if (reply.status !== 200) return `POST to Host ${stargate.advertiseAddr} answered ${reply.status} ${reply.body.slice(0, 200)}`
    const answeredBy = reply.headers['x-stargate-pod']
    if (answeredBy !== pod.name) return `Host ${stargate.advertiseAddr} was answered by pod ${String(answeredBy)}`
    if (!llm.requests.some((r) => r.headers['x-conformance-tag'] === tag)) return `the pod's current container at ${pod.ip}:${llm.port} never saw request ${tag} (routed to a stale address?)`
    return null
  },
  async refuses ({ router, host, pod }) {
    const tag = nextTag('http-refused')
    const reply = await request(router.frontDoorPort, { host: `${host}:${router.frontDoorPort}`, headers: { 'x-conformance-tag': tag } })
    const code = reply.headers['x-stargate-error-code']
    if (reply.status !== 404 || code !== 'unknown_target') return `POST to Host ${host} answered ${reply.status} (${String(code)}), want 404 unknown_target`
    if (pod !== null && pod.process.llm.requests.some((r) => r.headers['x-conformance-tag'] === tag)) return `request to Host ${host} reached the pod although it is not advertised`
    return null
  },
  async untargeted ({ router, serving }) {
    for (let i = 0; i < UNTARGETED_REQUESTS; i++) {
      const tag = nextTag('http-any')
      const reply = await request(router.frontDoorPort, { host: 'llm.example.com', headers: { 'x-conformance-tag': tag } })
      if (serving.length === 0) {
        const code = reply.headers['x-stargate-error-code']
        if (reply.status !== 503 || code !== 'no_ready_targets') return `with no serving pod a request answered ${reply.status} (${String(code)}), want 503 no_ready_targets`
        continue
      }
      const answeredBy = reply.headers['x-stargate-pod']
      const pod = serving.find((p) => p.name === answeredBy)
      if (reply.status !== 200 || pod === undefined) return `a request was answered ${reply.status} by ${String(answeredBy)}, want a serving pod of [${serving.map((p) => p.name).join(', ')}]`
      if (!pod.process.llm.requests.some((r) => r.headers['x-conformance-tag'] === tag)) return `${pod.name}'s current container never saw request ${tag}`
    }
    return null
  },
}

/** A teardown that closes a dialled tunnel right after its check, not at the end of the row. */
class CheckScope implements Teardown {
  readonly #fns: Array<() => unknown> = []
  teardown (fn: () => unknown): void { this.#fns.push(fn) }
  async close (): Promise<void> { for (const fn of this.#fns.reverse()) await fn() }
}

function tunnelPort (router: KubeRouter): number {
  const udp = router.router.tunnel.udp
  if (udp === null) throw new Error('the router has no raw QUIC tunnel listener')
  return udp.port
}

/** The reverse tunnel by SNI over raw QUIC (SPEC §7): dial the router with the pod's host. */
export function rawQuicTunnelCheck (): RouteChecker {
  let tls: QuicTls | null = null
  return {
    name: 'raw quic tunnel',
    async prepare (t) {
      tls = await createQuicTls(t)
      const material = tls
      return {
        // Only the pods' trust: a router identity would also turn the front door to TLS, which
        // the other checkers dial in cleartext. The Pylon side skips verifying the router's
        // generated identity; tunnel TLS verification has its own tests (raw-quic-*).
        routerArgs: ['--upstream-tls-cert-path', material.caPath],
        quicServer: async ({ ip, port }) => StubStargateQuic.start(t, { ip, port, certPem: material.stargate.chainPem, keyPem: material.stargate.keyPem }),
      }
    },
    async reaches ({ router, stargate, pod }) {
      if (tls === null) throw new Error('prepare was not called')
      const host = stargate.advertiseAddr.slice(0, stargate.advertiseAddr.lastIndexOf(':'))
      const stub = pod.process.quic as StubStargateQuic
      const before = stub.tunnels.length
      const scope = new CheckScope()
      try {
        const pylon = await PylonTunnel.dial(scope, { port: tunnelPort(router), serverName: host, caPem: null })
        await pylon.ready()
        const accepted = await stub.tunnel(before + 1)
        if (accepted.serverName !== host) return `the pod's tunnel stub saw SNI ${String(accepted.serverName)}, want ${host}`
        const tag = nextTag('quic')
        const answer = (await stub.request(accepted, tag)).toString()
        if (answer !== `pylon:${tag}`) return `a request from the pod through the tunnel came back as ${JSON.stringify(answer)}`
        return null
      } catch (err) {
        return `tunnel to ${host}: ${(err as Error).message}`
      } finally {
        await scope.close()
      }
    },
    async refuses ({ router, host, pod }) {
      if (tls === null) throw new Error('prepare was not called')
      const stub = pod === null ? null : pod.process.quic as StubStargateQuic
      const before = stub?.tunnels.length ?? 0
      const scope = new CheckScope()
      const refusals = async (): Promise<number> => await router.metric('stargate_k8s_router_quic_connections_total', { outcome: 'target_unavailable' }) ?? 0
      try {
        const counted = await refusals()
        const pylon = await PylonTunnel.dial(scope, { port: tunnelPort(router), serverName: host, caPem: null })
        const closed = await pylon.closedWith()
        // Refused from the Initial: APPLICATION_ERROR without a reason (RFC 9000 §10.2.3); the
        // router counts why.
        if (closed.app || closed.code !== 0x0c || closed.reason !== '') return `a tunnel to ${host} closed with ${JSON.stringify(closed)}, want a transport close APPLICATION_ERROR (0x0c) without a reason`
        if (await refusals() !== counted + 1) return `a tunnel to ${host} was not counted as target_unavailable`
        if (stub !== null && stub.tunnels.length !== before) return `a tunnel to ${host} reached the pod although it is not advertised`
        return null
      } finally {
        await scope.close()
      }
    },
  }
}

/** The router's (generated, self-signed) tunnel certificate, to trust it as its own CA. */
async function tunnelCertificate (port: number, servername: string): Promise<string> {
  const socket = tlsConnect({ port, host: '127.0.0.1', servername, rejectUnauthorized: false, ALPNProtocols: ['h2'] })
  await once(socket, 'secureConnect')
  const pem = socket.getPeerX509Certificate()?.toString() ?? ''
  socket.destroy()
  return pem
}

/** The reverse tunnel by SNI over WebTransport (HTTP/2), SPEC §7; needs --tunnel-protocol webtransport. */
export function webTransportTunnelCheck (): RouteChecker {
  let routerCa: string | null = null
  const target = async (router: KubeRouter, host: string): Promise<PylonTarget> => {
    const tcp = router.router.tunnel.tcp
    if (tcp === null) throw new Error('the router has no WebTransport listener')
    routerCa ??= await tunnelCertificate(tcp.port, host)
    return { host: '127.0.0.1', port: tcp.port, servername: host, ca: routerCa }
  }
  return {
    name: 'webtransport tunnel',
    async prepare (t) {
      const tls = await createQuicTls(t)
      return {
        routerArgs: ['--tunnel-protocol', 'webtransport', '--upstream-tls-cert-path', tls.caPath],
        quicServer: async ({ podName, ip, port }) => {
          const stub = await StubWtStargate.start({ podName, ip, port, certPem: tls.stargate.chainPem, keyPem: tls.stargate.keyPem })
          return { port: stub.port, stub, close: () => stub.close() }
        },
      }
    },
    async reaches ({ router, stargate, pod }) {
      const host = stargate.advertiseAddr.slice(0, stargate.advertiseAddr.lastIndexOf(':'))
      const stub = (pod.process.quic as unknown as { stub: StubWtStargate }).stub
      const tag = nextTag('wt')
      const scope = new CheckScope()
      try {
        const wt = await openPylonSession(scope, await target(router, host), { headers: { 'x-inference-server-id': tag } })
        if (wt.status !== 200 || wt.wt === null) return `a WebTransport session to ${host} answered ${wt.status} ${wt.body.slice(0, 200)}`
        const seen = stub.requests.find((r) => r.headers['x-inference-server-id'] === tag)
        if (seen === undefined) return `the pod's current container at ${pod.ip} never saw session ${tag} (routed to a stale address?)`
        if (seen.servername !== host) return `the pod saw SNI ${String(seen.servername)}, want ${host}`
        return null
      } catch (err) {
        return `session to ${host}: ${(err as Error).message}`
      } finally {
        await scope.close()
      }
    },
    async refuses ({ router, host, pod }) {
      const tag = nextTag('wt-refused')
      const scope = new CheckScope()
      try {
        const wt = await openPylonSession(scope, await target(router, host), { headers: { 'x-inference-server-id': tag } })
        if (wt.status !== 503) return `a WebTransport session to ${host} answered ${wt.status}, want 503 target stargate not ready`
        const stub = pod === null ? null : (pod.process.quic as unknown as { stub: StubWtStargate }).stub
        if (stub?.requests.some((r) => r.headers['x-inference-server-id'] === tag) === true) return `a session to ${host} reached the pod although it is not advertised`
        return null
      } finally {
        await scope.close()
      }
    },
  }
}

/** Every checker the matrix runs per pod and phase (the WebTransport one needs its own router). */
export const ROUTE_CHECKS: readonly RouteChecker[] = [grpcRegistrationCheck, llmHttpCheck, rawQuicTunnelCheck()]
