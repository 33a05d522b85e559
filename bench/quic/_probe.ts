// TEMPORARY experiment harness (not part of the deliverable): direct vs relay bulk, interleaved.
import { cpuSeconds, stopAll } from '../_children.ts'
import { readFileSync } from 'node:fs'
function us (pid: number): [number, number] { const st = readFileSync(`/proc/${pid}/stat`, 'utf8'); const f = st.slice(st.lastIndexOf(')') + 2).split(' '); return [Number(f[11]) / 100, Number(f[12]) / 100] }
import { certificate, startPeer, startQuicRouter } from './_processes.ts'

const MIB = 2 ** 20
const SIZE = Number(process.env.MIB ?? 128)
const ROUNDS = Number(process.env.ROUNDS ?? 3)
const cases = (process.env.CASES ?? 'direct,relay').split(',')
const { certPath, keyPath } = certificate()
const server = startPeer(['server', '127.0.0.1', certPath, keyPath])
const { port: serverPort } = await server.next<{ port: number }>((v) => typeof v.port === 'number')
const router = await startQuicRouter('127.0.0.1', serverPort, process.env.QUIC_DEBUG_STATS === '1' ? [] : [])
const out: Record<string, number[]> = {}
for (let r = 0; r < ROUNDS; r++) {
  for (const c of cases) {
    const port = c === 'direct' ? serverPort : router.tunnelPort
    const s0 = cpuSeconds(server.pid); const r0 = cpuSeconds(router.pid); const su0 = us(server.pid); const ru0 = us(router.pid)
    const client = startPeer(['bulk', String(port), 'stargate-0.stargate.external', String(SIZE * MIB), '1'])
    const res = await client.next<{ bytes: number, ms: number, packets: unknown }>((v) => typeof v.ms === 'number', 600_000)
    const cc = cpuSeconds(client.pid); const cu = us(client.pid); const su1 = us(server.pid); const ru1 = us(router.pid)
    await client.exited
    const rate = SIZE / (res.ms / 1000)
    ;(out[c] ??= []).push(rate)
    const pk = SIZE * MIB / 1300
    const line: Record<string, unknown> = { case: c, MiBs: +rate.toFixed(1), load: (await import('node:os')).loadavg()[0]!.toFixed(1), srvUsPerPkt: +((cpuSeconds(server.pid) - s0) / pk * 1e6).toFixed(1), cliUsPerPkt: +(cc / pk * 1e6).toFixed(1), client: res.packets }
    line.sys = { srv: +((su1[1] - su0[1]) / pk * 1e6).toFixed(1), cli: +(cu[1] / pk * 1e6).toFixed(1), rtr: +((ru1[1] - ru0[1]) / pk * 1e6).toFixed(1) }
    if (c === 'relay') {
      line.rtrUsPerPkt = +((cpuSeconds(router.pid) - r0) / pk * 1e6).toFixed(1)
      if (process.env.QUIC_DEBUG_STATS === '1') { const st = await router.next<Record<string, unknown>>((v) => v.msg === 'DEBUG tunnel stats', 5000).catch(() => null); if (st) { line.rtr = { c: st.client, u: st.upstream } } }
    }
    console.log(JSON.stringify(line))
  }
}
for (const [k, v] of Object.entries(out)) { v.sort((a, b) => a - b); console.log(k, 'median', v[Math.floor(v.length / 2)]!.toFixed(1), 'all', v.map((x) => x.toFixed(1)).join(' ')) }
await stopAll()
process.exit(0)
