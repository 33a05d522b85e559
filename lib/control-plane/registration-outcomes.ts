/** Bounded outcome labels of registration stream metrics (invalid_response: a pod's answer Node refuses to re-send). */
export const REGISTRATION_OUTCOMES = ['forwarded', 'invalid_argument', 'target_unavailable', 'connect_error', 'upstream_reset', 'drained', 'invalid_response'] as const
export type RegistrationOutcome = typeof REGISTRATION_OUTCOMES[number]
