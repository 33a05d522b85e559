// SPEC §12: no secret reaches the log, however deep it sits in a logged object, and
// the lines an unauthenticated peer can cause at will are rate-limited per reason, with the
// suppressed count reported. Asserted on the JSON lines written (pino's own test style).
import t from 'tap'
import { readFile, readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { PEER_TRIGGERED_MESSAGES, createLogger } from '../../lib/log.ts'
import { redactSecrets } from '../../lib/log-redact.ts'
import { waitFor } from '../fixtures/wait.ts'

function sink (): { destination: { write (s: string): void }, lines (): Array<Record<string, unknown>>, text (): string } {
  let text = ''
  return {
    destination: { write (s: string) { text += s } },
    lines: () => text.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Record<string, unknown>),
    text: () => text,
  }
}

t.test('cookie, x-api-key, proxy-authorization and authorization are redacted at any depth and in any case', async (t) => {
  const out = sink()
  const logger = createLogger({ level: 'info', format: 'json', destination: out.destination })
  logger.info({
    request: { headers: { Cookie: 'session=s3cr3t-cookie', 'X-API-Key': 's3cr3t-api-key', accept: 'text/plain' } },
    a: { b: { c: { d: { e: { 'proxy-authorization': 'Basic s3cr3t-proxy', authorization: 'Bearer s3cr3t-bearer' } } } } },
    raw: ['host', 'llm.example', 'cookie', 's3cr3t-raw-cookie', 'X-Api-Key', 's3cr3t-raw-key'],
    list: [{ token: 's3cr3t-token' }],
  }, 'a request')
  t.notMatch(out.text(), /s3cr3t/, 'no secret value in the output')
  t.match(out.lines()[0], {
    request: { headers: { Cookie: '[redacted]', 'X-API-Key': '[redacted]', accept: 'text/plain' } },
    a: { b: { c: { d: { e: { 'proxy-authorization': '[redacted]', authorization: '[redacted]' } } } } },
    raw: ['host', 'llm.example', 'cookie', '[redacted]', 'X-Api-Key', '[redacted]'],
    list: [{ token: '[redacted]' }],
  }, 'each secret is replaced, other fields are kept')
})

t.test('an object without secrets is passed on as it is, and errors are still serialised', async (t) => {
  const plain = { a: { b: [1, 2, { c: 'x' }] } }
  t.equal(redactSecrets(plain), plain, 'no copy when nothing is redacted')
  const out = sink()
  createLogger({ level: 'info', format: 'json', destination: out.destination }).error({ err: new Error('boom') }, 'failed')
  t.match(out.lines()[0], { err: { message: 'boom', type: 'Error' } })
})

t.test('a peer-triggered message is limited per reason; the rest of the window is counted and reported', async (t) => {
  const out = sink()
  let now = 1_000_000
  const logger = createLogger({ level: 'info', format: 'json', destination: out.destination, rateLimit: { windowMs: 10_000, burst: 3 }, now: () => now })
  for (let i = 0; i < 10; i++) logger.info({ sni: `x${i}.example`, reason: 'unknown_sni' }, 'raw quic handshake refused')
  logger.info({ sni: 'y.example', reason: 'missing_sni' }, 'raw quic handshake refused')
  for (let i = 0; i < 10; i++) logger.info({ i }, 'target snapshot published')
  const rejected = (): Array<Record<string, unknown>> => out.lines().filter((l) => l.msg === 'raw quic handshake refused')
  t.same(rejected().map((l) => l.reason), ['unknown_sni', 'unknown_sni', 'unknown_sni', 'missing_sni'], 'three per reason, and another reason has its own budget')
  t.equal(out.lines().filter((l) => l.msg === 'target snapshot published').length, 10, 'messages a peer cannot cause are not limited')
  now += 10_000
  logger.info({ sni: 'z.example', reason: 'unknown_sni' }, 'raw quic handshake refused')
  t.match(out.lines().find((l) => l.msg === 'log lines suppressed'), { message: 'raw quic handshake refused', reason: 'unknown_sni', suppressed: 7 })
  t.equal(rejected().length, 5, 'a new window logs again')
})

t.test('the suppressed count is reported when the window ends even if the flood stopped', async (t) => {
  const out = sink()
  const logger = createLogger({ level: 'debug', format: 'json', destination: out.destination, rateLimit: { windowMs: 50, burst: 1 } })
  for (let i = 0; i < 5; i++) logger.debug({ err: 'HPE_INVALID_METHOD' }, 'front door http/1.1 client error')
  const summary = await waitFor(() => out.lines().find((l) => l.msg === 'log lines suppressed'), { message: 'the summary line' })
  t.match(summary, { message: 'front door http/1.1 client error', suppressed: 4 })
})

t.test('every rate-limited message is one the router logs (a renamed line would escape the limit)', async (t) => {
  const root = new URL('../../', import.meta.url).pathname
  let source = ''
  for (const dir of ['lib', 'server']) {
    for (const entry of await readdir(join(root, dir), { recursive: true })) {
      if (entry.endsWith('.ts') && entry !== 'log.ts') source += await readFile(join(root, dir, entry), 'utf8')
    }
  }
  for (const { msg } of PEER_TRIGGERED_MESSAGES) t.ok(source.includes(msg.replace(/\*$/, '')), msg)
})
