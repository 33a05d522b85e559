/**
 * The processes of the bench/quic benchmarks, on top of bench/_children.ts: QUIC peers
 * (_peer.ts), the router (server/main.ts with --discovery file, raw QUIC tunnel port read
 * from its 'raw quic tunnel listening' log line) and ngtcp2's example server/client (Debian
 * packages ngtcp2-server / ngtcp2-client) as the reference implementation.
 */
import { accessSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { execFileSync } from 'node:child_process'
import { ROOT, spawnNode, startRouter, tempDir, writeTargetsFile, type Child, type RouterChild } from '../_children.ts'

const PEER = join(ROOT, 'bench', 'quic', '_peer.ts')
const DIR = tempDir('quic')

export function startPeer (args: readonly string[]): Child {
  return spawnNode(PEER, args)
}

/** A self-signed P-256 certificate for *.stargate.external and localhost, as PEM files. */
export function certificate (): { certPath: string, keyPath: string } {
  const certPath = join(DIR, 'cert.pem')
  const keyPath = join(DIR, 'key.pem')
  try {
    readFileSync(certPath)
    return { certPath, keyPath }
  } catch {
    // made below
  }
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', keyPath, '-out', certPath,
    '-days', '2', '-subj', '/CN=stargate bench', '-addext', 'subjectAltName=DNS:*.stargate.external,DNS:localhost'], { stdio: 'ignore' })
  return { certPath, keyPath }
}

export interface QuicRouter extends RouterChild {
  readonly tunnelPort: number
}

/** The router listing one pod (stargate-0) at ip:quicPort, with raw QUIC tunnels, not verifying the pod. */
export async function startQuicRouter (ip: string, quicPort: number, extra: readonly string[] = []): Promise<QuicRouter> {
  const { certPath, keyPath } = certificate()
  const targetsFile = writeTargetsFile(tempDir('quic-targets'), [{ identity: 'stargate-0', address: ip, grpcPort: 50051, quicPort }])
  const router = await startRouter({ targetsFile, args: ['--target-namespace', 'stargate', '--tls-cert-path', certPath, '--tls-key-path', keyPath, '--quic-insecure', ...extra] })
  const tunnel = await router.next<{ udp: { port: number } }>((v) => v.msg === 'raw quic tunnel listening')
  return { ...router, tunnelPort: tunnel.udp.port }
}

export function hasBinary (path: string): boolean {
  try {
    accessSync(path)
    return true
  } catch {
    return false
  }
}
