// The safety net's rules (lib/uncaught-errors.ts): which uncaught errors concern one
// connection only (counted, the process keeps serving) and which end the process. Errors are
// Node's own where they are cheap to provoke, so a change in how Node reports them shows here.
import t from 'tap'
import http2 from 'node:http2'
import net from 'node:net'
import { EventEmitter, once } from 'node:events'
import { PassThrough } from 'node:stream'
import { CONTAINED_CODES, CONTAINED_MESSAGE, FATAL_MESSAGE, classifyUncaught, createUncaughtHandler, installSafetyNet, type ContainedCode } from '../../lib/uncaught-errors.ts'

function caught (fn: () => unknown): unknown {
  try {
    fn()
  } catch (err) {
    return err
  }
  throw new Error('expected a throw')
}

function coded (code: string, fields: Record<string, unknown> = {}): Error {
  return Object.assign(new Error(`fake ${code}`), { code, ...fields })
}

async function goawayOnDestroyedSession (): Promise<unknown> {
  const session = http2.connect('http://127.0.0.1:1')
  session.on('error', () => {})
  session.destroy()
  return caught(() => { session.goaway() })
}

async function writeAfterEnd (): Promise<unknown> {
  const stream = new PassThrough()
  stream.end()
  const error = once(stream, 'error')
  stream.write('x')
  return (await error)[0]
}

async function writeAfterDestroy (): Promise<unknown> {
  const stream = new PassThrough()
  stream.destroy()
  return await new Promise((resolve) => { stream.write('x', resolve) })
}

async function refusedDial (): Promise<unknown> {
  const server = net.createServer()
  await new Promise<void>((resolve) => { server.listen(0, '127.0.0.1', resolve) })
  const { port } = server.address() as net.AddressInfo
  await new Promise<void>((resolve) => { server.close(() => { resolve() }) })
  const socket = net.connect(port, '127.0.0.1')
  return (await once(socket, 'error').catch((err: unknown) => [err]))[0]
}

t.test('each error is classified contained (with its code) or fatal', async (t) => {
  const cases: Array<{ what: string, err: unknown, expect: ContainedCode | 'fatal' }> = [
    { what: 'goaway() on a destroyed HTTP/2 session (Node\'s own)', err: await goawayOnDestroyedSession(), expect: 'ERR_HTTP2_INVALID_SESSION' },
    { what: 'write() after end() (Node\'s own)', err: await writeAfterEnd(), expect: 'ERR_STREAM_WRITE_AFTER_END' },
    { what: 'write() after destroy() (Node\'s own)', err: await writeAfterDestroy(), expect: 'ERR_STREAM_DESTROYED' },
    { what: 'a refused dial (Node\'s own system error)', err: await refusedDial(), expect: 'ECONNREFUSED' },
    { what: 'respond() on a closed stream', err: coded('ERR_HTTP2_INVALID_STREAM'), expect: 'ERR_HTTP2_INVALID_STREAM' },
    { what: 'a peer reset on a read', err: coded('ECONNRESET', { syscall: 'read', errno: -104 }), expect: 'ECONNRESET' },
    { what: 'a write to a closed peer', err: coded('EPIPE', { syscall: 'write', errno: -32 }), expect: 'EPIPE' },
    { what: 'an errno code without a system call (not from a socket)', err: coded('ECONNRESET'), expect: 'fatal' },
    { what: 'a plain object with a contained code', err: { code: 'ERR_HTTP2_INVALID_SESSION', message: 'x' }, expect: 'fatal' },
    { what: 'a thrown string', err: 'ERR_HTTP2_INVALID_SESSION', expect: 'fatal' },
    { what: 'a rejection without a reason', err: undefined, expect: 'fatal' },
    { what: 'a TypeError (Node\'s own)', err: caught(() => (null as unknown as { x: number }).x), expect: 'fatal' },
    { what: 'a bad argument (Node\'s own ERR_INVALID_ARG_TYPE)', err: caught(() => Buffer.from(42 as unknown as string)), expect: 'fatal' },
    { what: 'headers sent twice on a live stream', err: coded('ERR_HTTP2_HEADERS_SENT'), expect: 'fatal' },
    { what: 'a status Node does not send, on a live stream', err: coded('ERR_HTTP2_STATUS_INVALID'), expect: 'fatal' },
    { what: 'an error with no code', err: new Error('boom'), expect: 'fatal' },
  ]
  for (const c of cases) {
    const verdict = classifyUncaught(c.err)
    t.equal(verdict.contained ? verdict.code : 'fatal', c.expect, c.what)
  }
  for (const code of CONTAINED_CODES) {
    const verdict = classifyUncaught(coded(code, { syscall: 'read' }))
    t.ok(verdict.contained && verdict.code === code, `${code} is contained`)
  }
})

interface Recorded {
  readonly lines: Array<{ level: 'warn' | 'fatal', fields: Record<string, unknown>, msg: string }>
  readonly counted: string[]
  readonly exits: number[]
}

function recorder (): Recorded & { options: Parameters<typeof createUncaughtHandler>[0] } {
  const lines: Recorded['lines'] = []
  const counted: string[] = []
  const exits: number[] = []
  return {
    lines,
    counted,
    exits,
    options: {
      logger: {
        warn: (fields, msg) => { lines.push({ level: 'warn', fields: fields as Record<string, unknown>, msg }) },
        fatal: (fields, msg) => { lines.push({ level: 'fatal', fields: fields as Record<string, unknown>, msg }) },
      },
      onContained: (code) => { counted.push(code) },
      exit: (code) => { exits.push(code) },
    },
  }
}

t.test('a contained error is counted and logged, and the process is not ended', async (t) => {
  const r = recorder()
  const handle = createUncaughtHandler(r.options)
  handle(await goawayOnDestroyedSession(), 'exception')
  t.same(r.counted, ['ERR_HTTP2_INVALID_SESSION'])
  t.same(r.exits, [])
  t.equal(r.lines.length, 1)
  t.match(r.lines[0], { level: 'warn', msg: CONTAINED_MESSAGE, fields: { kind: 'ERR_HTTP2_INVALID_SESSION', source: 'exception' } })
})

t.test('any other error is logged at fatal and ends the process with exit 1, once', async (t) => {
  const r = recorder()
  const handle = createUncaughtHandler(r.options)
  const err = new TypeError('deliberate')
  handle(err, 'rejection')
  t.same(r.exits, [1])
  t.same(r.counted, [])
  t.match(r.lines, [{ level: 'fatal', msg: FATAL_MESSAGE, fields: { source: 'rejection', err } }])
  handle(new Error('a second one while the log is flushed'), 'exception')
  handle(await goawayOnDestroyedSession(), 'exception')
  t.same(r.exits, [1], 'nothing after the first fatal error changes the exit')
  t.equal(r.lines.length, 1)
})

t.test('installSafetyNet listens for uncaught exceptions and unhandled rejections until uninstalled', async (t) => {
  const r = recorder()
  const proc = new EventEmitter()
  const uninstall = installSafetyNet(proc, r.options)
  proc.emit('uncaughtException', coded('EPIPE', { syscall: 'write' }))
  proc.emit('unhandledRejection', coded('ECONNRESET', { syscall: 'read' }))
  t.same(r.counted, ['EPIPE', 'ECONNRESET'])
  t.same(r.lines.map((l) => l.fields.source), ['exception', 'rejection'])
  uninstall()
  t.equal(proc.listenerCount('uncaughtException') + proc.listenerCount('unhandledRejection'), 0)
})
