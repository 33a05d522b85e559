// SPEC §12: no bytes from a client may end the router. A client writing HTTP/2
// frames no correct client sends (raw, test/fixtures/raw-h2.ts) gets a stream reset, a
// GOAWAY or an error status on its own connection; the router stays up, /livez answers and
// other clients' registrations keep working.
import t from 'tap'
import * as grpc from '@grpc/grpc-js'
import { StubPods } from '../fixtures/stub-pods.ts'
import { FLAG, FRAME, RawH2Client, frame, type Fields, type Frame } from '../fixtures/raw-h2.ts'

const REGISTER = '/stargate.StargateControlPlane/RegisterInferenceServer'
const WATCH = '/stargate.StargateControlPlane/WatchStargates'
const AUTHORITY = 'stargate-0.stargate.external:50071'

function registrationHead (extra: Fields = []): Fields {
  return [[':method', 'POST'], [':scheme', 'http'], [':path', REGISTER], [':authority', AUTHORITY], ['content-type', 'application/grpc'], ['te', 'trailers'], ...extra]
}
const MESSAGE = Buffer.from([0, 0, 0, 0, 3, 0x0a, 0x01, 0x70])

function register (address: string): Promise<number> {
  const client = new grpc.Client(address, grpc.credentials.createInsecure(), { 'grpc.default_authority': AUTHORITY })
  const call = client.makeBidiStreamRequest(REGISTER, (b: Buffer) => b, (b: Buffer) => b, new grpc.Metadata())
  call.on('data', () => {})
  call.on('error', () => {})
  call.write(Buffer.from([0x0a, 0x01, 0x70]))
  call.end()
  return new Promise((resolve) => {
    call.on('status', (status: grpc.StatusObject) => {
      client.close()
      resolve(status.code)
    })
  })
}

/** What the router answered on stream 1: a response, a reset or a GOAWAY (or a close). */
type Seen = 'response' | 'rst' | 'goaway' | 'closed' | 'quiet' | 'timeout'

async function answerOn (client: RawH2Client, streamId: number, timeoutMs: number): Promise<{ seen: Seen, frame: Frame | null }> {
  const f = await client.waitFrame((x) => (x.streamId === streamId && (x.type === FRAME.HEADERS || x.type === FRAME.RST_STREAM)) || x.type === FRAME.GOAWAY, timeoutMs)
  if (f === null) return { seen: 'closed', frame: null }
  return { seen: f.type === FRAME.HEADERS ? 'response' : f.type === FRAME.RST_STREAM ? 'rst' : 'goaway', frame: f }
}

const SCENARIOS: Array<{ what: string, send: (c: RawH2Client) => void, expect: readonly Seen[], grpcStatus?: readonly [string, string] }> = [
  {
    what: 'two content-type fields on a registration',
    send: (c) => { c.headers(1, registrationHead([['content-type', 'application/grpc+proto']]), false); c.data(1, MESSAGE, true) },
    expect: ['response'],
    grpcStatus: [String(grpc.status.INVALID_ARGUMENT), 'registration request headers cannot be forwarded (ERR_HTTP2_HEADER_SINGLE_VALUE)'],
  },
  {
    what: 'two content-type fields on an LLM request',
    send: (c) => { c.headers(1, [[':method', 'GET'], [':scheme', 'http'], [':path', '/x'], [':authority', 'llm.example'], ['content-type', 'a/b'], ['content-type', 'c/d']], true) },
    expect: ['response'],
  },
  {
    what: 'an upper-case header name',
    send: (c) => { c.headers(1, registrationHead([['X-Evil', '1']]), false) },
    expect: ['rst'],
  },
  {
    what: 'a pseudo-header in the trailers',
    send: (c) => { c.headers(1, registrationHead(), false); c.data(1, MESSAGE, false); c.headers(1, [[':path', '/'], ['x-t', '1']], true) },
    expect: ['rst'],
  },
  {
    what: 'a 1 MiB header block in CONTINUATION frames',
    send: (c) => {
      const block = c.encode(registrationHead([['x-pad', 'p'.repeat(1024 * 1024)]]))
      for (let at = 0, i = 0; at < block.length; at += 16_000, i++) {
        const last = at + 16_000 >= block.length
        c.write(frame(i === 0 ? FRAME.HEADERS : FRAME.CONTINUATION, last ? FLAG.END_HEADERS : 0, 1, block.subarray(at, at + 16_000)))
      }
    },
    expect: ['goaway'],
  },
  {
    what: 'CONTINUATION frames that never end the header block',
    send: (c) => {
      c.write(frame(FRAME.HEADERS, 0, 1, c.encode(registrationHead())))
      for (let i = 0; i < 2000; i++) c.write(frame(FRAME.CONTINUATION, 0, 1, Buffer.alloc(1000, 0)))
    },
    expect: ['goaway'],
  },
  {
    what: 'DATA before HEADERS',
    send: (c) => { c.data(1, MESSAGE, false) },
    expect: ['goaway'],
  },
  {
    what: 'a RST_STREAM in the middle of a trailers block',
    send: (c) => { c.headers(1, registrationHead(), false); c.data(1, MESSAGE, false); c.write(frame(FRAME.HEADERS, FLAG.END_STREAM, 1, c.encode([['x-t', 'x'.repeat(100)]]).subarray(0, 5))); c.rstStream(1, 8) },
    expect: ['goaway'],
  },
  {
    what: 'a RST_STREAM in the middle of a registration',
    send: (c) => { c.headers(1, registrationHead(), false); c.data(1, MESSAGE.subarray(0, 4), false); c.rstStream(1, 8) },
    expect: ['quiet', 'response', 'rst'],
  },
  {
    what: 'a RST_STREAM right after opening a watch',
    send: (c) => { c.headers(1, [[':method', 'POST'], [':scheme', 'http'], [':path', WATCH], [':authority', 'router'], ['content-type', 'application/grpc'], ['te', 'trailers']], false); c.data(1, Buffer.from([0, 0, 0, 0, 0]), false); c.rstStream(1, 8) },
    expect: ['quiet', 'response', 'rst'],
  },
]

t.test('a hostile client gets an error on its own connection and the router keeps serving', async (t) => {
  const pods = await StubPods.start(t, { pods: ['stargate-0'], http: true })
  const health = `http://127.0.0.1:${pods.kube.router.health.port}`
  for (const scenario of SCENARIOS) {
    const client = await RawH2Client.connect(pods.kube.frontDoorPort)
    t.teardown(() => { client.close() })
    scenario.send(client)
    // A stream the client reset itself may get no answer at all: 'quiet' after a short wait.
    const quiet = scenario.expect.includes('quiet')
    const answer = await answerOn(client, 1, quiet ? 1000 : 10_000).catch(() => ({ seen: quiet ? 'quiet' as const : 'timeout' as const, frame: null }))
    t.ok(scenario.expect.includes(answer.seen), `${scenario.what}: ${answer.seen}`)
    if (scenario.grpcStatus !== undefined && answer.frame !== null) {
      const fields = client.decode(answer.frame)
      t.same([fields['grpc-status'], decodeURIComponent(fields['grpc-message'] ?? '')], scenario.grpcStatus, `${scenario.what}: status`)
    }
    client.close()
    t.equal((await fetch(`${health}/livez`)).status, 200, `${scenario.what}: the router is alive`)
    t.equal(await register(pods.kube.address), grpc.status.OK, `${scenario.what}: other registrations work`)
  }
})
