/**
 * The quinn + rustls peers (test/fixtures/quinn-peer: quinn 0.11 + rustls 0.23, the stack of
 * the real Pylon and Stargate, no ALPN) as processes for the bench/quic benchmarks: a
 * Stargate-like `bench-server` and the clients that load it (`bench-bulk`, `bench-handshakes`,
 * `bench-tunnels`), each printing one JSON line. Point a client at a quinn server for the
 * direct baseline, or at the router's tunnel port (SNI of the pod) for the relayed figure.
 * Packets are quinn's own: 1200 bytes of UDP payload at first, then path-MTU discovery's (up to
 * 1452 on loopback); the router's legs send 1350-byte packets.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { spawnChild, startRouter, tempDir, writeTargetsFile, type Child } from '../_children.ts'
import type { Report } from '../_util.ts'
import { createCa, createLeaf } from '../../test/fixtures/certs.ts'
import { ensureQuinnPeer, quinnPeerStack, QUINN_PEER_PACKAGES } from '../../test/fixtures/quinn-peer-build.ts'

export interface QuinnTls {
  /** Trust anchor for clients. */
  readonly caPath: string
  /** Server chain and key, for *.stargate.external and localhost. */
  readonly certPath: string
  readonly keyPath: string
}

/** A CA and a server leaf as files (webpki, unlike OpenSSL, refuses a self-signed CA as a server certificate). */
export async function quinnTls (): Promise<QuinnTls> {
  const dir = tempDir('quinn-tls')
  const ca = await createCa({ name: 'quinn bench ca' })
  const leaf = await createLeaf(ca, { dnsNames: ['*.stargate.external', 'localhost'] })
  const files = { caPath: join(dir, 'ca.pem'), certPath: join(dir, 'cert.pem'), keyPath: join(dir, 'key.pem') }
  writeFileSync(files.caPath, ca.certPem)
  writeFileSync(files.certPath, leaf.chainPem)
  writeFileSync(files.keyPath, leaf.keyPem)
  return files
}

/** The quinn-peer binary, built if needed; null (with the reason printed) where it cannot be. */
export async function quinnBinary (): Promise<string | null> {
  const build = await ensureQuinnPeer()
  if (build.ok) return build.path
  console.error(`quinn peers not measured: ${build.reason} (${QUINN_PEER_PACKAGES})`)
  return null
}

export interface QuinnServer {
  readonly child: Child
  readonly port: number
}

export async function startQuinnServer (bin: string, tls: QuinnTls, ip: string, extra: readonly string[] = []): Promise<QuinnServer> {
  const child = spawnChild(bin, ['bench-server', '--listen', `${ip}:0`, '--cert', tls.certPath, '--key', tls.keyPath, ...extra])
  const { addr } = await child.next<{ addr: string }>((v) => v.ev === 'listening', 30_000)
  return { child, port: Number(addr.slice(addr.lastIndexOf(':') + 1)) }
}

/**
 * What every quinn benchmark starts with: the peer binary, its TLS material and a quinn server on
 * loopback. Without the binary the report says why the file was skipped and the process ends.
 */
export async function startQuinnBench (report: Report): Promise<{ peer: string, stack: string, tls: QuinnTls, server: QuinnServer }> {
  const peer = await quinnBinary()
  if (peer === null) {
    report.info('skipped', 'quinn-peer cannot be built here (see stderr)')
    report.finish()
    process.exit(0)
  }
  const tls = await quinnTls()
  return { peer, stack: quinnPeerStack(), tls, server: await startQuinnServer(peer, tls, '127.0.0.1') }
}

export interface QuinnRouter {
  readonly pid: number
  /** The raw QUIC tunnel port. */
  readonly port: number
  readonly healthPort: number
}

/** The router (server/main.ts) with one pod, stargate-0 (a quinn server), presenting the quinn CA's leaf, not verifying the pod. */
export async function startQuinnRouter (tls: QuinnTls, podPort: number, extra: readonly string[] = []): Promise<QuinnRouter> {
  const targetsFile = writeTargetsFile(tempDir('quinn-router-targets'), [{ identity: 'stargate-0', address: '127.0.0.1', grpcPort: 50051, quicPort: podPort }])
  const router = await startRouter({ targetsFile, args: ['--target-namespace', 'stargate', '--tls-cert-path', tls.certPath, '--tls-key-path', tls.keyPath, '--quic-insecure', ...extra] })
  const tunnel = await router.next<{ udp: { port: number } }>((v) => v.msg === 'raw quic tunnel listening')
  return { pid: router.pid, port: tunnel.udp.port, healthPort: router.healthPort }
}

export interface QuinnTarget {
  /** IP:PORT of a quinn server or of the router's tunnel port. */
  readonly connect: string
  readonly sni: string
  readonly caPath: string
}

function clientArgs (target: QuinnTarget): string[] {
  return ['--connect', target.connect, '--sni', target.sni, '--ca', target.caPath]
}

async function runClient<T> (bin: string, args: readonly string[], ev: string, timeoutMs: number): Promise<T> {
  const child = spawnChild(bin, args)
  const result = await child.next<T>((v) => v.ev === ev, timeoutMs)
  const code = await child.exited
  if (code !== 0) throw new Error(`quinn-peer ${args[0]} exited with ${code}: ${child.stderr()}`)
  return result
}

export interface BulkResult { readonly bytes: number, readonly seconds: number, readonly mib_s: number, readonly cpu_s: number, readonly handshake_ms: number }

/** One connection, one stream of `bytes`: up (client → server) or down. */
export function quinnBulk (bin: string, target: QuinnTarget, bytes: number, direction: 'up' | 'down', extra: readonly string[] = []): Promise<BulkResult> {
  // A second per MiB at worst on a loaded machine.
  return runClient(bin, ['bench-bulk', ...clientArgs(target), '--bytes', String(bytes), '--direction', direction, ...extra], 'bulk', 60_000 + bytes / 2 ** 20 * 1000)
}

export interface HandshakesResult { readonly count: number, readonly failed: number, readonly seconds: number, readonly per_second: number, readonly cpu_s: number, readonly latencies_ms: number[] }

/** `count` fresh connections, `concurrency` at a time, each closed once established. */
export function quinnHandshakes (bin: string, target: QuinnTarget, count: number, concurrency: number): Promise<HandshakesResult> {
  return runClient(bin, ['bench-handshakes', ...clientArgs(target), '--count', String(count), '--concurrency', String(concurrency)], 'handshakes', 120_000 + count * 100)
}

export interface TunnelsResult {
  readonly tunnels: number
  readonly requests: number
  readonly failed: number
  readonly connect_seconds: number
  readonly cpu_s: number
  readonly latencies_ms: number[]
}

/** `tunnels` connections, each `rate` echoed requests of `size` bytes per second for `seconds`. */
export function quinnTunnels (bin: string, target: QuinnTarget, load: { tunnels: number, rate: number, size: number, seconds: number }): Promise<TunnelsResult> {
  return runClient(bin, ['bench-tunnels', ...clientArgs(target), '--tunnels', String(load.tunnels), '--rate', String(load.rate), '--size', String(load.size), '--seconds', String(load.seconds)],
    'tunnels', 300_000 + load.seconds * 1000)
}
