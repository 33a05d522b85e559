/**
 * The attacker of bench/http-forward/slow-bodies.bench.ts, in its own process so its sockets and
 * timers do not share an event loop with the client being measured: keeps `count` HTTP/1.1
 * uploads open to the router, each a POST with `Content-Length: 100000` sending one byte every
 * `intervalMs` (the trickle attack: 2,100 of them, one byte every 2 s). An upload the router
 * answers (408 after its first rate window, 503 when the pod is full) is replaced at once by a
 * new one, as an attacker would. Every second it prints {"open", "answered": {status: n}}.
 *
 * Usage: node _trickler.ts <port> <count> <intervalMs> <localAddress> <host>
 */
import net from 'node:net'

const [portText, countText, intervalText, localAddress = '127.0.0.1', host = 'stargate-0.stargate.external'] = process.argv.slice(2)
const port = Number(portText)
const count = Number(countText)
const intervalMs = Number(intervalText)
const HEAD = `POST /v1/chat/completions HTTP/1.1\r\nhost: ${host}\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n{`

/** Writes are spread over the interval in this many slices, each upload in one of them. */
const SLICES = 20
type Upload = net.Socket & { answered?: boolean, slice?: number }
const open = new Set<Upload>()
const answered: Record<string, number> = {}
let stopped = false

function onData (this: Upload, chunk: Buffer): void {
  if (this.answered === true) return
  this.answered = true
  const status = chunk.toString('latin1', 9, 12)
  answered[status] = (answered[status] ?? 0) + 1
  this.destroy()
}

function onClose (this: Upload): void {
  open.delete(this)
  if (!stopped) connect()
}

function connect (): void {
  const socket: Upload = net.connect({ port, host: '127.0.0.1', localAddress }, () => { socket.write(HEAD) })
  socket.slice = open.size % SLICES
  open.add(socket)
  socket.on('data', onData)
  socket.on('error', () => {})
  socket.on('close', onClose)
}

for (let i = 0; i < count; i++) connect()
// One timer for all: each slice of the interval, a byte on the uploads of that slice.
let tick = 0
setInterval(() => {
  const slice = tick++ % SLICES
  for (const socket of open) if (socket.slice === slice && socket.writable && !socket.connecting) socket.write('x')
}, intervalMs / SLICES)
setInterval(() => {
  console.log(JSON.stringify({ open: [...open].filter((s) => !s.connecting && s.writable).length, answered }))
}, 1000)

process.on('SIGTERM', () => {
  stopped = true
  for (const socket of open) socket.destroy()
  process.exit(0)
})
