// SPEC §10: when a peer counts as divergent. Pure rules, table-driven: a digest that
// differs for at least the grace period is divergent; a failed check is an error and never
// divergence; agreement clears it. And what a /debug/snapshot body must hold to be compared.
import t from 'tap'
import { INITIAL_PEER_STATE, nextPeerState, type PeerCheckState } from '../../lib/discovery/peer-divergence.ts'
import { parsePeerSnapshot, type PeerSnapshotResult } from '../../lib/discovery/peer-snapshot-fetch.ts'

const OURS = 'digest-ours'
const GRACE = 1000

function ok (digest: string, generation = 7): PeerSnapshotResult {
  return { ok: true, snapshot: { initialized: true, generation, digest } }
}

const TIMEOUT: PeerSnapshotResult = { ok: false, reason: 'timeout', message: 'no answer within 2000 ms' }

/** Runs checks at the given times and returns the state after each. */
function run (steps: ReadonlyArray<readonly [number, PeerSnapshotResult]>): PeerCheckState[] {
  const states: PeerCheckState[] = []
  let state = INITIAL_PEER_STATE
  for (const [now, result] of steps) {
    state = nextPeerState(state, result, OURS, now, GRACE)
    states.push(state)
  }
  return states
}

t.test('a peer that agrees is never divergent', async (t) => {
  const states = run([[0, ok(OURS)], [5000, ok(OURS)]])
  t.strictSame(states.map((s) => [s.differingSince, s.divergent]), [[null, false], [null, false]])
})

t.test('a peer that differs is divergent once the grace period has passed, not before', async (t) => {
  const states = run([[100, ok('other')], [600, ok('other')], [1099, ok('other')], [1100, ok('other')], [3000, ok('other')]])
  t.strictSame(states.map((s) => [s.differingSince, s.divergent]), [[100, false], [100, false], [100, false], [100, true], [100, true]])
})

t.test('a peer that catches up stops being divergent at the next check', async (t) => {
  const states = run([[0, ok('other')], [2000, ok('other')], [2500, ok(OURS)], [2600, ok('other')]])
  t.strictSame(states.map((s) => [s.differingSince, s.divergent]), [[0, false], [0, true], [null, false], [2600, false]], 'differing starts over after agreement')
})

t.test('a grace period of 0 reports a differing peer at once', async (t) => {
  const state = nextPeerState(INITIAL_PEER_STATE, ok('other'), OURS, 42, 0)
  t.equal(state.divergent, true)
})

t.test('a failed check is an error, not divergence, and keeps what was last seen', async (t) => {
  const [, , errored, again] = run([[0, ok('other', 3)], [2000, ok('other', 3)], [2500, TIMEOUT], [2600, TIMEOUT]])
  t.equal(errored!.divergent, false, 'unknown is not divergent')
  t.equal(errored!.digest, 'other', 'last seen digest kept')
  t.equal(errored!.generation, 3)
  t.equal(errored!.differingSince, 0, 'since when it differs is kept')
  t.strictSame(errored!.lastError, { reason: 'timeout', message: 'no answer within 2000 ms', at: 2500 })
  t.equal(again!.consecutiveErrors, 2)
})

t.test('a peer that only ever fails is never divergent', async (t) => {
  const states = run([[0, TIMEOUT], [5000, { ok: false, reason: 'http_status', message: 'HTTP 500' }], [9000, { ok: false, reason: 'invalid_response', message: 'body is not JSON' }]])
  t.ok(states.every((s) => !s.divergent && s.differingSince === null && s.digest === null))
  t.equal(states.at(-1)!.lastError?.reason, 'invalid_response')
})

t.test('a peer that still differs after a run of errors is divergent at once if the grace period passed meanwhile', async (t) => {
  const states = run([[0, ok('other')], [500, TIMEOUT], [1500, ok('other')]])
  t.strictSame(states.map((s) => s.divergent), [false, false, true])
  t.equal(states[2]!.consecutiveErrors, 0)
  t.equal(states[2]!.lastError?.reason, 'timeout', 'the last error stays visible')
})

t.test('a /debug/snapshot body needs a whole generation and a string digest', async (t) => {
  const cases: Array<[string, string, PeerSnapshotResult]> = [
    ['a router snapshot', '{"initialized":true,"generation":4,"digest":"abc","ageSeconds":0,"targets":[]}', { ok: true, snapshot: { initialized: true, generation: 4, digest: 'abc' } }],
    ['an uninitialized router', '{"initialized":false,"generation":0,"digest":""}', { ok: true, snapshot: { initialized: false, generation: 0, digest: '' } }],
    ['not JSON', '<html>hello</html>', { ok: false, reason: 'invalid_response', message: 'body is not JSON' }],
    ['a JSON array', '[1,2]', { ok: false, reason: 'invalid_response', message: 'body is not a JSON object' }],
    ['no generation', '{"digest":"abc"}', { ok: false, reason: 'invalid_response', message: 'body has no generation (a whole number)' }],
    ['a fractional generation', '{"generation":1.5,"digest":"abc"}', { ok: false, reason: 'invalid_response', message: 'body has no generation (a whole number)' }],
    ['a negative generation', '{"generation":-1,"digest":"abc"}', { ok: false, reason: 'invalid_response', message: 'body has no generation (a whole number)' }],
    ['no digest', '{"generation":1}', { ok: false, reason: 'invalid_response', message: 'body has no digest (a string)' }],
    ['a numeric digest', '{"generation":1,"digest":5}', { ok: false, reason: 'invalid_response', message: 'body has no digest (a string)' }],
    ['an absurd digest', `{"generation":1,"digest":"${'x'.repeat(300)}"}`, { ok: false, reason: 'invalid_response', message: 'body has no digest (a string)' }],
  ]
  for (const [why, body, want] of cases) t.strictSame(parsePeerSnapshot(body), want, why)
})
