/**
 * Process entry point: flags/env -> config -> startRouter, signals and exit codes, as the
 * Rust stargate-k8s-router has them:
 *
 *   2  usage error: unknown flag, a flag without its value, a value not of the flag's type,
 *      a missing required flag (clap's exit code)
 *   1  a configuration that parses but is invalid, or a start-up that fails (no Kubernetes
 *      configuration, unusable TLS material, a port that cannot be bound); also a second
 *      signal during the drain
 *   0  --help, a graceful shutdown, or a signal that arrives while the router is starting
 *
 * An uncaught exception or unhandled rejection exits 1 after its log line, unless it concerned
 * one connection only (lib/uncaught-errors.ts): that one is logged and counted, and the router
 * keeps serving.
 *
 * Every failure is one line on stderr, `stargate-router: ` + what and the fix.
 */
import { ConfigError, parseConfig, type Config } from '../lib/config/config.ts'
import { STARTUP_ERRORS, type StartupErrorCode } from '../lib/config/errors.ts'
import { fillMessage } from '../lib/error-catalogue.ts'
import { pino } from 'pino'
import { createLogger, type Logger } from '../lib/log.ts'
import { installSafetyNet } from '../lib/uncaught-errors.ts'

/** A configuration error, before anything is logged: the one stderr line and the exit code. */
function fail (code: 1 | 2, message: string): never {
  process.stderr.write(`stargate-router: ${message}\n`)
  process.exit(code)
}

/**
 * Exits once the log lines written so far are out: the stdout destination is asynchronous, and
 * exiting while a write was in flight dropped the last lines ("shutdown complete") on a loaded
 * machine. logger.flush(cb) waits for that write only with minLength > 0 (sonic-boom 4 calls
 * back at once otherwise), hence the destination below. A stdout nobody reads must not hold
 * the exit: 2 s at most.
 */
function exitAfterLogs (logger: Logger, code: number, maxWaitMs = 2000): void {
  setTimeout(() => { process.exit(code) }, Math.max(0, maxWaitMs))
  logger.flush(() => { process.exit(code) })
}

/** A start-up failure once logging runs: the one stderr line, then its exit code after the logs. */
function failAfterLogs (logger: Logger, code: StartupErrorCode, message: string): void {
  process.stderr.write(`stargate-router: ${message}\n`)
  exitAfterLogs(logger, STARTUP_ERRORS[code].exit)
}

function readConfig (): Config | null {
  try {
    const parsed = parseConfig(process.argv.slice(2), process.env)
    if (parsed.kind === 'config') return parsed.config
    process.stdout.write(parsed.text)
    return null
  } catch (err) {
    if (err instanceof ConfigError) fail(err.exitCode, err.message)
    throw err
  }
}

/** Where the process is, for the signal handler. */
type Phase =
  | { readonly kind: 'starting' }
  | { readonly kind: 'running', shutdown (): Promise<void> }
  | { readonly kind: 'stopping' }

/**
 * SPEC §11: the process is gone within the drain timeout + 1 s whatever is open. The router's
 * shutdown keeps to that budget itself (server/router.ts); this is the backstop if it did not,
 * e.g. a close() that never settles: log, and exit 1 at the end of the second.
 */
function armShutdownWatchdog (logger: Logger, deadline: number, drainMs: number): void {
  setTimeout(() => {
    logger.error({ drainMs, budgetMs: drainMs + SHUTDOWN_BUDGET_EXTRA_MS }, 'shutdown did not finish within the drain timeout + 1 s: exiting')
    exitAfterLogs(logger, 1, 0)
  }, Math.max(0, deadline - Date.now()))
}

/** The budget past the drain timeout (SPEC §11). */
const SHUTDOWN_BUDGET_EXTRA_MS = 1000

function handleSignals (logger: Logger, drainMs: number): { running (shutdown: () => Promise<void>): void } {
  let phase: Phase = { kind: 'starting' }
  const onSignal = (signal: NodeJS.Signals): void => {
    switch (phase.kind) {
      case 'starting':
        // Nothing is being served yet, so there is nothing to drain: stop cleanly now rather
        // than finish a start-up nobody wants (a pod deleted while it starts).
        logger.info({ signal }, 'signal received during start-up: exiting')
        phase = { kind: 'stopping' }
        exitAfterLogs(logger, 0)
        break
      case 'running': {
        const { shutdown } = phase
        phase = { kind: 'stopping' }
        const deadline = Date.now() + drainMs + SHUTDOWN_BUDGET_EXTRA_MS
        armShutdownWatchdog(logger, deadline, drainMs)
        logger.info({ signal }, 'signal received')
        // The last lines may take what is left of the budget to flush, no more.
        shutdown().then(() => {
          exitAfterLogs(logger, 0, deadline - Date.now())
        }, (err: unknown) => {
          logger.error({ err }, 'shutdown failed')
          exitAfterLogs(logger, 1, deadline - Date.now())
        })
        break
      }
      case 'stopping':
        logger.warn({ signal }, 'second signal: exiting at once')
        exitAfterLogs(logger, 1)
        break
      default: {
        const never: never = phase
        throw new Error(`unexpected phase ${String(never)}`)
      }
    }
  }
  process.on('SIGTERM', onSignal)
  process.on('SIGINT', onSignal)
  return { running (shutdown) { phase = { kind: 'running', shutdown } } }
}

async function main (): Promise<void> {
  const config = readConfig()
  if (config === null) return
  // minLength 1: every line is written as soon as it is logged (as with 0), and flush(cb)
  // waits for the write in flight (see exitAfterLogs). Pretty output goes to pino's transport.
  const logger = config.logFormat === 'json'
    ? createLogger({ level: config.logLevel, format: 'json', destination: pino.destination({ dest: 1, sync: false, minLength: 1 }) })
    : createLogger({ level: config.logLevel, format: config.logFormat })
  const signals = handleSignals(logger, config.shutdownDrainTimeoutMs)
  // Before anything serves: an uncaught error that concerned one connection is counted and the
  // process keeps serving, any other ends it once the log is out (lib/uncaught-errors.ts).
  const { createMetrics } = await import('../lib/metrics/metrics.ts')
  const metrics = createMetrics()
  installSafetyNet(process, {
    logger,
    onContained: (kind) => { metrics.uncaughtErrors.labels(kind).inc() },
    exit: (code) => { exitAfterLogs(logger, code) },
  })
  // After the handlers: from this line on a signal ends the start-up cleanly.
  logger.info({
    listenAddr: config.listenAddr,
    reverseTunnelListenAddr: config.reverseTunnelListenAddr,
    healthListenAddr: config.healthListenAddr,
    discovery: config.discovery,
    targetNamespace: config.targetNamespace,
    targetServiceName: config.targetServiceName,
    advertisedHostnameTemplate: config.advertisedHostnameTemplate,
    tunnelProtocol: config.tunnelProtocol,
    frontDoorTls: config.frontDoorTls,
  }, 'starting stargate router')
  // Loaded only now: the server stack takes most of a second of CPU to import, which --help
  // and configuration errors should not pay (the Kubernetes client, as long again, only
  // when the API server is used).
  const { startRouter } = await import('./router.ts')
  let kubeConfig
  // Peer discovery through --peer-service watches the API server even with --discovery file.
  if (config.discovery === 'kubernetes' || (config.enablePeerDiscovery && config.peerService !== null)) {
    const { loadKubeConfig } = await import('../lib/discovery/kube-config.ts')
    const loaded = loadKubeConfig(process.env)
    if (!loaded.ok) {
      failAfterLogs(logger, 'no_kube_config', loaded.message)
      return
    }
    kubeConfig = loaded.kubeConfig
  }
  let router
  try {
    router = await startRouter(config, { logger, metrics, ...(kubeConfig === undefined ? {} : { kubeConfig }) })
  } catch (err) {
    const e = err as NodeJS.ErrnoException
    const code = e.code === 'EADDRINUSE' || e.code === 'EACCES' || e.code === 'EADDRNOTAVAIL' ? 'cannot_listen' : 'start_failed'
    const message = fillMessage(STARTUP_ERRORS[code].message, { cause: e.message })
    logger.fatal({ err: e.message }, message)
    failAfterLogs(logger, code, message)
    return
  }
  signals.running(router.shutdown)
}

await main()
