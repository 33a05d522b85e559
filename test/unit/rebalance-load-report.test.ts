// SPEC §10, replica balancing: what a replica accepts from a peer's /debug/load. Every byte of
// it is hostile (a peer may be a different program on the health port, a bug, or an attacker
// on the pod network): only a JSON object with a whole count from 0 to 10,000,000 for every
// kind passes; anything else is an invalid_response, which counts as an unread peer (nothing
// moves). Fields it does not know are ignored, so newer replicas can add some.
import t from 'tap'
import { parseLoadReport } from '../../lib/rebalance/load-report.ts'

const GOOD = { registration: 3, raw_quic: 4, webtransport: 0 }

const ACCEPTED: ReadonlyArray<readonly [string, unknown, boolean]> = [
  ['the document a router sends', { self: { address: '10.0.0.1', id: 'routers/a' }, draining: false, connections: GOOD, rebalance: null }, false],
  ['without self, draining or rebalance', { connections: GOOD }, false],
  ['draining', { connections: GOOD, draining: true }, true],
  ['with kinds and fields it does not know', { connections: { ...GOOD, quic_v2: 9 }, extra: [1, 2, 3] }, false],
  ['at the largest count', { connections: { ...GOOD, raw_quic: 10_000_000 } }, false],
]

const REJECTED: ReadonlyArray<readonly [string, string, RegExp]> = [
  ['not JSON', '<html>503</html>', /^body is not JSON$/],
  ['an empty body', '', /^body is not JSON$/],
  ['a JSON array', '[1,2,3]', /^body is not a JSON object$/],
  ['JSON null', 'null', /^body is not a JSON object$/],
  ['no connections', '{"self":{}}', /no connections/],
  ['connections as an array', '{"connections":[1,2,3]}', /no connections/],
  ['a kind missing', JSON.stringify({ connections: { registration: 1, raw_quic: 1 } }), /connections\.webtransport/],
  ['a negative count', JSON.stringify({ connections: { ...GOOD, registration: -1 } }), /connections\.registration is not a whole number/],
  ['a fraction', JSON.stringify({ connections: { ...GOOD, raw_quic: 1.5 } }), /connections\.raw_quic/],
  ['a count as a string', JSON.stringify({ connections: { ...GOOD, raw_quic: '4' } }), /connections\.raw_quic/],
  ['a count above the bound', JSON.stringify({ connections: { ...GOOD, raw_quic: 10_000_001 } }), /from 0 to 10000000/],
  ['a huge number', '{"connections":{"registration":1e400,"raw_quic":0,"webtransport":0}}', /connections\.registration/],
  ['null counts', JSON.stringify({ connections: { registration: null, raw_quic: 0, webtransport: 0 } }), /connections\.registration/],
  ['draining not a boolean', JSON.stringify({ connections: GOOD, draining: 'yes' }), /draining is not true or false/],
  ['a prototype key instead of a count', '{"connections":{"__proto__":{"registration":5},"raw_quic":0,"webtransport":0}}', /connections\.registration/],
]

t.test('a well-formed load is accepted with its counts and draining flag', async (t) => {
  for (const [why, doc, draining] of ACCEPTED) {
    const result = parseLoadReport(JSON.stringify(doc))
    t.ok(result.ok, why)
    if (result.ok) {
      t.equal(result.load.draining, draining, `${why}: draining ${draining}`)
      t.equal(result.load.connections.registration, 3, why)
      t.notOk('quic_v2' in result.load.connections, `${why}: only the known kinds are kept`)
    }
  }
})

t.test('anything else is an invalid_response that says what was wrong', async (t) => {
  for (const [why, text, message] of REJECTED) {
    const result = parseLoadReport(text)
    t.equal(result.ok, false, why)
    if (!result.ok) {
      t.equal(result.reason, 'invalid_response', why)
      t.match(result.message, message, why)
    }
  }
})
