// SPEC §11: the stream ledger of a WebTransport-over-HTTP/2 session (lib/tunnel/
// webtransport-h2/streams.ts), as a table of capsule sequences. Failure modes: a session
// closed while a stream is open, one never closed because a finished stream stays counted, a
// stream opened before the drain refused, a new one let through.
import t from 'tap'
import { WtStreamLedger, type Side, type StreamCapsule } from '../../lib/tunnel/webtransport-h2/streams.ts'

type Step = readonly [Side, StreamCapsule, number] | readonly ['drain']

const cases: ReadonlyArray<{ readonly name: string, readonly steps: readonly Step[], readonly open: number, readonly refused?: readonly number[] }> = [
  { name: 'a bidi stream is open until both sides sent FIN', steps: [['pylon', 'stream', 1], ['stargate', 'stream', 1], ['pylon', 'stream_fin', 1]], open: 1 },
  { name: 'and closed with the second FIN', steps: [['pylon', 'stream_fin', 1], ['stargate', 'stream_fin', 1]], open: 0 },
  { name: 'a reset ends its sender\'s side, STOP_SENDING the other\'s', steps: [['pylon', 'stream', 1], ['pylon', 'reset', 1], ['pylon', 'stop', 1]], open: 0 },
  { name: 'a uni stream ends with its opener\'s FIN', steps: [['stargate', 'stream', 2], ['stargate', 'stream_fin', 2]], open: 0 },
  { name: 'a uni stream ends with the receiver\'s STOP_SENDING', steps: [['pylon', 'stream', 3], ['stargate', 'stop', 3]], open: 0 },
  { name: 'the opener is whoever sent the first capsule, whatever the id\'s low bit', steps: [['stargate', 'stream', 5], ['stargate', 'stream_fin', 5], ['pylon', 'stream', 4]], open: 2 },
  { name: 'a capsule for a stream done already does not reopen it', steps: [['pylon', 'stream_fin', 1], ['stargate', 'stream_fin', 1], ['pylon', 'stream', 1]], open: 0 },
  { name: 'signals for unknown streams open nothing', steps: [['pylon', 'reset', 9], ['stargate', 'stop', 9]], open: 0 },
  { name: 'draining: a new bidi stream is refused, one opened before goes on', steps: [['pylon', 'stream', 1], ['drain'], ['pylon', 'stream', 5], ['stargate', 'stream', 4]], open: 1, refused: [5, 4] },
  { name: 'draining: a late capsule of an older stream id is not a new stream', steps: [['pylon', 'stream', 5], ['drain'], ['pylon', 'stream', 1]], open: 1, refused: [] },
  { name: 'draining: uni streams are relayed', steps: [['drain'], ['pylon', 'stream', 3]], open: 1, refused: [] },
  { name: 'draining: a refused stream\'s later capsules are ignored', steps: [['drain'], ['pylon', 'stream', 1], ['pylon', 'stream_fin', 1]], open: 0, refused: [1] },
]

for (const c of cases) {
  t.test(c.name, async (t) => {
    const ledger = new WtStreamLedger()
    const refused: number[] = []
    for (const step of c.steps) {
      if (step[0] === 'drain') {
        ledger.beginDrain()
        continue
      }
      const [side, kind, id] = step as readonly [Side, StreamCapsule, number]
      if (ledger.onCapsule(side, kind, id) === 'refuse') refused.push(id)
    }
    t.equal(ledger.open, c.open, 'streams open')
    if (c.refused !== undefined) t.same(refused, c.refused, 'refused')
  })
}

t.test('more streams than tracked: the ledger says it can no longer tell', async (t) => {
  const ledger = new WtStreamLedger()
  for (let i = 0; i < 4097; i++) ledger.onCapsule('pylon', 'stream', i * 4)
  t.equal(ledger.open, 4096)
  t.equal(ledger.overflow, true)
})
