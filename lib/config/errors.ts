/**
 * How start-up fails (as the Rust stargate-k8s-router): one line on stderr,
 * `stargate-router: ` + what was wrong and the fix, and an exit code. One entry per kind of
 * failure; the message of a configuration error names its flag and value, so those are written
 * where the flag is checked (lib/config/config.ts) and this table gives their kind's exit code.
 * Indexed with the other areas in lib/errors.ts and documented in docs/errors.md.
 */
import { catalogueArea, type ErrorDoc } from '../error-catalogue.ts'

/** message: the stderr text after the prefix, a template where the code fills it, else an example. */
export const STARTUP_ERRORS = {
  usage: {
    exit: 2,
    message: 'e.g. invalid --advertised-grpc-port \'abc\': expected a whole number',
    meaning: 'the command line or an environment variable cannot be read as the flags\' types: an unknown flag, a flag without its value, a value of the wrong type (a number, a choice, host:port, an explicit http(s) URI), a missing required flag (clap\'s usage errors)',
    action: 'fix the flag the message names; `--help` lists them all with their environment variables',
  },
  invalid: {
    exit: 1,
    message: 'e.g. missing --tls-key-path: --tls-cert-path and --tls-key-path must be given together',
    meaning: 'every value parses but the configuration is not usable (flags that need each other, a bad hostname template, an http:// remote Watch URL without its opt-in)',
    action: 'do what the message says; docs/configuration.md describes every flag',
  },
  no_kube_config: {
    exit: 1,
    message: 'no Kubernetes configuration found (…) / cannot load Kubernetes configuration from …: …',
    meaning: 'Kubernetes discovery (or --peer-service) needs the API server, and neither the in-cluster service account nor a kubeconfig was found',
    action: 'run in a pod with a service account, set KUBECONFIG, or use --discovery file',
  },
  cannot_listen: {
    exit: 1,
    message: 'cannot listen: {cause}; choose another address with --listen-addr, --reverse-tunnel-listen-addr or --health-listen-addr',
    meaning: 'a port is taken, privileged or the address is not on this host (EADDRINUSE, EACCES, EADDRNOTAVAIL)',
    action: 'choose another address with the flag named',
  },
  start_failed: {
    exit: 1,
    message: 'start-up failed: {cause}',
    meaning: 'a component could not start (e.g. unusable TLS material); the cause says which',
    action: 'fix what the cause names; the fatal log line has the same text',
  },
} as const satisfies Record<string, ErrorDoc & { readonly exit: 1 | 2, readonly message: string }>

export type StartupErrorCode = keyof typeof STARTUP_ERRORS

export const STARTUP_ERROR_AREA = catalogueArea(STARTUP_ERRORS, 'STARTUP_ERRORS', 'lib/config/errors.ts', (e) => `exit ${e.exit}, \`stargate-router: ${e.message}\``, {
  title: 'Start-up',
  where: 'One line on stderr, `stargate-router: ` + the message, and the exit code (0 is --help, a clean shutdown, or a signal during start-up).',
})
