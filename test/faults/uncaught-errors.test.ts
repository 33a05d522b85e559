// The process-level safety net (lib/uncaught-errors.ts, wired in server/main.ts). An
// uncaught error that concerned one connection already gone (here Node's own
// ERR_HTTP2_INVALID_SESSION, as the rapid-reset guard threw it) is logged, counted in
// stargate_k8s_router_uncaught_errors_total{kind}, and the router keeps serving; any other
// uncaught error or unhandled rejection is logged at fatal and ends the process with exit 1,
// for the orchestrator to restart it. With the handlers fixed no wire input reaches the net,
// so a preloaded test fixture makes the errors on SIGUSR2 (test/fixtures/uncaught-trigger.ts).
import t from 'tap'
import { exitWithin, startReadyRouter } from '../fixtures/router-process.ts'
import { uncaughtTriggerEnv } from '../fixtures/uncaught-trigger.ts'
import { probe } from '../fixtures/fault-probe.ts'
import { waitFor } from '../fixtures/wait.ts'

t.setTimeout(90_000)

const METRIC = 'stargate_k8s_router_uncaught_errors_total'

for (const mode of ['contained', 'contained-rejection'] as const) {
  t.test(`a contained uncaught error (${mode}) is counted and logged, and the router keeps serving`, async (t) => {
    const { p, health } = await startReadyRouter(t, [], { env: uncaughtTriggerEnv(mode) })
    const router = probe(health)
    t.equal(await router.metric(METRIC, { kind: 'ERR_HTTP2_INVALID_SESSION' }), 0, 'the series exists from the start at 0')
    for (let i = 1; i <= 3; i++) {
      p.child.kill('SIGUSR2')
      await waitFor(async () => await router.metric(METRIC, { kind: 'ERR_HTTP2_INVALID_SESSION' }) === i, { message: `${i} counted` })
    }
    t.pass('three counted')
    t.equal(await router.livez(), 200, '/livez answers')
    t.equal(p.child.exitCode, null, 'the router is still running')
    const lines = p.logs().filter((l) => l.msg === 'uncaught error contained to one connection')
    t.equal(lines.length, 3, 'each logged')
    t.match(lines[0], { level: 40, kind: 'ERR_HTTP2_INVALID_SESSION', source: mode === 'contained' ? 'exception' : 'rejection', err: { code: 'ERR_HTTP2_INVALID_SESSION' } }, 'at warn, with the code and the error')
  })
}

for (const mode of ['fatal', 'fatal-rejection'] as const) {
  t.test(`any other uncaught error (${mode}) is logged at fatal and ends the process with exit 1`, async (t) => {
    const { p } = await startReadyRouter(t, [], { env: uncaughtTriggerEnv(mode) })
    p.child.kill('SIGUSR2')
    const exit = await exitWithin(p, 15_000)
    t.same(exit, { code: 1, signal: null }, 'exit 1')
    const line = p.logs().find((l) => l.msg === 'uncaught error: exiting')
    t.ok(line !== undefined, 'the fatal line is out before the exit')
    t.match(line, { level: 60, source: mode === 'fatal' ? 'exception' : 'rejection', err: { message: /deliberate test/, stack: /uncaught-trigger\.ts/ } }, 'with the error and its stack')
  })
}
