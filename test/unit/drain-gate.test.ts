// SPEC §11: the per-connection decision of the drain mechanism (lib/drain/drain-gate.ts) as a
// table: each row is a sequence of what a connection sees, with the answer expected at each
// step. Failure modes: work admitted after the drain began, a connection that closes with work
// still open, one that never closes, or one told to close twice.
import t from 'tap'
import { DrainGate } from '../../lib/drain/drain-gate.ts'

type Step =
  | readonly ['admit', boolean]
  | readonly ['adopt']
  | readonly ['release', boolean]
  | readonly ['begin', boolean]

const cases: ReadonlyArray<{ readonly name: string, readonly steps: readonly Step[], readonly open: number, readonly done: boolean }> = [
  { name: 'a drain with nothing open closes at once', steps: [['begin', true]], open: 0, done: true },
  { name: 'open work holds the close until its last piece ends', steps: [['admit', true], ['admit', true], ['begin', false], ['release', false], ['release', true]], open: 0, done: true },
  { name: 'new work is refused once draining', steps: [['admit', true], ['begin', false], ['admit', false], ['release', true]], open: 0, done: true },
  { name: 'work that ends before any drain closes nothing', steps: [['admit', true], ['release', false]], open: 0, done: false },
  { name: 'a second begin changes nothing and does not close twice', steps: [['begin', true], ['begin', false]], open: 0, done: true },
  { name: 'work of before the drain that shows up late (adopt) is waited for too', steps: [['admit', true], ['begin', false], ['adopt'], ['release', false], ['release', true]], open: 0, done: true },
  { name: 'a release with nothing open does not go negative', steps: [['release', false], ['admit', true], ['begin', false], ['release', true]], open: 0, done: true },
]

for (const c of cases) {
  t.test(c.name, async (t) => {
    const gate = new DrainGate()
    for (const [i, step] of c.steps.entries()) {
      switch (step[0]) {
        case 'admit':
          t.equal(gate.admit(), step[1], `step ${i}: admit`)
          break
        case 'adopt':
          gate.adopt()
          break
        case 'release':
          t.equal(gate.release(), step[1], `step ${i}: release`)
          break
        case 'begin':
          t.equal(gate.begin('shutdown'), step[1], `step ${i}: begin`)
          break
      }
    }
    t.equal(gate.open, c.open, 'open work at the end')
    t.equal(gate.done, c.done, 'told to close')
  })
}

t.test('the first reason is the one kept', async (t) => {
  const gate = new DrainGate()
  t.equal(gate.reason, null)
  gate.adopt()
  gate.begin('shutdown')
  t.equal(gate.reason, 'shutdown')
  t.equal(gate.draining, true)
})
