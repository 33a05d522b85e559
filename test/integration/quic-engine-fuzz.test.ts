/**
 * Memory safety: random and mutated datagrams into a listening endpoint of the engine
 * — garbage, garbage short headers (stateless-reset path), truncated and bit-flipped real
 * Initials, Initials correctly protected around corrupted ClientHellos and frames (so the
 * addon's own Initial decryption, CRYPTO reassembly and ClientHello parser see them), other long
 * header types and unknown versions. No crash, the endpoint still serves a real client, every
 * engine object is freed again, and the heap comes back to its baseline.
 *
 * The suite sends 20,000 (seconds on a loaded two-core machine); 100,000, and the
 * run under AddressSanitizer, are `QUIC_FUZZ_DATAGRAMS=100000` runs of this same file whose
 * command and figures are in docs/reliability.md ("Tunnel port").
 */
import t from 'tap'
import { randomBytes } from 'node:crypto'
import type { Socket } from 'node:dgram'
import { readFileSync } from 'node:fs'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { dial, engine as fixtureEngine, engineTls, established, listen } from '../fixtures/quic-engine.ts'
import { captureInitial, rawSocket, sendRaw } from '../fixtures/quic-raw.ts'
import { clientHello, cryptoFrame, initialPacket, openInitial, scatteredHello } from '../fixtures/quic-initial.ts'
import { encodeVarint } from '../../lib/quic/varint.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(180_000)

const TOTAL = Number(process.env.QUIC_FUZZ_DATAGRAMS ?? 20_000)

// A full GC before each heap reading, so garbage JavaScript has not collected yet is not counted.
setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc') as () => void

/** A seeded generator, so a failing run can be repeated (QUIC_FUZZ_SEED). */
function rng (seed: number): () => number {
  let s = seed >>> 0
  return () => {
    s ^= s << 13
    s ^= s >>> 17
    s ^= s << 5
    return (s >>> 0) / 0x100000000
  }
}

function rssMiB (): number {
  const line = readFileSync('/proc/self/status', 'utf8').split('\n').find((l) => l.startsWith('VmRSS:')) ?? 'VmRSS: 0 kB'
  return Number(line.split(/\s+/)[1]) / 1024
}

t.test(`${TOTAL.toLocaleString('en')} random and mutated datagrams: no crash, the endpoint still serves, everything is freed`, async (t) => {
  const seed = Number(process.env.QUIC_FUZZ_SEED ?? Date.now() % 1_000_000)
  t.comment(`seed ${seed}`)
  const random = rng(seed)
  const int = (n: number): number => Math.floor(random() * n)
  const tls = await engineTls(t)
  // Accept whatever is proposed: the fuzz should reach the handshake code too.
  const server = listen(t, '127.0.89.1', tls.serverCredentials, {
    transport: { handshakeTimeoutMs: 300, idleTimeoutMs: 1000 },
    pendingTimeoutMs: 300,
    maxHalfOpenPerAddress: 1_000_000,
    retryThreshold: 1_000_000,
  })
  const engine = fixtureEngine()
  const before = engine.counters()
  const real = await captureInitial(t, 'pod.stargate.test')
  const opened = openInitial(real)
  const hello = opened.crypto

  const corruptHello = (): Buffer => {
    const h = Buffer.from(hello)
    for (let i = 0, n = 1 + int(8); i < n; i++) h[int(h.length)] = int(256)
    if (random() < 0.3) return h.subarray(0, int(h.length))
    return h
  }
  const frames = (): Buffer => {
    switch (int(6)) {
      case 0: return cryptoFrame(0, corruptHello())
      case 1: return cryptoFrame(int(20000), randomBytes(int(600)))
      case 2: return Buffer.concat([Buffer.from([0x02]), encodeVarint(int(1000)), encodeVarint(int(1000)), encodeVarint(int(300)), randomBytes(int(100))])
      case 3: return randomBytes(1 + int(900))
      case 4: return Buffer.concat([Buffer.from([0x06]), encodeVarint(int(4000)), encodeVarint(2000 + int(2000)), randomBytes(int(200))])
      default: return cryptoFrame(0, clientHello({ sni: random() < 0.5 ? 'pod.stargate.test' : randomBytes(int(40)).toString('latin1'), alpn: random() < 0.5 ? [] : ['h3'], padding: int(3000) }))
    }
  }
  const protectedOnes = Math.min(2000, Math.floor(TOTAL / 50))
  const crafted: Buffer[] = []
  for (let i = 0; i < protectedOnes; i++) {
    if (i % 10 === 0) crafted.push(...scatteredHello(corruptHello(), { dcid: randomBytes(8 + int(13)), scid: randomBytes(int(21)), piece: 50 + int(400) }))
    else crafted.push(initialPacket({ dcid: randomBytes(8 + int(13)), scid: randomBytes(int(21)), pn: int(65536), frames: frames(), size: 1200 + int(200) }))
  }
  const datagram = (i: number): Buffer => {
    switch (i % 10) {
      case 0: case 1: case 2: return randomBytes(1 + int(1500))
      case 3: case 4: {
        // A short header for a connection nobody has: the stateless-reset path.
        const b = randomBytes(21 + int(1300))
        b[0] = 0x40 | ((b[0] as number) & 0x3f)
        return b
      }
      case 5: {
        const b = Buffer.from(real)
        for (let k = 0, n = 1 + int(16); k < n; k++) b[int(b.length)] = int(256)
        return b
      }
      case 6: return real.subarray(0, int(real.length))
      case 7: {
        // Another long-header type or version, sometimes lying about its lengths.
        const b = Buffer.from(crafted[int(crafted.length)] ?? real)
        b[0] = ((b[0] as number) & 0xcf) | (int(4) << 4)
        if (random() < 0.3) b.writeUInt32BE(int(0xffffffff), 1)
        if (random() < 0.3) b[5] = int(256)
        return b
      }
      default: return crafted[int(crafted.length)] ?? real
    }
  }
  const sockets: Socket[] = await Promise.all(Array.from({ length: 16 }, async () => rawSocket(t, '127.0.89.2')))
  const fuzz = async (from: number, to: number): Promise<void> => {
    for (let sent = from; sent < to; sent += 200) {
      const batch: Array<Promise<void>> = []
      for (let i = sent; i < Math.min(to, sent + 200); i++) batch.push(sendRaw(sockets[i % sockets.length] as Socket, server.endpoint.port, datagram(i), '127.0.89.1'))
      await Promise.all(batch)
      // Let the loop poll the endpoint's socket between batches (it is in this process): without
      // it the sender outruns the receive buffer and the kernel drops most datagrams.
      await new Promise((resolve) => { setImmediate(resolve) })
    }
    // Everything the fuzz left (pending Initials, handshakes it started) expires.
    await waitFor(() => {
      const now = engine.counters()
      return now.pending === before.pending && now.connections === before.connections ? now : null
    }, { timeoutMs: 20_000, message: 'pending Initials and fuzzed handshakes to expire' })
  }
  const heap = async (): Promise<{ malloc: number, rss: number }> => {
    for (let i = 0; i < 2; i++) {
      gc()
      await new Promise((resolve) => { setImmediate(resolve) })
    }
    return { malloc: engine.native.heapStats().inUse / 2 ** 20, rss: rssMiB() }
  }
  const start = await heap()
  const began = Date.now()
  // The first half warms up every path (allocator arenas, TLS sessions, JIT); the second must
  // leave the heap where the first did.
  await fuzz(0, TOTAL / 2)
  const warm = await heap()
  const firstHalfMs = Date.now() - began
  await fuzz(TOTAL / 2, TOTAL)
  const end = await heap()
  t.comment(`fuzz halves took ${firstHalfMs} ms and ${Date.now() - began - firstHalfMs} ms, expiry included`)
  const stats = server.endpoint.stats()
  t.ok((stats?.rxDatagrams ?? 0) >= TOTAL * 0.9, `the endpoint read the datagrams (${stats?.rxDatagrams} of ${TOTAL})`)
  t.ok((stats?.dropped.malformed ?? 0) + (stats?.dropped.unknown_connection ?? 0) > 0, `malformed and unknown datagrams dropped (${stats?.dropped.malformed}, ${stats?.dropped.unknown_connection})`)
  t.ok((stats?.stateless.stateless_reset ?? 0) > 0, `stateless resets sent, rate-limited (${stats?.stateless.stateless_reset})`)
  t.comment(`received ${stats?.rxDatagrams}, proposals ${stats?.proposed}, accepted ${stats?.accepted}, version negotiations ${stats?.stateless.version_negotiation}, rejected-by-limit ${stats?.dropped.connection_limit}`)

  // The endpoint still serves a real client.
  const client = dial(t, '127.0.89.1', server.endpoint.port, { credentials: tls.clientCredentials })
  await established(client)
  client.destroy()
  for (const conn of server.connections) conn.destroy()
  await waitFor(() => {
    const now = engine.counters()
    return now.connections === before.connections && now.streams === before.streams && now.pending === before.pending &&
      now.bufferedBytes === before.bufferedBytes && now.datagramsQueued === before.datagramsQueued
  }, { timeoutMs: 10_000, message: 'every engine object freed' })
  t.pass('connections, streams, pending Initials, buffers and datagrams back to where they were')
  const grew = end.malloc - warm.malloc
  t.ok(grew < 4, `the malloc heap is back to its baseline after the second half (${start.malloc.toFixed(1)} → ${warm.malloc.toFixed(1)} → ${end.malloc.toFixed(1)} MiB; RSS ${start.rss.toFixed(0)} → ${warm.rss.toFixed(0)} → ${end.rss.toFixed(0)} MiB)`)
  t.ok(end.rss - warm.rss < 24, 'and RSS flat over the second half')
})
