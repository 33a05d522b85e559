/**
 * Well-formed HTTP/3 messages (RFC 9114 §4.1.2, §4.2, §4.3, §4.4; RFC 9220 §3). A malformed
 * message is a stream error H3_MESSAGE_ERROR; these are the rules the core applies.
 */
import t from 'tap'
import { checkFieldLine, validateRequest, validateResponse, validateTrailers } from '../../lib/quic/h3/message.ts'
import type { FieldLine } from '../../lib/quic/h3/qpack.ts'

const WT_CONNECT: FieldLine[] = [
  [':method', 'CONNECT'], [':protocol', 'webtransport'], [':scheme', 'https'],
  [':authority', 'stargate-0.example'], [':path', '/_stargate/webtransport'],
  ['x-inference-server-id', 'a'], ['x-inference-server-id', 'b'], ['sec-webtransport-http3-draft02', '1'],
]

t.test('an extended CONNECT splits into its pseudo-headers and its regular fields, repeats kept', async (t) => {
  const result = validateRequest(WT_CONNECT)
  t.same(result, {
    ok: true,
    head: {
      method: 'CONNECT', scheme: 'https', authority: 'stargate-0.example', path: '/_stargate/webtransport', protocol: 'webtransport',
      fields: [['x-inference-server-id', 'a'], ['x-inference-server-id', 'b'], ['sec-webtransport-http3-draft02', '1']],
    },
  })
})

t.test('a GET takes its authority from host when :authority is absent', async (t) => {
  const result = validateRequest([[':method', 'GET'], [':scheme', 'https'], [':path', '/'], ['host', 'h.example']])
  t.match(result, { ok: true, head: { authority: 'h.example', protocol: null } })
})

t.test('malformed requests are refused with a reason', async (t) => {
  const without = (name: string): FieldLine[] => WT_CONNECT.filter(([n]) => n !== name)
  const cases: readonly [string, FieldLine[], RegExp][] = [
    ['no :method', without(':method'), /without :method/],
    ['extended CONNECT without :scheme', without(':scheme'), /without :scheme/],
    ['extended CONNECT without :path', without(':path'), /without :path/],
    ['extended CONNECT without :authority', without(':authority'), /without :authority/],
    [':protocol on GET', [[':method', 'GET'], [':scheme', 'https'], [':path', '/'], [':protocol', 'webtransport']], /not CONNECT/],
    ['plain CONNECT with :path', [[':method', 'CONNECT'], [':authority', 'a:1'], [':path', '/']], /RFC 9114 §4.4/],
    ['plain CONNECT without :authority', [[':method', 'CONNECT']], /without :authority/],
    ['pseudo after regular', [...WT_CONNECT.slice(0, 2), ['x', '1'], ...WT_CONNECT.slice(2)], /after regular/],
    ['repeated pseudo', [...WT_CONNECT.slice(0, 5), [':path', '/x'], ...WT_CONNECT.slice(5)], /:path repeated/],
    ['unknown pseudo', [[':method', 'GET'], [':status', '200']], /not a request pseudo-header/],
    ['upper-case name', [...WT_CONNECT, ['X-Id', '1']], /not lower-case/],
    ['connection header', [...WT_CONNECT, ['connection', 'close']], /connection-specific/],
    ['transfer-encoding', [...WT_CONNECT, ['transfer-encoding', 'chunked']], /connection-specific/],
    ['te other than trailers', [...WT_CONNECT, ['te', 'gzip']], /te other than/],
    ['CR LF in a value', [...WT_CONNECT, ['x', 'a\r\nb: c']], /NUL, CR or LF/],
    ['space in a name', [...WT_CONNECT, ['x y', '1']], /invalid character/],
    ['empty name', [...WT_CONNECT, ['', '1']], /empty field name/],
  ]
  for (const [label, fields, detail] of cases) t.match(validateRequest(fields), { ok: false, detail }, label)
  t.match(validateRequest([...WT_CONNECT, ['te', 'trailers']]), { ok: true }, 'te: trailers is allowed')
})

t.test('responses need exactly one 3-digit :status and no 101', async (t) => {
  t.same(validateResponse([[':status', '200'], ['sec-webtransport-http3-draft', 'draft02']]), { ok: true, head: { status: 200, fields: [['sec-webtransport-http3-draft', 'draft02']] } })
  t.match(validateResponse([[':status', '429'], ['retry-after', '1']]), { ok: true, head: { status: 429 } })
  for (const [label, fields] of [
    ['missing', [['x', '1']]], ['repeated', [[':status', '200'], [':status', '200']]], ['two digits', [[':status', '20']]],
    ['not digits', [[':status', '2x0']]], ['600', [[':status', '600']]], ['101', [[':status', '101']]], ['request pseudo', [[':status', '200'], [':path', '/']]],
  ] as const) t.match(validateResponse(fields as unknown as FieldLine[]), { ok: false }, label)
})

t.test('trailers carry no pseudo-headers', async (t) => {
  t.match(validateTrailers([['grpc-status', '0']]), { ok: true })
  t.match(validateTrailers([[':status', '200']]), { ok: false })
})

t.test('field values keep latin1 bytes but no surrounding whitespace', async (t) => {
  t.equal(checkFieldLine('x', '\u00ff\u0080'), null)
  t.match(checkFieldLine('x', ' a'), /whitespace/)
  t.match(checkFieldLine('x', 'a\t'), /whitespace/)
})
