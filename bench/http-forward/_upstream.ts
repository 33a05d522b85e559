/**
 * The upstream of bench/http-forward/proxy.bench.ts, in its own process: a plain node:http
 * server, as fast as Node serves HTTP/1.1 keep-alive, so that the proxies in front of it are
 * what the figures compare (the SSE stub of the tests, test/fixtures/stub-llm.ts, records
 * every request and parses URLs, which would be most of the cost).
 *
 * - any path: drains the request body and answers a small JSON chat completion.
 * - /sse-pair?group=<id>&members=<n>&tokens=<k>&interval=<ms>: an SSE stream that waits until
 *   n streams joined the group, then writes token i to every member in the same timer tick.
 *   Each token carries `t`, the monotonic clock (process.hrtime, CLOCK_MONOTONIC, the same
 *   clock in every process on the machine) read just before its write, so a client can tell
 *   how long each token took to arrive, and pair the tokens of a direct and a proxied stream.
 *
 * Prints {"port": N} once listening. Usage: node _upstream.ts <ip>
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'

const BODY = Buffer.from(JSON.stringify({
  id: 'chatcmpl-bench',
  object: 'chat.completion',
  model: 'bench',
  choices: [{ index: 0, message: { role: 'assistant', content: 'hello' }, finish_reason: 'stop' }],
}))
const JSON_HEAD = { 'content-type': 'application/json', 'content-length': String(BODY.length) }

interface Group {
  readonly members: http.ServerResponse[]
  readonly size: number
  readonly tokens: number
  readonly intervalMs: number
}
const groups = new Map<string, Group>()

function onJsonEnd (this: http.IncomingMessage & { res?: http.ServerResponse }): void {
  const res = this.res
  if (res === undefined) return
  res.writeHead(200, JSON_HEAD)
  res.end(BODY)
}

function ssePair (url: URL, res: http.ServerResponse): void {
  const id = url.searchParams.get('group') ?? ''
  let group = groups.get(id)
  if (group === undefined) {
    group = {
      members: [],
      size: Number(url.searchParams.get('members') ?? '2'),
      tokens: Number(url.searchParams.get('tokens') ?? '1000'),
      intervalMs: Number(url.searchParams.get('interval') ?? '2'),
    }
    groups.set(id, group)
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
  res.flushHeaders()
  group.members.push(res)
  if (group.members.length < group.size) return
  groups.delete(id)
  const { members, tokens, intervalMs } = group
  let i = 0
  const tick = (): void => {
    if (i >= tokens) {
      for (const m of members) m.end('data: [DONE]\n\n')
      return
    }
    for (const m of members) {
      if (m.destroyed) continue
      m.write(`data: {"index":${i},"t":"${process.hrtime.bigint()}","choices":[{"delta":{"content":"tok${i}"}}]}\n\n`)
    }
    i++
    setTimeout(tick, intervalMs)
  }
  tick()
}

const server = http.createServer((req, res) => {
  if (req.url !== undefined && req.url.startsWith('/sse-pair')) {
    req.resume()
    ssePair(new URL(req.url, 'http://upstream'), res)
    return
  }
  ;(req as http.IncomingMessage & { res?: http.ServerResponse }).res = res
  req.on('end', onJsonEnd)
  req.resume()
})
server.keepAliveTimeout = 120_000
server.headersTimeout = 130_000
server.listen(0, process.argv[2] ?? '127.0.0.1', () => {
  console.log(JSON.stringify({ port: (server.address() as AddressInfo).port }))
})

// Exit on SIGTERM through process.exit, so that a run under --cpu-prof writes its profile.
process.on('SIGTERM', () => { process.exit(0) })
