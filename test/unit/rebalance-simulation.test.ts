// SPEC §10, replica balancing: why the rule is two-sided. A model of random re-placement through
// an L4 load balancer (test/fixtures/rebalance-model.ts: three replicas running decide() on the
// same figures, a moved connection landing on a random replica, the one it left included).
// A one-sided rule (moves only while some replica is above the band) gets stuck in states such
// as 12/12/6, where nobody is above the band 8..12 and the new replica stays starved; the
// two-sided rule ends inside the band in (nearly) every run, and once inside never moves again.
// Seeded, so every run of this file sees the same placements.
import t from 'tap'
import { runModel, seeded, type Rule } from '../fixtures/rebalance-model.ts'

const RUNS = 1000
const TOLERANCE = 0.2
const INTERVALS = 60

interface Tally {
  readonly inBand: number
  readonly movesAfterBalanced: number
  readonly balancedAt: readonly number[]
}

/** 30 connections placed on two replicas, then a third comes up empty: a rollout or a scale-up. */
function thirdJoins (random: () => number): number[] {
  let first = 0
  for (let i = 0; i < 30; i++) if (random() < 0.5) first++
  return [first, 30 - first, 0]
}

function tally (rule: Rule, initial: (random: () => number) => number[], seed: number): Tally {
  const random = seeded(seed)
  let inBand = 0
  let movesAfterBalanced = 0
  const balancedAt: number[] = []
  for (let i = 0; i < RUNS; i++) {
    const result = runModel({ initial: initial(random), tolerance: TOLERANCE, maxMovesPerInterval: 0, intervals: INTERVALS, rule, random })
    if (result.inBand) inBand++
    movesAfterBalanced += result.movesAfterBalanced
    if (result.balancedAt !== null) balancedAt.push(result.balancedAt)
  }
  balancedAt.sort((a, b) => a - b)
  return { inBand, movesAfterBalanced, balancedAt }
}

function quantile (sorted: readonly number[], q: number): number | null {
  return sorted.length === 0 ? null : sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))] as number
}

function describe (name: string, rule: Rule, result: Tally): string {
  return `${name}, ${rule}: inside the band in ${(100 * result.inBand / RUNS).toFixed(1)} % of ${RUNS} runs; ` +
    `balanced after p50 ${quantile(result.balancedAt, 0.5)} / p99 ${quantile(result.balancedAt, 0.99)} intervals; ${result.movesAfterBalanced} moves once balanced`
}

t.test('a third replica joining 30 tunnels on two: two-sided ends inside the band in nearly every run, one-sided in under half', async (t) => {
  const two = tally('two-sided', thirdJoins, 1)
  const one = tally('one-sided', thirdJoins, 1)
  t.comment(describe('third joins', 'two-sided', two))
  t.comment(describe('third joins', 'one-sided', one))
  t.ok(two.inBand >= 0.98 * RUNS, 'two-sided: at least 98 % of runs inside the band')
  t.ok(one.inBand <= 0.5 * RUNS, 'one-sided: at most half')
  t.equal(two.movesAfterBalanced, 0, 'no move once every replica is inside the band')
})

t.test('all 60 tunnels on the replica that came up first: the two-sided rule spreads them', async (t) => {
  const two = tally('two-sided', () => [60, 0, 0], 2)
  const one = tally('one-sided', () => [60, 0, 0], 2)
  t.comment(describe('60/0/0', 'two-sided', two))
  t.comment(describe('60/0/0', 'one-sided', one))
  t.ok(two.inBand >= 0.98 * RUNS, 'two-sided: at least 98 % of runs inside the band')
  t.ok(one.inBand < two.inBand, 'one-sided: fewer')
  t.equal(two.movesAfterBalanced, 0)
})

t.test('12/12/6 stays starved with the one-sided rule and evens out with the two-sided one', async (t) => {
  const two = runModel({ initial: [12, 12, 6], tolerance: TOLERANCE, maxMovesPerInterval: 0, intervals: INTERVALS, rule: 'two-sided', random: seeded(3) })
  const one = runModel({ initial: [12, 12, 6], tolerance: TOLERANCE, maxMovesPerInterval: 0, intervals: INTERVALS, rule: 'one-sided', random: seeded(3) })
  t.strictSame(one.final, [12, 12, 6], 'one-sided: nothing ever moves')
  t.equal(one.moves, 0)
  t.equal(two.inBand, true, `two-sided: ends at ${two.final.join('/')}`)
  t.ok(two.moves > 0)
})
